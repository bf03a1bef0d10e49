package eventsource

import (
	"context"
	"sync"
)

// groupGate admits at most one batch per FIFO message group. SQS already
// withholds a group while a batch of it is in flight; the gate makes the
// runner's guarantee independent of the emulator getting that right.
type groupGate struct {
	mu   sync.Mutex
	busy map[string]chan struct{}
}

func newGroupGate() *groupGate { return &groupGate{busy: map[string]chan struct{}{}} }

// enter waits until none of groups is busy, then marks them all busy. It
// reports whether it had to wait, and fails (marking nothing) if ctx ends
// first.
func (g *groupGate) enter(ctx context.Context, groups []string) (waited bool, err error) {
	g.mu.Lock()
	for {
		var wait chan struct{}
		for _, grp := range groups {
			if ch, ok := g.busy[grp]; ok {
				wait = ch
				break
			}
		}
		if wait == nil {
			break
		}
		waited = true
		g.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return waited, ctx.Err()
		}
		g.mu.Lock()
	}
	for _, grp := range groups {
		g.busy[grp] = make(chan struct{})
	}
	g.mu.Unlock()
	return waited, nil
}

// leave frees groups and wakes the batches waiting for them.
func (g *groupGate) leave(groups []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, grp := range groups {
		if ch, ok := g.busy[grp]; ok {
			close(ch)
			delete(g.busy, grp)
		}
	}
}
