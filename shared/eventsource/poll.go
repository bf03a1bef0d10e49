package eventsource

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/shared/awsenv"
)

// queueInfo is what the runner learns from a source queue's attributes.
type queueInfo struct {
	arn string
	// dlqURL and maxReceive come from the redrive policy; dlqURL is empty
	// without one.
	dlqURL     string
	maxReceive int
}

// describe reads the source queue's ARN and redrive policy and checks that
// Source.FIFO matches the queue.
func (r *Runner) describe(ctx context.Context, s Source) (queueInfo, error) {
	out, err := r.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(s.QueueURL),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameQueueArn,
			sqstypes.QueueAttributeNameRedrivePolicy,
			sqstypes.QueueAttributeNameFifoQueue,
		},
	})
	if err != nil {
		return queueInfo{}, fmt.Errorf("runner: source %s: read queue %s: %w", s.Name, s.QueueURL, err)
	}
	a := out.Attributes
	if fifo := a[string(sqstypes.QueueAttributeNameFifoQueue)] == "true"; fifo != s.FIFO {
		return queueInfo{}, fmt.Errorf("runner: source %s: FIFO=%v, but queue %s has FifoQueue=%v", s.Name, s.FIFO, s.QueueURL, fifo)
	}
	q := queueInfo{arn: a[string(sqstypes.QueueAttributeNameQueueArn)]}
	if p := a[string(sqstypes.QueueAttributeNameRedrivePolicy)]; p != "" {
		var policy struct {
			DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
			MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"` // AWS: "5", moto: 5
		}
		if err := json.Unmarshal([]byte(p), &policy); err != nil {
			return queueInfo{}, fmt.Errorf("runner: source %s: redrive policy %q: %w", s.Name, p, err)
		}
		n, err := strconv.Atoi(strings.Trim(string(policy.MaxReceiveCount), `"`))
		if err != nil {
			return queueInfo{}, fmt.Errorf("runner: source %s: maxReceiveCount in %q: %w", s.Name, p, err)
		}
		name := policy.DeadLetterTargetArn[strings.LastIndex(policy.DeadLetterTargetArn, ":")+1:]
		u, err := r.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return queueInfo{}, fmt.Errorf("runner: source %s: DLQ %s: %w", s.Name, policy.DeadLetterTargetArn, err)
		}
		q.dlqURL, q.maxReceive = aws.ToString(u.QueueUrl), n
	}
	return q, nil
}

// poll receives batches for s until ctx is done, each handled in its own
// goroutine, at most MaxConcurrency at a time. One poller per source keeps
// receives of one queue sequential; SQS (or moto behind moto_serial.py)
// keeps a FIFO group out of a receive while a batch of it is in flight, and
// the group gate below holds the line should an emulator not.
func (r *Runner) poll(ctx context.Context, s *Source, q queueInfo) {
	slots := make(chan struct{}, s.MaxConcurrency)
	gate := newGroupGate()
	var wg sync.WaitGroup
	defer wg.Wait()
	backoff := 100 * time.Millisecond
	idle := idlePoll
	wake := r.wake[s.QueueURL]
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msgs, err := r.receive(ctx, s)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return
			}
			r.log.WarnContext(ctx, "receive failed", "source", s.Name, "err", err)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		msgs = r.redriveOverReceived(ctx, s, q, msgs)
		if len(msgs) == 0 {
			<-slots
			select {
			case <-time.After(idle):
				idle = min(2*idle, maxIdlePoll)
			case <-wake:
				idle = idlePoll
			case <-ctx.Done():
				return
			}
			continue
		}
		idle = idlePoll
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			r.handle(ctx, s, q, gate, msgs)
		}()
	}
}

func (r *Runner) receive(ctx context.Context, s *Source) ([]sqstypes.Message, error) {
	out, err := r.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.QueueURL),
		MaxNumberOfMessages:         int32(s.BatchSize),
		WaitTimeSeconds:             0,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// handle hands one batch to the handler and settles it: deletes what
// succeeded, leaves the rest to the visibility timeout.
func (r *Runner) handle(ctx context.Context, s *Source, q queueInfo, gate *groupGate, msgs []sqstypes.Message) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		ev.Records[i] = toEvent(m, q.arn, r.region)
	}
	r.began()
	if s.FIFO {
		groups := batchGroups(ev.Records)
		waited, err := gate.enter(ctx, groups)
		if err != nil {
			// Run is stopping: the batch was never handed over and comes
			// back after the visibility timeout.
			r.done()
			return
		}
		if waited {
			r.log.WarnContext(ctx, "emulator delivered a FIFO group that had a batch in flight; held until that batch ended",
				"source", s.Name, "groups", groups)
		}
		defer gate.leave(groups)
	}
	start := time.Now()
	hctx, cancel := invocationContext(awsenv.WithCaller(ctx, s.Name), s.Timeout)
	var resp events.SQSEventResponse
	err := protect(func() error {
		var err error
		resp, err = s.Handler(hctx, ev)
		return err
	})
	cancel()
	keep, why := settle(ev.Records, resp, err, s.FIFO)
	r.ended(s.Name, len(msgs), len(keep), err != nil)

	log := r.log.With("source", s.Name, "messages", len(msgs), "failures", len(keep), "took", time.Since(start).Round(time.Millisecond))
	switch {
	case err != nil:
		log.ErrorContext(ctx, "handler failed: whole batch left for redelivery", "err", err)
	case len(keep) > 0:
		log.InfoContext(ctx, "batch partly failed: failures left for redelivery", "reason", why)
	default:
		log.DebugContext(ctx, "batch done")
	}
	r.deleteAll(ctx, s, msgs, keep)
	r.retrySoon(ctx, s, msgs, keep)
}

// retrySoon makes the kept messages visible again after s.RetryAfter (see
// Source.RetryAfter); without it they wait out the visibility timeout.
func (r *Runner) retrySoon(ctx context.Context, s *Source, msgs []sqstypes.Message, keep map[string]bool) {
	if s.RetryAfter <= 0 || len(keep) == 0 {
		return
	}
	secs := int32(max((s.RetryAfter+time.Second-1)/time.Second, 1))
	var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
	for i, m := range msgs {
		if keep[aws.ToString(m.MessageId)] {
			entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: secs,
			})
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out, err := r.sqs.ChangeMessageVisibilityBatch(cctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.QueueURL), Entries: entries})
	if err != nil {
		r.log.WarnContext(ctx, "could not bring failed messages back early; they return after the visibility timeout", "source", s.Name, "err", err)
		return
	}
	for _, f := range out.Failed {
		r.log.WarnContext(ctx, "could not bring a failed message back early", "source", s.Name,
			"code", aws.ToString(f.Code), "err", aws.ToString(f.Message))
	}
}

func (r *Runner) began() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight++
	r.lastWork = time.Now()
}

// done ends a batch that began without counting it.
func (r *Runner) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	r.lastWork = time.Now()
}

// ended ends a batch that was handed to the handler.
func (r *Runner) ended(name string, messages, failures int, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	r.lastWork = time.Now()
	st := r.stats[name]
	st.Invocations++
	st.Messages += int64(messages)
	st.Failures += int64(failures)
	if failed {
		st.Errors++
	}
}

// deleteAll deletes every message of the batch that is not kept. A delete
// that fails (say, the handler outlived the visibility timeout and the
// receipt handle is stale) is logged: the message comes back, which
// handlers must tolerate anyway.
func (r *Runner) deleteAll(ctx context.Context, s *Source, msgs []sqstypes.Message, keep map[string]bool) {
	var entries []sqstypes.DeleteMessageBatchRequestEntry
	for i, m := range msgs {
		if keep[aws.ToString(m.MessageId)] {
			continue
		}
		entries = append(entries, sqstypes.DeleteMessageBatchRequestEntry{
			Id:            aws.String(strconv.Itoa(i)),
			ReceiptHandle: m.ReceiptHandle,
		})
	}
	if len(entries) == 0 {
		return
	}
	// The batch's context may be over (Run is stopping); a finished
	// batch's successes are still deleted, as Lambda would.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out, err := r.sqs.DeleteMessageBatch(dctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.QueueURL), Entries: entries})
	if err != nil {
		r.log.WarnContext(ctx, "delete failed: the batch's successes will be redelivered", "source", s.Name, "err", err)
		return
	}
	for _, f := range out.Failed {
		r.log.WarnContext(ctx, "delete failed: message will be redelivered", "source", s.Name,
			"code", aws.ToString(f.Code), "err", aws.ToString(f.Message))
	}
}

// settle decides which messages of a handled batch stay on the queue
// (keyed by MessageId), with Lambda's ReportBatchItemFailures rules:
//
//   - a handler error fails the whole batch;
//   - a failure naming no message of the batch fails the whole batch
//     (Lambda treats an invalid itemIdentifier so);
//   - FIFO: every message after a failed one in the same group stays too,
//     so the group is redelivered in order.
func settle(batch []events.SQSMessage, resp events.SQSEventResponse, err error, fifo bool) (keep map[string]bool, why string) {
	keep = map[string]bool{}
	all := func(reason string) (map[string]bool, string) {
		for _, m := range batch {
			keep[m.MessageId] = true
		}
		return keep, reason
	}
	if err != nil {
		return all("handler error")
	}
	in := map[string]bool{}
	for _, m := range batch {
		in[m.MessageId] = true
	}
	for _, f := range resp.BatchItemFailures {
		if !in[f.ItemIdentifier] {
			return all(fmt.Sprintf("failure %q names no message of the batch", f.ItemIdentifier))
		}
		keep[f.ItemIdentifier] = true
	}
	if len(keep) == 0 {
		return keep, ""
	}
	why = "reported failures"
	if fifo {
		failedGroup := map[string]bool{}
		for _, m := range batch {
			g := m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
			if keep[m.MessageId] {
				failedGroup[g] = true
			} else if failedGroup[g] {
				keep[m.MessageId] = true
				why = "reported failures and the later messages of their FIFO groups"
			}
		}
	}
	return keep, why
}

// toEvent builds the record Lambda would hand to the function.
func toEvent(m sqstypes.Message, queueARN, region string) events.SQSMessage {
	e := events.SQSMessage{
		MessageId:              aws.ToString(m.MessageId),
		ReceiptHandle:          aws.ToString(m.ReceiptHandle),
		Body:                   aws.ToString(m.Body),
		Md5OfBody:              aws.ToString(m.MD5OfBody),
		Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
		Attributes:             map[string]string{},
		MessageAttributes:      map[string]events.SQSMessageAttribute{},
		EventSourceARN:         queueARN,
		EventSource:            "aws:sqs",
		AWSRegion:              region,
	}
	for k, v := range m.Attributes {
		e.Attributes[k] = v
	}
	for k, v := range m.MessageAttributes {
		e.MessageAttributes[k] = events.SQSMessageAttribute{
			StringValue:      v.StringValue,
			BinaryValue:      v.BinaryValue,
			StringListValues: v.StringListValues,
			BinaryListValues: v.BinaryListValues,
			DataType:         aws.ToString(v.DataType),
		}
	}
	return e
}

// batchGroups lists the distinct message groups of a FIFO batch.
func batchGroups(batch []events.SQSMessage) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range batch {
		g := m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out
}

// redriveOverReceived moves to the DLQ every message received more often
// than the redrive policy allows, for an emulator that does not do it on
// receive (moto and LocalStack do, so this never fires there), and returns
// the rest.
func (r *Runner) redriveOverReceived(ctx context.Context, s *Source, q queueInfo, msgs []sqstypes.Message) []sqstypes.Message {
	if q.dlqURL == "" {
		return msgs
	}
	keep := msgs[:0:0]
	for _, m := range msgs {
		n, _ := strconv.Atoi(m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
		if n <= q.maxReceive {
			keep = append(keep, m)
			continue
		}
		if err := r.moveToDLQ(ctx, s, q, m); err != nil {
			r.log.ErrorContext(ctx, "redrive to DLQ failed; handing the message to the handler", "source", s.Name,
				"message", aws.ToString(m.MessageId), "err", err)
			keep = append(keep, m)
			continue
		}
		r.mu.Lock()
		r.stats[s.Name].Redriven++
		r.mu.Unlock()
		r.log.WarnContext(ctx, "moved to the DLQ by the runner", "source", s.Name, "message", aws.ToString(m.MessageId), "receives", n)
	}
	return keep
}

func (r *Runner) moveToDLQ(ctx context.Context, s *Source, q queueInfo, m sqstypes.Message) error {
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(q.dlqURL),
		MessageBody:       m.Body,
		MessageAttributes: m.MessageAttributes,
	}
	if s.FIFO {
		in.MessageGroupId = aws.String(m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)])
		dedup := m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageDeduplicationId)]
		if dedup == "" {
			dedup = aws.ToString(m.MessageId)
		}
		in.MessageDeduplicationId = aws.String(dedup)
	}
	if _, err := r.sqs.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("send to %s: %w", q.dlqURL, err)
	}
	if _, err := r.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.QueueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
		return fmt.Errorf("delete from %s after copying to the DLQ: %w", s.QueueURL, err)
	}
	return nil
}

// invocationContext is what one handler invocation runs under, as in
// Lambda: its own deadline, timeout from now (none when timeout ≤ 0), and
// never the runner's. The runner's context may carry a deadline of its own
// (a test's or the demo's settle window); a handler that read that as its
// function's deadline would, near its end, fail jobs as out of time and
// quarantine groups that are fine (CI run 21: the demo under load). It is
// still cancelled when the runner's context ends, so a stopping runner
// stops its handlers.
func invocationContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(context.WithoutCancel(parent), timeout)
	}
	stop := context.AfterFunc(parent, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
