package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/pipeline"
)

// handler is a Lambda SQS handler with ReportBatchItemFailures.
type handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// bus is the seed's SQS and Lambda event sources, in memory, under the
// scheduler's control. The emulator's SQS would do as well, but every
// event source polls it several times a second and the emulator
// serialises those requests: with a few deployments at once it spends its
// time on empty receives. In memory, the scheduler decides directly which
// message goes to which invocation when — and the faults are its choices.
//
// What it keeps of SQS and Lambda, because the protocol depends on it:
//
//   - at-least-once: a message stays until an invocation that received it
//     deletes it; a handler that fails it (ReportBatchItemFailures) or
//     errors leaves it to come back after the visibility timeout;
//   - the visibility timeout runs while the handler works: a handler slower
//     than it sees its message delivered again, concurrently (FIFO too: the
//     group is no longer in flight); its own delete then names a stale
//     receipt and is ignored;
//   - FIFO: one group's messages in order, none while one is in flight;
//     a failed message holds back the rest of its group in the batch;
//     deduplication ids remembered for five minutes, deleted or not;
//   - standard queue: no order at all (the scheduler shuffles);
//   - batches of up to BatchSize, at most MaxConcurrency invocations per
//     queue; after the queue's MaxReceiveCount receives a message goes to the DLQ;
//   - DelaySeconds.
type bus struct {
	rng       *rand.Rand // under mu
	plan      *plan
	retry     time.Duration // after a failure
	mu        sync.Mutex
	queues    []*simQueue
	byURL     map[string]*simQueue
	seq       int
	running   int
	dlq       []string // bodies
	wake      chan struct{}
	sent      atomic.Int64
	delivered atomic.Int64
}

type simQueue struct {
	name  string // the consuming function
	url   string
	fifo  bool
	batch int
	conc  int
	// maxReceive: after this many receives a message goes to the DLQ
	// (the deployment's MaxReceiveCount).
	maxReceive int
	// visibility keeps a received message from being received again while
	// its handler works: the queue's visibility timeout in AWS, six times
	// its function's timeout, as Lambda requires. It was 30 s for every
	// queue, which is not "longer than any handler runs" on a loaded
	// machine: in a CI run that took twice its usual time (stop 34, seed
	// 2), planner batches of ten events handled one after another
	// outlasted it, every success named a receipt that a redelivery had
	// made stale, and seven events went round until the DLQ took them.
	visibility time.Duration
	handler    handler
	msgs       []*simMsg
	dedup      map[string]time.Time
	running    int
}

type simMsg struct {
	id, body, group string
	visibleAt       time.Time
	receives        int
	receipt         int
	sent            time.Time
}

// newBus returns a bus whose failed messages come back after retry (SQS
// keeps them out for what is left of the visibility timeout; the tests
// need not wait that long). An in-flight message stays invisible for its
// queue's visibility timeout, except where the plan makes one reappear
// early.
func newBus(seed int64, p *plan, retry time.Duration) *bus {
	return &bus{rng: rand.New(rand.NewPCG(uint64(seed), 0xb05)), plan: p, retry: retry,
		byURL: map[string]*simQueue{}, wake: make(chan struct{}, 1)}
}

func (b *bus) addQueue(name, url string, fifo bool, batch, conc, maxReceive int, visibility time.Duration, h handler) {
	q := &simQueue{name: name, url: url, fifo: fifo, batch: batch, conc: conc, maxReceive: maxReceive, visibility: visibility,
		handler: h, dedup: map[string]time.Time{}}
	b.queues = append(b.queues, q)
	b.byURL[url] = q
}

// SendMessage implements messages.SQS.
func (b *bus) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	q := b.byURL[aws.ToString(in.QueueUrl)]
	if q == nil {
		return nil, fmt.Errorf("bus: no queue %s", aws.ToString(in.QueueUrl))
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := aws.ToString(in.MessageDeduplicationId); q.fifo && d != "" {
		if at, ok := q.dedup[d]; ok && now.Sub(at) < 5*time.Minute {
			return &sqs.SendMessageOutput{MessageId: aws.String("deduplicated")}, nil
		}
		q.dedup[d] = now
	}
	b.seq++
	m := &simMsg{id: strconv.Itoa(b.seq), body: aws.ToString(in.MessageBody), group: aws.ToString(in.MessageGroupId),
		visibleAt: now.Add(time.Duration(in.DelaySeconds) * time.Second), sent: now}
	q.msgs = append(q.msgs, m)
	b.sent.Add(1)
	b.poke()
	return &sqs.SendMessageOutput{MessageId: aws.String(m.id)}, nil
}

func (b *bus) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// idle reports whether no message waits anywhere and no invocation runs.
func (b *bus) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running > 0 {
		return false
	}
	for _, q := range b.queues {
		if len(q.msgs) > 0 {
			return false
		}
	}
	return true
}

// state describes what waits: for logs.
func (b *bus) state() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	out := fmt.Sprintf("running %d;", b.running)
	for _, q := range b.queues {
		vis := 0
		for _, m := range q.msgs {
			if !m.visibleAt.After(now) {
				vis++
			}
		}
		out += fmt.Sprintf(" %s %d (%d visible, %d running)", q.name, len(q.msgs), vis, q.running)
	}
	return out
}

// deadLetters lists the bodies that went to a DLQ.
func (b *bus) deadLetters() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dlq...)
}

// run delivers until ctx ends, then waits for the invocations in flight.
func (b *bus) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-b.wake:
		}
		for _, d := range b.pick() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.invoke(ctx, d)
			}()
		}
	}
}

type delivery struct {
	q        *simQueue
	msgs     []*simMsg
	receipts []int
}

// pick chooses the batches to hand out now.
func (b *bus) pick() []delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var out []delivery
	for _, q := range b.queues {
		for q.running < q.conc {
			batch := b.batchOf(q, now)
			if len(batch) == 0 {
				break
			}
			d := delivery{q: q}
			for _, m := range batch {
				m.receives++
				m.receipt++
				m.visibleAt = now.Add(q.visibility)
				if b.plan.hit(withBudget(context.Background(), b.plan.budget(m.id)), fShortVisible, "short-visible "+q.name, m.body, pShortVisible) {
					m.visibleAt = now.Add(time.Duration(200+b.rng.IntN(800)) * time.Millisecond)
				}
				if m.receives > q.maxReceive {
					b.dlq = append(b.dlq, q.name+": "+m.body)
					q.remove(m)
					continue
				}
				d.msgs = append(d.msgs, m)
				d.receipts = append(d.receipts, m.receipt)
			}
			if len(d.msgs) == 0 {
				continue
			}
			q.running++
			b.running++
			b.delivered.Add(int64(len(d.msgs)))
			out = append(out, d)
		}
	}
	return out
}

// batchOf selects up to q.batch visible messages: any of them, shuffled,
// from a standard queue; from a FIFO queue, the heads of groups with
// nothing in flight, each group in order.
func (b *bus) batchOf(q *simQueue, now time.Time) []*simMsg {
	var out []*simMsg
	if !q.fifo {
		for _, i := range b.rng.Perm(len(q.msgs)) {
			if m := q.msgs[i]; !m.visibleAt.After(now) {
				out = append(out, m)
				if len(out) == q.batch {
					break
				}
			}
		}
		return out
	}
	blocked := map[string]bool{}
	for _, m := range q.msgs {
		if blocked[m.group] {
			continue
		}
		if m.visibleAt.After(now) {
			blocked[m.group] = true // in flight or delayed: the group waits
			continue
		}
		out = append(out, m)
		if len(out) == q.batch {
			break
		}
	}
	return out
}

func (q *simQueue) remove(m *simMsg) {
	for i, x := range q.msgs {
		if x == m {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			return
		}
	}
}

// invoke runs one batch and settles it as Lambda's event source does.
func (b *bus) invoke(ctx context.Context, d delivery) {
	ev := events.SQSEvent{}
	for _, m := range d.msgs {
		attrs := map[string]string{
			"ApproximateReceiveCount": strconv.Itoa(m.receives),
			"SentTimestamp":           strconv.FormatInt(m.sent.UnixMilli(), 10),
		}
		if m.group != "" {
			attrs["MessageGroupId"] = m.group
		}
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: m.id, Body: m.body, Attributes: attrs, EventSource: "aws:sqs"})
	}
	resp, err := protect(func() (events.SQSEventResponse, error) { return d.q.handler(ctx, ev) })
	failed := map[string]bool{}
	if err != nil {
		for _, m := range d.msgs {
			failed[m.id] = true
		}
	}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	groupFailed := map[string]bool{}
	for i, m := range d.msgs {
		if failed[m.id] || (m.group != "" && groupFailed[m.group]) {
			groupFailed[m.group] = m.group != ""
			if m.receipt == d.receipts[i] {
				m.visibleAt = time.Now().Add(b.retry) // back after the (shortened) visibility timeout
			}
			continue
		}
		if m.receipt == d.receipts[i] {
			d.q.remove(m) // a stale receipt (received again meanwhile) deletes nothing
			// At least once, much later: a copy comes back after the
			// pipeline has moved on (SQS's duplicates, a DLQ replay).
			if b.plan.hit(withBudget(context.Background(), b.plan.budget(m.id)), fLateDup, "late-dup "+d.q.name, m.body, pLateDup) {
				b.seq++
				d.q.msgs = append(d.q.msgs, &simMsg{id: strconv.Itoa(b.seq), body: m.body, group: m.group,
					visibleAt: time.Now().Add(time.Duration(2000+b.rng.IntN(4000)) * time.Millisecond), sent: time.Now()})
			}
		}
	}
	d.q.running--
	b.running--
	b.poke()
}

func protect(fn func() (events.SQSEventResponse, error)) (resp events.SQSEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// handlers of the four functions over deps.
func functionHandler(name string, d *pipeline.Deps) handler {
	switch name {
	case "planner":
		return pipeline.Planner{Deps: d}.Handle
	case "compact":
		return pipeline.Compact{Deps: d}.Handle
	case "cleaner":
		return pipeline.Cleaner{Deps: d}.Handle
	case "uploader":
		return pipeline.Uploader{Deps: d}.Handle
	}
	panic("chaos: unknown function " + name)
}
