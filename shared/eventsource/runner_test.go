package eventsource_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/spec"
)

// quiet is how long the pipeline must be still before RunUntilIdle returns.
const quiet = 300 * time.Millisecond

// The tests of failures run with a visibility timeout long enough that a
// handled message is never redelivered, however loaded the machine (a
// success redelivered would be counted twice), and bring failures back
// after retryAfter (Source.RetryAfter). Their run limit is below the
// visibility timeout: a failure that waited it out fails the test.
const (
	longVisibility  = 5 * time.Minute
	retryAfter      = time.Second
	failureRunLimit = 3 * time.Minute
)

// runLimit bounds every other run: generous, since the whole suite shares
// one emulator on a two-core machine.
const runLimit = 2 * time.Minute

// send puts bodies on a queue, in order; for a FIFO queue all in group,
// each with an explicit deduplication id.
func send(t *testing.T, c *sqs.Client, url, group string, bodies ...string) {
	t.Helper()
	for len(bodies) > 0 {
		n := min(len(bodies), 10)
		var entries []sqstypes.SendMessageBatchRequestEntry
		for i, b := range bodies[:n] {
			e := sqstypes.SendMessageBatchRequestEntry{
				Id:          aws.String(strconv.Itoa(i)),
				MessageBody: aws.String(b),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{
					"kind": {DataType: aws.String("String"), StringValue: aws.String("test")},
				},
			}
			if group != "" {
				e.MessageGroupId = aws.String(group)
				// SQS allows only alphanumerics and punctuation, ≤ 128, in
				// a deduplication id: not a body's spaces or ünïcode.
				e.MessageDeduplicationId = aws.String(fmt.Sprintf("%s/%x", group, sha256.Sum256([]byte(b))))
			}
			entries = append(entries, e)
		}
		out, err := c.SendMessageBatch(t.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			t.Fatalf("send to %s: %v", url, err)
		}
		if len(out.Failed) > 0 {
			t.Fatalf("send to %s: %d failed: %s", url, len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
		bodies = bodies[n:]
	}
}

func runUntilIdle(t *testing.T, r *eventsource.Runner, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	if err := r.RunUntilIdle(ctx, quiet); err != nil {
		t.Fatalf("RunUntilIdle: %v", err)
	}
}

func group(m events.SQSMessage) string { return m.Attributes["MessageGroupId"] }

// overlap counts batches in flight. A handler that calls wait holds its
// batch (for at most ten seconds) until `want` batches have been in
// flight at once, so a test of concurrency does not depend on how fast the
// emulator answers receives on a busy machine.
type overlap struct {
	mu        sync.Mutex
	now, most int
	want      int
	reached   chan struct{}
}

func newOverlap(want int) *overlap { return &overlap{want: want, reached: make(chan struct{})} }

func (o *overlap) enter() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now++
	// Closed the first time only: batches can overlap `want` deep again
	// later (under load they do, and a second close panicked the handler).
	if o.now == o.want && o.most < o.want {
		close(o.reached)
	}
	o.most = max(o.most, o.now)
}

func (o *overlap) wait() {
	select {
	case <-o.reached:
	case <-time.After(10 * time.Second):
	}
}

func (o *overlap) leave() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now--
}

func (o *overlap) max() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.most
}

// TestFIFOOneBatchPerGroupInOrder: with several groups and concurrent
// batches, no group ever has two batches in flight, and each group is
// handled in send order. It also checks the event's shape.
func TestFIFOOneBatchPerGroupInOrder(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	url := env.Deployment.QueueURLs[spec.BlockOps]
	groups := []string{"t1/A", "t1/B", "t2/C", "t2/D"}
	const perGroup = 12
	for _, g := range groups {
		var bodies []string
		for i := range perGroup {
			bodies = append(bodies, fmt.Sprintf("%s#%02d", g, i))
		}
		send(t, env.Clients.SQS, url, g, bodies...)
	}

	var mu sync.Mutex
	inFlight := map[string]bool{}
	seen := map[string][]string{}
	ov := newOverlap(2)
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		mine := map[string]bool{}
		mu.Lock()
		for _, m := range ev.Records {
			g := group(m)
			if inFlight[g] && !mine[g] {
				t.Errorf("group %s: a second batch in flight", g)
			}
			inFlight[g], mine[g] = true, true
			seen[g] = append(seen[g], m.Body)
			if m.EventSource != "aws:sqs" || m.EventSourceARN == "" || m.AWSRegion == "" ||
				m.Attributes["ApproximateReceiveCount"] == "" || m.Attributes["MessageDeduplicationId"] == "" ||
				m.Attributes["SentTimestamp"] == "" || aws.ToString(m.MessageAttributes["kind"].StringValue) != "test" {
				t.Errorf("record lacks Lambda's fields: %+v", m)
			}
		}
		mu.Unlock()
		ov.enter()
		ov.wait()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		for g := range mine {
			inFlight[g] = false
		}
		mu.Unlock()
		ov.leave()
		return events.SQSEventResponse{}, nil
	}
	r := eventsource.New(env.Clients.SQS, env.Logger, eventsource.Source{
		Name: "ops", QueueURL: url, FIFO: true, BatchSize: 3, MaxConcurrency: 4, Handler: h,
	})
	runUntilIdle(t, r, runLimit)

	for _, g := range groups {
		if len(seen[g]) != perGroup || !slices.IsSorted(seen[g]) {
			t.Errorf("group %s handled as %v, want its %d messages in order, once each", g, seen[g], perGroup)
		}
	}
	if ov.max() < 2 {
		t.Errorf("at most %d batch in flight: the test did not exercise concurrency", ov.max())
	}
	st := r.Stats()["ops"]
	if st.Messages != int64(len(groups)*perGroup) || st.Failures != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestPartialFailure: reported failures, and only they (plus, for FIFO,
// the rest of their group), come back.
func TestPartialFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		queue spec.QueueID
		fifo  bool
		// sent per group ("" for a standard queue)
		sent map[string][]string
		fail string // failed on its first delivery
		// twice is what must be delivered exactly twice; all else once.
		twice []string
	}{
		{
			name: "standard", queue: spec.BlockEvents,
			sent:  map[string][]string{"": {"m0", "m1", "m2", "m3", "m4"}},
			fail:  "m2",
			twice: []string{"m2"},
		},
		{
			name: "fifo", queue: spec.CleanerEvents, fifo: true,
			sent:  map[string][]string{"g": {"g0", "g1", "g2", "g3", "g4"}, "h": {"h0", "h1", "h2"}},
			fail:  "g2",
			twice: []string{"g2", "g3", "g4"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := envtest.New(t, envtest.WithVisibilityTimeout(longVisibility))
			url := env.Deployment.QueueURLs[tc.queue]
			for _, g := range []string{"", "g", "h"} {
				if bodies, ok := tc.sent[g]; ok {
					send(t, env.Clients.SQS, url, g, bodies...)
				}
			}
			var mu sync.Mutex
			deliveries := map[string]int{}
			var order []string
			h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				mu.Lock()
				defer mu.Unlock()
				var resp events.SQSEventResponse
				for _, m := range ev.Records {
					deliveries[m.Body]++
					order = append(order, m.Body)
					if m.Body == tc.fail && deliveries[m.Body] == 1 {
						resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
					}
				}
				return resp, nil
			}
			r := eventsource.New(env.Clients.SQS, env.Logger, eventsource.Source{
				Name: "src", QueueURL: url, FIFO: tc.fifo, BatchSize: 10, MaxConcurrency: 2, Handler: h, RetryAfter: retryAfter,
			})
			runUntilIdle(t, r, failureRunLimit)

			for _, bodies := range tc.sent {
				for _, b := range bodies {
					want := 1
					if slices.Contains(tc.twice, b) {
						want = 2
					}
					if deliveries[b] != want {
						t.Errorf("%s delivered %d times, want %d (order %v)", b, deliveries[b], want, order)
					}
				}
			}
			if tc.fifo {
				// The redelivery keeps the group's order.
				var g []string
				for _, b := range order {
					if b[0] == 'g' {
						g = append(g, b)
					}
				}
				want := []string{"g0", "g1", "g2", "g3", "g4", "g2", "g3", "g4"}
				if !slices.Equal(g, want) {
					t.Errorf("group g handled as %v, want %v", g, want)
				}
			}
		})
	}
}

// TestHandlerErrorAndPanicFailTheBatch: both leave every message of the
// batch for redelivery, and a panic does not stop the runner.
func TestHandlerErrorAndPanicFailTheBatch(t *testing.T) {
	t.Parallel()
	env := envtest.New(t, envtest.WithVisibilityTimeout(longVisibility))
	url := env.Deployment.QueueURLs[spec.BlockEvents]
	send(t, env.Clients.SQS, url, "", "a", "b", "c")
	var mu sync.Mutex
	calls := 0
	deliveries := map[string]int{}
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		mu.Lock()
		calls++
		n := calls
		for _, m := range ev.Records {
			deliveries[m.Body]++
		}
		mu.Unlock()
		switch n {
		case 1:
			panic("handler crashed")
		case 2:
			return events.SQSEventResponse{}, fmt.Errorf("handler failed")
		}
		return events.SQSEventResponse{}, nil
	}
	r := eventsource.New(env.Clients.SQS, env.Logger, eventsource.Source{Name: "src", QueueURL: url, BatchSize: 10, MaxConcurrency: 1, Handler: h, RetryAfter: retryAfter})
	runUntilIdle(t, r, failureRunLimit)
	for _, b := range []string{"a", "b", "c"} {
		if deliveries[b] < 2 {
			t.Errorf("%s delivered %d times: a failed batch was deleted", b, deliveries[b])
		}
	}
	if st := r.Stats()["src"]; st.Errors != 2 {
		t.Errorf("stats %+v, want 2 errors", st)
	}
}

// TestPoisonMessageGoesToDLQ: a message that always fails is received
// maxReceiveCount times, then lands in the DLQ with its body and
// attributes intact; the others are unaffected.
func TestPoisonMessageGoesToDLQ(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		queue spec.QueueID
		group string
	}{{spec.BlockEvents, ""}, {spec.CompactionJobs, "t1/out"}} {
		t.Run(string(tc.queue), func(t *testing.T) {
			t.Parallel()
			const maxReceive = 2
			env := envtest.New(t, envtest.WithVisibilityTimeout(longVisibility), envtest.WithMaxReceiveCount(maxReceive))
			d := env.Deployment
			poison := `{"poison":"body with \"quotes\" and ünïcode"}`
			send(t, env.Clients.SQS, d.QueueURLs[tc.queue], tc.group, poison)
			var mu sync.Mutex
			receives := 0
			h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				var resp events.SQSEventResponse
				for _, m := range ev.Records {
					if m.Body == poison {
						mu.Lock()
						receives++
						mu.Unlock()
						resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
					}
				}
				return resp, nil
			}
			r := eventsource.New(env.Clients.SQS, env.Logger, eventsource.Source{
				Name: "src", QueueURL: d.QueueURLs[tc.queue], FIFO: tc.group != "", BatchSize: 1, MaxConcurrency: 2, Handler: h, RetryAfter: retryAfter,
			})
			runUntilIdle(t, r, failureRunLimit)
			if receives != maxReceive {
				t.Errorf("poison handled %d times, want maxReceiveCount = %d", receives, maxReceive)
			}
			if n, err := eventsource.Pending(t.Context(), env.Clients.SQS, d.DLQURLs[tc.queue]); err != nil || n != 1 {
				t.Fatalf("DLQ holds %d messages (%v), want the poison one", n, err)
			}
			m := receiveOne(t, env.Clients.SQS, d.DLQURLs[tc.queue])
			if aws.ToString(m.Body) != poison {
				t.Errorf("DLQ body %q, want %q", aws.ToString(m.Body), poison)
			}
			if aws.ToString(m.MessageAttributes["kind"].StringValue) != "test" {
				t.Errorf("DLQ message lost its attributes: %+v", m.MessageAttributes)
			}
			if tc.group != "" && m.Attributes["MessageGroupId"] != tc.group {
				t.Errorf("DLQ message group %q, want %q", m.Attributes["MessageGroupId"], tc.group)
			}
		})
	}
}

// TestStandardQueueSpreadsBatches: a standard queue's batches run
// concurrently, up to MaxConcurrency and never more.
func TestStandardQueueSpreadsBatches(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	url := env.Deployment.QueueURLs[spec.BlockEvents]
	var bodies []string
	for i := range 30 {
		bodies = append(bodies, strconv.Itoa(i))
	}
	send(t, env.Clients.SQS, url, "", bodies...)
	const limit = 4
	var mu sync.Mutex
	handled := 0
	ov := newOverlap(limit)
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		mu.Lock()
		handled += len(ev.Records)
		mu.Unlock()
		ov.enter()
		defer ov.leave()
		ov.wait()
		time.Sleep(20 * time.Millisecond)
		return events.SQSEventResponse{}, nil
	}
	r := eventsource.New(env.Clients.SQS, env.Logger, eventsource.Source{Name: "events", QueueURL: url, BatchSize: 2, MaxConcurrency: limit, Handler: h})
	runUntilIdle(t, r, runLimit)
	if handled != len(bodies) {
		t.Errorf("handled %d messages, want %d", handled, len(bodies))
	}
	if m := ov.max(); m < 2 || m > limit {
		t.Errorf("at most %d batches in flight, want 2..%d", m, limit)
	}
	t.Logf("max batches in flight: %d of %d", ov.max(), limit)
}

// TestTimerFeedsTheQueue: timers fire during RunUntilIdle, and the work a
// timer sends is handled before the runner is idle.
func TestTimerFeedsTheQueue(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	url := env.Deployment.QueueURLs[spec.CleanerEvents]
	var mu sync.Mutex
	ticks, handled := 0, 0
	r := eventsource.New(env.Clients.SQS, env.Logger, eventsource.Source{
		Name: "cleaner", QueueURL: url, FIFO: true, Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			mu.Lock()
			handled += len(ev.Records)
			mu.Unlock()
			return events.SQSEventResponse{}, nil
		},
	})
	r.Every("sweep", 50*time.Millisecond, func(ctx context.Context) error {
		mu.Lock()
		ticks++
		first := ticks == 1
		mu.Unlock()
		if first {
			_, err := env.Clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{
				QueueUrl: aws.String(url), MessageBody: aws.String(spec.SweepEvent),
				MessageGroupId: aws.String("sweep"), MessageDeduplicationId: aws.String("sweep-1"),
			})
			return err
		}
		return nil
	})
	runUntilIdle(t, r, runLimit)
	if handled != 1 || ticks < 2 {
		t.Errorf("handled %d, ticks %d; want the timer's message handled and the timer still firing", handled, ticks)
	}
	if st := r.Stats()["sweep"]; st.Invocations < 2 || st.Errors != 0 {
		t.Errorf("timer stats %+v", st)
	}
}

// receiveOne receives the one message a queue is known to hold. A receive
// is not idempotent: when its response is lost and the SDK retries it
// (the emulator drops a connection now and then under load), the first
// attempt hid the message from the second. So each receive hides the
// message for one second only, and receiveOne tries again until it has it.
func receiveOne(t *testing.T, c *sqs.Client, url string) sqstypes.Message {
	t.Helper()
	for range 5 {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 2, VisibilityTimeout: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		switch len(out.Messages) {
		case 0:
			continue
		case 1:
			return out.Messages[0]
		}
		t.Fatalf("%s holds %d messages, want one", url, len(out.Messages))
	}
	t.Fatalf("%s holds a message that five receives did not return", url)
	return sqstypes.Message{}
}

// TestIdleOutlastsOneEmptyReading: the queue counts are separate
// attributes, read one after another, and a message whose visibility
// timeout ends between the two readings is in neither (moto does this, and
// it ended a CI run with a redelivery still due). One reading that misses
// the waiting message must not end the run: the failed message is still
// handled again and reaches the DLQ.
func TestIdleOutlastsOneEmptyReading(t *testing.T) {
	t.Parallel()
	const maxReceive = 2
	env := envtest.New(t, envtest.WithVisibilityTimeout(longVisibility), envtest.WithMaxReceiveCount(maxReceive))
	d := env.Deployment
	url := d.QueueURLs[spec.BlockEvents]
	send(t, env.Clients.SQS, url, "", "poison")

	var mu sync.Mutex
	receives, blanked := 0, 0
	// blankOnce makes the first count reading after the first failure
	// report an empty queue, as the interleaving above does.
	blankOnce := middleware.InitializeMiddlewareFunc("blank-once", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleInitialize(ctx, in)
		if res, ok := out.Result.(*sqs.GetQueueAttributesOutput); ok && err == nil {
			mu.Lock()
			if receives == 1 && blanked == 0 {
				blanked++
				for k := range res.Attributes {
					res.Attributes[k] = "0"
				}
			}
			mu.Unlock()
		}
		return out, md, err
	})
	c := sqs.New(env.Clients.SQS.Options(), func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(blankOnce, middleware.Before)
		})
	})
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		for _, m := range ev.Records {
			mu.Lock()
			receives++
			mu.Unlock()
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
		return resp, nil
	}
	r := eventsource.New(c, env.Logger, eventsource.Source{Name: "src", QueueURL: url, BatchSize: 1, MaxConcurrency: 1, Handler: h, RetryAfter: retryAfter})
	runUntilIdle(t, r, failureRunLimit)
	if blanked != 1 {
		t.Fatalf("blanked %d count readings, want 1: the test did not interleave", blanked)
	}
	if receives != maxReceive {
		t.Errorf("poison handled %d times, want maxReceiveCount = %d: the run ended on one empty reading", receives, maxReceive)
	}
	n, err := eventsource.Pending(t.Context(), env.Clients.SQS, d.DLQURLs[spec.BlockEvents])
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("DLQ holds %d messages, want the poison one", n)
	}
}

// TestBusyTimerDoesNotHoldTheEnd: a timer whose runs take longer than its
// interval is running at almost every moment, as a sweep is on a loaded
// emulator. RunUntilIdle must still end once the queues are quiet (when
// timer runs held it, ci45's demo finished every job and never settled),
// and RunDue runs each timer that is due — one that never ran, one whose
// interval has passed — once, to the end.
func TestBusyTimerDoesNotHoldTheEnd(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	url := env.Deployment.QueueURLs[spec.CleanerEvents]
	var mu sync.Mutex
	started, finished, hourly := 0, 0, 0
	r := eventsource.New(env.Clients.SQS, env.Logger, eventsource.Source{
		Name: "cleaner", QueueURL: url, FIFO: true, Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{}, nil
		},
	})
	r.Every("busy", 10*time.Millisecond, func(ctx context.Context) error {
		mu.Lock()
		started++
		mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		mu.Lock()
		finished++
		mu.Unlock()
		return nil
	})
	r.Every("hourly", time.Hour, func(ctx context.Context) error {
		mu.Lock()
		hourly++
		mu.Unlock()
		return nil
	})
	runUntilIdle(t, r, runLimit)
	mu.Lock()
	if started < 2 {
		t.Errorf("the busy timer started %d times while the runner ran, want at least 2", started)
	}
	mu.Unlock()
	if err := r.RunDue(t.Context()); err != nil {
		t.Fatalf("RunDue: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if hourly != 1 {
		t.Errorf("RunDue ran the hourly timer %d times, want 1", hourly)
	}
	if st := r.Stats()["hourly"]; st.Invocations != 1 || st.Errors != 0 {
		t.Errorf("hourly timer stats %+v, want one invocation and no error", st)
	}
	if finished < 1 {
		t.Errorf("RunDue returned before the busy timer's run finished (%d finished)", finished)
	}
	mu.Unlock()
	if err := r.RunDue(t.Context()); err != nil {
		t.Fatalf("RunDue: %v", err)
	}
	mu.Lock()
	if hourly != 1 {
		t.Errorf("a second RunDue ran the hourly timer again (%d runs): it is not due for an hour", hourly)
	}
}
