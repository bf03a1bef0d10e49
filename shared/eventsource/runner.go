// Package eventsource is Lambda's SQS event source mapping, in a process:
// it polls each queue with the event source's semantics and calls the same
// handler functions in-process. Lambda does not run in the emulator, so
// the local platform's tests and demo run the pipeline through it; `sluice
// run` does the same against any deployment, the emulator's or AWS's.
//
// What it reproduces, because Sluice's correctness depends on it:
//
//   - batches of up to BatchSize (≤ 10) messages, handed to the handler as
//     an aws-lambda-go events.SQSEvent with every system and message
//     attribute (ApproximateReceiveCount, MessageGroupId, ...);
//   - at most MaxConcurrency batches of a source in flight at once; a
//     standard queue's batches run concurrently;
//   - FIFO: one batch in flight per message group, in group order;
//   - ReportBatchItemFailures: successes are deleted, failures are left for
//     the visibility timeout to redeliver, and in a FIFO batch every message
//     after a failed one in the same group is left too, so the group's order
//     holds on redelivery;
//   - a handler error or panic fails the whole batch (the panic is
//     recovered and logged, like a crashed invocation);
//   - redrive to the DLQ after maxReceiveCount: the emulators (moto,
//     LocalStack) move such a message on receive, as SQS does; should an
//     emulator not, the runner moves it itself, body and attributes intact.
//
// Like Lambda, it does not extend visibility while a handler runs: a handler
// slower than the visibility timeout sees its messages again.
package eventsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/awsenv"
)

// Handler is a Lambda SQS handler with ReportBatchItemFailures.
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// Defaults for zero Source fields.
const (
	DefaultBatchSize      = 10
	DefaultMaxConcurrency = 5
	// MaxBatchSize is the most SQS returns per receive.
	MaxBatchSize = 10
)

// A poller waits idlePoll after an empty receive, twice as long after
// each further one, up to maxIdlePoll, and receives again at once when
// Wake names its queue. Receives are short polls: a long poll in flight
// when Run stops would be cut off mid-request (and moto_serial.py
// emulates long polls by short polls anyway), while a sleep ends at once.
// The backoff is what Lambda's long polls give for free: an idle queue
// costs next to nothing. Without it every idle poller of every test world
// asked the one emulator ten times a second, and that load, not the work,
// set how long the suite took. Wake keeps the hop from a handler's send to
// the next handler as short as a long poll's.
const (
	idlePoll    = 100 * time.Millisecond
	maxIdlePoll = time.Second
)

// Source is one event source mapping: a queue and the handler it feeds.
type Source struct {
	// Name identifies the source in logs and Stats; unique per Runner.
	Name     string
	QueueURL string
	// FIFO must match the queue; Run checks it.
	FIFO bool
	// BatchSize is the most messages per invocation, 1 to 10 (0 means
	// DefaultBatchSize).
	BatchSize int
	// MaxConcurrency bounds the batches in flight (0 means
	// DefaultMaxConcurrency).
	MaxConcurrency int
	// Timeout, when positive, is the handler's deadline, as a function's
	// timeout is in Lambda.
	Timeout time.Duration
	// RetryAfter, when positive, brings the messages a batch leaves on the
	// queue (reported failures, the FIFO messages after them, a failed
	// batch) back after RetryAfter (whole seconds, at least one) instead of
	// after the queue's visibility timeout, by ChangeMessageVisibility.
	// Lambda has no such setting; tests use it so that a queue's
	// visibility timeout can be long enough that a slow handler on a
	// loaded machine is never redelivered while a failure still comes back
	// at once. Zero is Lambda's behaviour.
	RetryAfter time.Duration
	Handler    Handler
}

// SourceStats counts what a source (or a timer) did.
type SourceStats struct {
	// Invocations is how often the handler (or timer function) was called.
	Invocations int64
	// Messages is how many messages were handed to the handler.
	Messages int64
	// Failures is how many handed messages were not deleted: reported
	// failures, the FIFO messages after them, and whole failed batches.
	Failures int64
	// Errors is how many invocations returned an error or panicked.
	Errors int64
	// Redriven is how many messages the runner itself moved to the DLQ
	// (zero with an emulator that redrives on receive).
	Redriven int64
}

// Runner polls its sources and runs its timers. Build it with New, add
// timers with Every, then call Run or RunUntilIdle once at a time.
type Runner struct {
	sqs     *sqs.Client
	region  string
	log     *slog.Logger
	sources []Source
	timers  []timer

	mu       sync.Mutex
	running  bool // Run has been called and has not returned
	polling  bool // Run's pollers and timers are running
	stats    map[string]*SourceStats
	inflight int                      // batches in progress (timer runs are not counted: see RunUntilIdle)
	lastWork time.Time                // last start or end of a batch
	lastRun  map[string]time.Time     // timer name → the start of its last run that was not cut short
	wake     map[string]chan struct{} // queue URL → its poller's wake-up (buffered 1)
}

type timer struct {
	name     string
	interval time.Duration
	fn       func(context.Context) error
}

// New returns a runner of sources on c. A nil logger discards logs.
func New(c *sqs.Client, logger *slog.Logger, sources ...Source) *Runner {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{sqs: c, region: c.Options().Region, log: logger, stats: map[string]*SourceStats{}, lastRun: map[string]time.Time{},
		wake: map[string]chan struct{}{}}
	for _, s := range sources {
		if s.BatchSize == 0 {
			s.BatchSize = DefaultBatchSize
		}
		if s.MaxConcurrency == 0 {
			s.MaxConcurrency = DefaultMaxConcurrency
		}
		r.sources = append(r.sources, s)
		r.stats[s.Name] = &SourceStats{}
		if r.wake[s.QueueURL] == nil {
			r.wake[s.QueueURL] = make(chan struct{}, 1)
		}
	}
	return r
}

// Wake tells the poller of queueURL that a message was just sent there,
// so it receives now instead of at the end of its idle wait. It never
// blocks; a queue the runner does not poll is ignored. (Lambda's long
// polls see a new message as soon as it is sent.)
func (r *Runner) Wake(queueURL string) {
	ch := r.wake[queueURL]
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Every runs fn every interval while Run runs (first after one interval),
// like a scheduled Lambda invocation, e.g. the cleaner's sweep. Its runs
// count in Stats under name; an error is logged. Call it before Run.
func (r *Runner) Every(name string, interval time.Duration, fn func(context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timers = append(r.timers, timer{name: name, interval: interval, fn: fn})
	r.stats[name] = &SourceStats{}
}

// Stats returns a copy of every source's and timer's counts, by name.
func (r *Runner) Stats() map[string]SourceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]SourceStats, len(r.stats))
	for k, v := range r.stats {
		out[k] = *v
	}
	return out
}

// Run polls every source and runs every timer until ctx is done, then waits
// for the batches in flight (their context is cancelled too) and returns
// nil. It fails at once on a source that is misconfigured or whose queue
// cannot be read.
func (r *Runner) Run(ctx context.Context) error {
	queues, err := r.start(ctx)
	if err != nil {
		return err
	}
	defer r.stop()
	r.mu.Lock()
	r.polling = true
	r.lastWork = time.Now()
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i := range r.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.poll(ctx, &r.sources[i], queues[i])
		}()
	}
	for _, t := range r.timers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.tick(ctx, t)
		}()
	}
	wg.Wait()
	return nil
}

// start validates the configuration, marks the runner running and reads
// each source queue's attributes.
func (r *Runner) start(ctx context.Context) ([]queueInfo, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return nil, errors.New("runner: Run is already running")
	}
	r.running = true
	r.mu.Unlock()
	queues := make([]queueInfo, len(r.sources))
	for i, s := range r.sources {
		q, err := r.describe(ctx, s)
		if err != nil {
			r.stop()
			return nil, err
		}
		queues[i] = q
	}
	return queues, nil
}

func (r *Runner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running, r.polling = false, false
}

func (r *Runner) validate() error {
	names := map[string]bool{}
	for _, s := range r.sources {
		switch {
		case s.Name == "":
			return fmt.Errorf("runner: a source of %s has no name", s.QueueURL)
		case names[s.Name]:
			return fmt.Errorf("runner: two sources or timers named %q", s.Name)
		case s.QueueURL == "":
			return fmt.Errorf("runner: source %s has no queue URL", s.Name)
		case s.Handler == nil:
			return fmt.Errorf("runner: source %s has no handler", s.Name)
		case s.BatchSize < 1 || s.BatchSize > MaxBatchSize:
			return fmt.Errorf("runner: source %s: batch size %d, want 1 to %d", s.Name, s.BatchSize, MaxBatchSize)
		case s.MaxConcurrency < 1:
			return fmt.Errorf("runner: source %s: max concurrency %d, want at least 1", s.Name, s.MaxConcurrency)
		}
		names[s.Name] = true
	}
	for _, t := range r.timers {
		switch {
		case t.name == "" || names[t.name]:
			return fmt.Errorf("runner: timer name %q is empty or taken", t.name)
		case t.interval <= 0:
			return fmt.Errorf("runner: timer %s: interval %v, want > 0", t.name, t.interval)
		case t.fn == nil:
			return fmt.Errorf("runner: timer %s has no function", t.name)
		}
		names[t.name] = true
	}
	return nil
}

// tick runs one timer until ctx is done.
func (r *Runner) tick(ctx context.Context, t timer) {
	tk := time.NewTicker(t.interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		r.runTimer(ctx, t)
	}
}

// RunDue runs, now and one after another, every timer that has not run
// for its interval (or never has), as its schedule would have by now; it
// returns the first error and runs the rest. Runs are counted in Stats
// as the ticking ones are.
func (r *Runner) RunDue(ctx context.Context) error {
	var first error
	for _, t := range r.timers {
		r.mu.Lock()
		last, ran := r.lastRun[t.name]
		r.mu.Unlock()
		if ran && time.Since(last) < t.interval {
			continue
		}
		if err := r.runTimer(ctx, t); err != nil && first == nil {
			first = fmt.Errorf("timer %s: %w", t.name, err)
		}
	}
	return first
}

// runTimer runs t once, counting it and logging its failure.
func (r *Runner) runTimer(ctx context.Context, t timer) error {
	start := time.Now()
	err := protect(func() error { return t.fn(awsenv.WithCaller(ctx, t.name)) })
	r.mu.Lock()
	// A run cut short by the runner's end does not count: RunDue runs it
	// again.
	if ctx.Err() == nil {
		r.lastRun[t.name] = start
	}
	st := r.stats[t.name]
	st.Invocations++
	if err != nil && ctx.Err() == nil {
		st.Errors++
	}
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		r.log.ErrorContext(ctx, "timer failed", "timer", t.name, "err", err)
	}
	return err
}

// protect calls fn and turns a panic into an error.
func protect(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn()
}
