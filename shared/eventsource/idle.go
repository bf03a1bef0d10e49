package eventsource

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// RunUntilIdle runs like Run and returns nil once the pipeline has settled:
// no batch is in flight, no batch has started or ended for quiet, and every
// source queue is empty (visible, in-flight and delayed messages all zero).
// Timers keep firing meanwhile, and the work a timer run sends delays the
// end, but a timer run does not: one still running when the queues go idle
// is cancelled, as a scheduled invocation may be. Were timer runs to hold
// the end, periodic timers slower than the gaps between them (a sweep on a
// loaded emulator) would never leave a quiet moment to see, and the run
// would never end (ci45: both demo deployments had finished everything and
// still did not settle in 10 minutes). A caller that needs each timer's work
// done calls RunDue first, as Settle does. It returns ctx's error if ctx
// ends first, and Run's error if Run fails to start.
//
// A message waiting out its visibility timeout after a failure counts as in
// flight, so RunUntilIdle waits for its redelivery (or its move to the DLQ).
func (r *Runner) RunUntilIdle(ctx context.Context, quiet time.Duration) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	tk := time.NewTicker(min(max(quiet/4, 20*time.Millisecond), 250*time.Millisecond))
	defer tk.Stop()
	// The queues must read empty twice, a tick apart, with no work between.
	// One reading is not enough: the counts are separate attributes read
	// one after another (moto reads ApproximateNumberOfMessages, then
	// ...NotVisible), so a message whose visibility timeout ends between
	// the two is in neither, and the run ended while a redelivery was due.
	// A message flips once per timeout; two readings cannot both miss it.
	confirmed := false
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case <-tk.C:
		}
		if !r.quietFor(quiet) {
			confirmed = false
			continue
		}
		empty, err := r.queuesEmpty(ctx)
		if err != nil {
			r.log.WarnContext(ctx, "idle check failed", "err", err)
			confirmed = false
			continue
		}
		// Re-check: a batch may have begun while the queues were read.
		if !empty || !r.quietFor(quiet) {
			confirmed = false
			continue
		}
		if !confirmed {
			confirmed = true
			continue
		}
		cancel()
		<-done
		return nil
	}
}

func (r *Runner) quietFor(quiet time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.polling && r.inflight == 0 && time.Since(r.lastWork) >= quiet
}

// queuesEmpty reports whether every source queue holds no message at all.
func (r *Runner) queuesEmpty(ctx context.Context) (bool, error) {
	for _, s := range r.sources {
		n, err := Pending(ctx, r.sqs, s.QueueURL)
		if err != nil {
			return false, err
		}
		if n > 0 {
			return false, nil
		}
	}
	return true, nil
}

// Pending is the number of messages in a queue: visible, in flight and
// delayed (SQS's approximate counts: exact in the emulators at any one
// instant, though each count is read at its own).
func Pending(ctx context.Context, c *sqs.Client, queueURL string) (int, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("count messages in %s: %w", queueURL, err)
	}
	total := 0
	for _, v := range out.Attributes {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("count messages in %s: %q is not a count", queueURL, v)
		}
		total += n
	}
	return total, nil
}
