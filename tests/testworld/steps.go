package testworld

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/pipeline"
)

// ErrCrash is what a paused handler gets back from its hook when the test
// crashes it there: the handler stops at that step as a killed Lambda would.
var ErrCrash = errors.New("testworld: crashed at a protocol step")

// Steps is a pipeline.Hook that pauses handlers at protocol steps, so a test
// can order rival handlers exactly: arm a Pause with At, start the handler,
// Wait until it is there, run the rival, then Release (or Crash) it.
// It also keeps a trace of every step it saw, for failure messages.
type Steps struct {
	// Next, when set, is called at every step after the pause (if any)
	// ended: the Monitor's hook, a fault injector.
	Next pipeline.Hook

	mu     sync.Mutex
	pauses []*Pause
	trace  []string
}

// Pause is one armed pause: the first step named Step whose subject contains
// Subject stops there until Release or Crash.
type Pause struct {
	Step    pipeline.Step
	Subject string

	reached chan string
	release chan error
	hit     bool
}

// At arms a one-shot pause at step for a subject containing subject ("" =
// any subject).
func (s *Steps) At(step pipeline.Step, subject string) *Pause {
	p := &Pause{Step: step, Subject: subject, reached: make(chan string, 1), release: make(chan error, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pauses = append(s.pauses, p)
	return p
}

// Hook is the pipeline.Hook.
func (s *Steps) Hook(ctx context.Context, step pipeline.Step, subject string) error {
	s.mu.Lock()
	s.trace = append(s.trace, fmt.Sprintf("%s %s", step, subject))
	var p *Pause
	for _, c := range s.pauses {
		if !c.hit && c.Step == step && strings.Contains(subject, c.Subject) {
			c.hit, p = true, c
			break
		}
	}
	s.mu.Unlock()
	if p != nil {
		p.reached <- subject
		select {
		case err := <-p.release:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.Next != nil {
		return s.Next(ctx, step, subject)
	}
	return nil
}

// Trace is every step seen so far, in order.
func (s *Steps) Trace() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.trace...)
}

// Wait blocks until a handler reached the pause and returns its subject; it
// fails t after timeout.
func (p *Pause) Wait(t testing.TB, timeout time.Duration) string {
	t.Helper()
	select {
	case s := <-p.reached:
		p.reached <- s // Wait may be called again
		return s
	case <-time.After(timeout):
		t.Fatalf("no handler reached step %s (subject ~ %q) within %v", p.Step, p.Subject, timeout)
		return ""
	}
}

// Reached reports, without waiting, whether a handler is (or was) there.
func (p *Pause) Reached() bool {
	select {
	case s := <-p.reached:
		p.reached <- s
		return true
	default:
		return false
	}
}

// Release lets the paused handler go on.
func (p *Pause) Release() { p.release <- nil }

// Crash makes the paused handler stop there with ErrCrash.
func (p *Pause) Crash() { p.release <- ErrCrash }
