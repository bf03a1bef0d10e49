package memsqs_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/localstack/memaws/memsqs"
)

// TestFIFOConcurrentReceivers has 4 consumers work through 20 groups × 10
// messages as Lambda's event source would: a batch's messages are handled
// in order, some fail once (then that message and the rest of its group in
// the batch stay and are made visible again at once). It checks what a
// FIFO queue promises: each group is processed strictly in order, and no
// two consumers ever hold messages of one group at once.
func TestFIFOConcurrentReceivers(t *testing.T) {
	t.Parallel()
	srv := memsqs.New(memsqs.Options{})
	c := newClient(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs.fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"}})
	if err != nil {
		t.Fatal(err)
	}
	url := out.QueueUrl
	const groups, perGroup = 20, 10
	for i := range perGroup {
		var entries []types.SendMessageBatchRequestEntry
		for g := range groups {
			entries = append(entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(fmt.Sprintf("e%d", g)), MessageBody: aws.String(fmt.Sprintf("g%02d:%d", g, i)),
				MessageGroupId: aws.String(fmt.Sprintf("g%02d", g)),
			})
			if len(entries) == 10 {
				if _, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: url, Entries: entries}); err != nil {
					t.Fatal(err)
				}
				entries = nil
			}
		}
	}

	var mu sync.Mutex
	holder := map[string]int{} // group → consumer holding a batch of it
	next := map[string]int{}   // group → next index to process
	failedOnce := map[string]bool{}
	var violations []string
	done := 0
	violate := func(format string, args ...any) {
		violations = append(violations, fmt.Sprintf(format, args...))
	}

	// Polls end once every message is done.
	polls, stop := context.WithCancel(ctx)
	defer stop()
	consume := func(id int) {
		for polls.Err() == nil {
			// Batches of several sizes split groups across consumers.
			res, err := c.ReceiveMessage(polls, &sqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: []int32{2, 3, 10, 4}[id], WaitTimeSeconds: 1,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}})
			if err != nil {
				if polls.Err() == nil {
					t.Errorf("consumer %d: receive: %v", id, err)
				}
				return
			}
			if len(res.Messages) == 0 {
				continue
			}
			var groupsOfBatch []string
			mu.Lock()
			for _, m := range res.Messages {
				g := m.Attributes["MessageGroupId"]
				if h, ok := holder[g]; ok && h != id {
					violate("consumer %d received %s while consumer %d holds group %s", id, aws.ToString(m.Body), h, g)
				}
				if _, ok := holder[g]; !ok {
					groupsOfBatch = append(groupsOfBatch, g)
				}
				holder[g] = id
			}
			var del, back []types.Message
			stopped := map[string]bool{}
			for _, m := range res.Messages {
				body := aws.ToString(m.Body)
				g, idx, _ := strings.Cut(body, ":")
				n, _ := strconv.Atoi(idx)
				if stopped[g] {
					back = append(back, m)
					continue
				}
				if n != next[g] {
					violate("consumer %d got %s, want %s:%d", id, body, g, next[g])
				}
				if n%4 == 3 && !failedOnce[body] {
					failedOnce[body] = true
					stopped[g] = true
					back = append(back, m)
					continue
				}
				next[g] = n + 1
				if done++; done == groups*perGroup {
					stop()
				}
				del = append(del, m)
			}
			// Let go of the groups before the queue does: a receive that
			// gets one of them from now on is legitimate.
			for _, g := range groupsOfBatch {
				delete(holder, g)
			}
			mu.Unlock()

			if len(del) > 0 {
				var entries []types.DeleteMessageBatchRequestEntry
				for i, m := range del {
					entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				}
				r, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: url, Entries: entries})
				if err != nil || len(r.Failed) > 0 {
					t.Errorf("consumer %d: delete: %v %+v", id, err, r)
				}
			}
			if len(back) > 0 {
				var entries []types.ChangeMessageVisibilityBatchRequestEntry
				for i, m := range back {
					entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				}
				r, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: url, Entries: entries})
				if err != nil || len(r.Failed) > 0 {
					t.Errorf("consumer %d: change visibility: %v %+v", id, err, r)
				}
			}
		}
	}
	var wg sync.WaitGroup
	for id := range 4 {
		wg.Go(func() { consume(id) })
	}
	wg.Wait()
	for _, v := range violations {
		t.Error(v)
	}
	if done != groups*perGroup {
		t.Fatalf("processed %d messages, want %d", done, groups*perGroup)
	}
	if len(failedOnce) == 0 {
		t.Fatal("no message failed: the redelivery path was not exercised")
	}
}

func TestFIFOGroupBlocking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.fifoQueue("g.fifo", nil)
	for i := range 3 {
		e.sendGroup(url, "a", fmt.Sprintf("a%d", i))
	}
	e.sendGroup(url, "b", "b0")
	e.sendGroup(url, "a", "a3")

	// One receive takes as much of one group as it can, then the next.
	if got := strings.Join(bodies(e.receive(url, 2)), ","); got != "a0,a1" {
		t.Fatalf("first receive = %s, want a0,a1", got)
	}
	// Group a is blocked while a0 and a1 are in flight; b is not.
	if got := strings.Join(bodies(e.receive(url, 10)), ","); got != "b0" {
		t.Fatalf("second receive = %s, want b0", got)
	}
	if got := e.receive(url, 10); len(got) != 0 {
		t.Fatalf("third receive = %v, want nothing", bodies(got))
	}
	// Visibility over: group a comes back in its order, with a new receive
	// count; b0 too.
	e.advance(30 * time.Second)
	got := e.receive(url, 10)
	if s := strings.Join(bodies(got), ","); s != "a0,a1,a2,a3,b0" {
		t.Fatalf("after the timeout = %s, want a0,a1,a2,a3,b0", s)
	}
	for _, m := range got[:2] {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "2" {
			t.Errorf("%s: ApproximateReceiveCount %s, want 2", aws.ToString(m.Body), n)
		}
	}
	// Making a0 visible again does not unblock group a while a1 is in
	// flight.
	if _, err := e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	if got := e.receive(url, 10); len(got) != 0 {
		t.Fatalf("with a1 in flight: %v", bodies(got))
	}
	// Deleting the others lets a0 come back.
	for _, m := range got[1:] {
		if _, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	msgs := e.receive(url, 10)
	if s := strings.Join(bodies(msgs), ","); s != "a0" {
		t.Fatalf("after deleting the rest: %s, want a0", s)
	}
	m := msgs[0]
	if m.Attributes["MessageGroupId"] != "a" || len(m.Attributes["SequenceNumber"]) != 20 || m.Attributes["MessageDeduplicationId"] == "" {
		t.Errorf("FIFO system attributes: %v", m.Attributes)
	}
}

func TestFIFODeduplication(t *testing.T) {
	t.Parallel()
	type send struct{ group, dedup, body string }
	tests := []struct {
		name     string
		attrs    map[string]string
		sends    []send
		wait     time.Duration // before the last send
		enqueued int
		sameID   bool // the last send returns the first send's MessageId
	}{
		{"queue scope: same id in another group", map[string]string{"ContentBasedDeduplication": "false"},
			[]send{{"g1", "d", "x"}, {"g2", "d", "y"}}, 0, 1, true},
		{"group scope: same id in another group", map[string]string{"ContentBasedDeduplication": "false", "DeduplicationScope": "messageGroup"},
			[]send{{"g1", "d", "x"}, {"g2", "d", "y"}}, 0, 2, false},
		{"group scope: same id in the same group", map[string]string{"ContentBasedDeduplication": "false", "DeduplicationScope": "messageGroup"},
			[]send{{"g1", "d", "x"}, {"g1", "d", "y"}}, 0, 1, true},
		{"content-based: same body", nil, []send{{"g1", "", "x"}, {"g1", "", "x"}}, 0, 1, true},
		{"content-based: another body", nil, []send{{"g1", "", "x"}, {"g1", "", "y"}}, 0, 2, false},
		{"explicit id beats content", nil, []send{{"g1", "d1", "x"}, {"g1", "d2", "x"}}, 0, 2, false},
		{"after 5 minutes", nil, []send{{"g1", "", "x"}, {"g1", "", "x"}}, 5 * time.Minute, 2, false},
		{"just inside 5 minutes", nil, []send{{"g1", "", "x"}, {"g1", "", "x"}}, 5*time.Minute - time.Second, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			url := e.fifoQueue("d.fifo", tc.attrs)
			var ids, seqs []string
			for i, s := range tc.sends {
				if i == len(tc.sends)-1 {
					e.advance(tc.wait)
				}
				in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(s.body), MessageGroupId: aws.String(s.group)}
				if s.dedup != "" {
					in.MessageDeduplicationId = aws.String(s.dedup)
				}
				out, err := e.c.SendMessage(e.ctx, in)
				if err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				ids, seqs = append(ids, aws.ToString(out.MessageId)), append(seqs, aws.ToString(out.SequenceNumber))
			}
			if got := (ids[0] == ids[len(ids)-1]); got != tc.sameID {
				t.Errorf("MessageIds %v: same = %v, want %v", ids, got, tc.sameID)
			}
			if !tc.sameID && !(seqs[0] < seqs[1]) {
				t.Errorf("SequenceNumbers %v do not increase", seqs)
			}
			if n := e.attributes(url, types.QueueAttributeNameApproximateNumberOfMessages)["ApproximateNumberOfMessages"]; n != strconv.Itoa(tc.enqueued) {
				t.Errorf("enqueued %s messages, want %d", n, tc.enqueued)
			}
		})
	}

	t.Run("deleting the original does not end the interval", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		url := e.fifoQueue("d.fifo", nil)
		first := e.sendGroup(url, "g", "x")
		m := e.receive(url, 1)
		if _, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
		if again := e.sendGroup(url, "g", "x"); aws.ToString(again.MessageId) != aws.ToString(first.MessageId) {
			t.Errorf("resend after delete got a new MessageId")
		}
		if got := e.receive(url, 1); len(got) != 0 {
			t.Errorf("the duplicate was delivered: %v", bodies(got))
		}
	})

	t.Run("required ids", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		url := e.fifoQueue("r.fifo", map[string]string{"ContentBasedDeduplication": "false"})
		_, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageGroupId: aws.String("g")})
		if errorCode(err) != "InvalidParameterValue" {
			t.Errorf("no deduplication id: %v, want InvalidParameterValue", err)
		}
		_, err = e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")})
		if errorCode(err) != "MissingParameter" {
			t.Errorf("no group id: %v, want MissingParameter", err)
		}
		_, err = e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
			MessageGroupId: aws.String(strings.Repeat("g", 129)), MessageDeduplicationId: aws.String("d")})
		if errorCode(err) != "InvalidParameterValue" {
			t.Errorf("group id of 129 characters: %v, want InvalidParameterValue", err)
		}
	})
}
