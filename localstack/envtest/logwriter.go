package envtest

import (
	"strings"
	"sync"
	"testing"
)

// testWriter sends each log line to t.Log until the test ends. Runner
// goroutines may still log while a test's cleanups run; t.Log after the
// test has completed panics, so lines written after that are dropped.
type testWriter struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

func newTestWriter(t testing.TB) *testWriter {
	w := &testWriter{t: t}
	// Registered first, so it runs last among the test's cleanups.
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.closed = true
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
