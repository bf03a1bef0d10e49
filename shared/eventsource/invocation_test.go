package eventsource

import (
	"context"
	"testing"
	"time"
)

// TestInvocationContextIsTheFunctionsOwn: a handler's deadline is its
// function's timeout from now, never the runner's (a settle window), and
// the runner ending still cancels it.
func TestInvocationContextIsTheFunctionsOwn(t *testing.T) {
	parent, stopParent := context.WithTimeout(context.Background(), time.Hour)
	defer stopParent()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration // 0: no deadline
	}{
		{"the function's timeout, past the runner's deadline", 2 * time.Hour, 2 * time.Hour},
		{"a shorter function timeout", time.Minute, time.Minute},
		{"no timeout: no deadline at all", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := invocationContext(parent, tc.timeout)
			defer cancel()
			d, ok := ctx.Deadline()
			if ok != (tc.want > 0) {
				t.Fatalf("deadline set %v, want %v", ok, tc.want > 0)
			}
			if ok {
				if left := time.Until(d); left > tc.want || left < tc.want-time.Minute/2 {
					t.Fatalf("deadline in %v, want about %v", left, tc.want)
				}
			}
		})
	}

	runner, stopRunner := context.WithCancel(context.Background())
	ctx, cancel := invocationContext(runner, time.Hour)
	defer cancel()
	stopRunner()
	select {
	case <-ctx.Done():
		if ctx.Err() != context.Canceled {
			t.Fatalf("the invocation ended with %v, want canceled", ctx.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner stopped but its handler's context was not cancelled")
	}
}
