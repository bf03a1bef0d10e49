package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/spec"
)

func TestReplayDLQCommand(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	d := w.env.Deployment
	sqsc := w.env.Clients.SQS

	// Two dead compaction jobs in two FIFO groups, one dead plan request.
	groups := []string{"team-a/01HK1BZM80NYSP3QAS7RW35VJW", "team-b/01HK1JVBG0X05GE570Y89KF5ZR"}
	for i, g := range groups {
		body, _ := messages.Encode(messages.Job{Tenant: "team-a", Group: "1#0", Version: 1, Partition: i, Output: "01HK1BZM80NYSP3QAS7RW35VJW"})
		if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(d.DLQURLs[spec.CompactionJobs]),
			MessageBody: aws.String(body), MessageGroupId: aws.String(g), MessageDeduplicationId: aws.String(fmt.Sprint("job-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	plan, _ := messages.Encode(messages.PlanRequest{Tenant: "team-a", Group: "1#0", Why: "test"})
	if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(d.DLQURLs[spec.BlockEvents]), MessageBody: aws.String(plan)}); err != nil {
		t.Fatal(err)
	}

	t.Run("dry run lists and moves nothing", func(t *testing.T) {
		r := w.run("replay-dlq", "compaction-jobs", "--dry-run")
		r.wantCode(t, 0)
		for _, want := range []string{"would move 2 message(s)", groups[0], groups[1], "compaction job team-a/1#0@v1/p0", "dry run"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("dry run output lacks %q", want)
			}
		}
		if n := depth(t, w, d.DLQURLs[spec.CompactionJobs]); n != 2 {
			t.Errorf("DLQ holds %d messages after a dry run, want 2", n)
		}
		if n := depth(t, w, d.QueueURLs[spec.CompactionJobs]); n != 0 {
			t.Errorf("queue holds %d messages after a dry run, want 0", n)
		}
	})

	t.Run("moves FIFO messages back in their groups", func(t *testing.T) {
		r := w.run("replay-dlq", "compaction-jobs")
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "moved 2 message(s)") {
			t.Errorf("output: %s", r.stdout)
		}
		if n := depth(t, w, d.DLQURLs[spec.CompactionJobs]); n != 0 {
			t.Errorf("DLQ still holds %d messages", n)
		}
		// The emulator serialises every SQS request with make test's other
		// packages' requests: a receive can wait seconds for its turn, and
		// one whose answer was lost (retried by the SDK) leaves what it
		// received invisible for its visibility timeout. A 10-second bound
		// with 60 s of visibility failed once in CI (2026-12-05, no message
		// of either group seen). The loop ends as soon as both groups are
		// back.
		got := map[string]string{}
		polls, received := 0, 0
		start := time.Now()
		deadline := start.Add(60 * time.Second)
		for len(got) < 2 && time.Now().Before(deadline) {
			out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(d.QueueURLs[spec.CompactionJobs]),
				MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 5,
				MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			polls++
			received += len(out.Messages)
			for _, m := range out.Messages {
				got[m.Attributes["MessageGroupId"]] = aws.ToString(m.Body)
			}
		}
		for _, g := range groups {
			if !strings.Contains(got[g], `"sluice":"job"`) {
				t.Errorf("group %s: got %q (%d receive(s) in %v returned %d message(s), by group: %v)",
					g, got[g], polls, time.Since(start).Round(time.Millisecond), received, got)
			}
		}
	})

	t.Run("moves standard-queue messages, named by their DLQ", func(t *testing.T) {
		r := w.run("replay-dlq", d.Resources.DLQName(d.Resources.Queue(spec.BlockEvents)))
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "moved 1 message(s)") || !strings.Contains(r.stdout, "plan team-a/1#0 (test)") {
			t.Errorf("output: %s", r.stdout)
		}
	})

	t.Run("an empty DLQ", func(t *testing.T) {
		r := w.run("replay-dlq", "block-ops")
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "is empty") {
			t.Errorf("output: %s", r.stdout)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		w.run("replay-dlq").wantCode(t, 2)
		r := w.run("replay-dlq", "no-such-queue")
		r.wantCode(t, 1)
		r.wantOneLineError(t, "no-such-queue")
	})
}

func depth(t *testing.T, w *world, url string) int {
	t.Helper()
	out, err := w.env.Clients.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	return atoi(out.Attributes["ApproximateNumberOfMessages"]) + atoi(out.Attributes["ApproximateNumberOfMessagesNotVisible"])
}
