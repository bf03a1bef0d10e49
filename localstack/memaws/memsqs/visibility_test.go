package memsqs_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func TestVisibilityTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("v", map[string]string{"VisibilityTimeout": "30"})
	e.send(url, "m")
	first := e.receive(url, 1)
	if len(first) != 1 || first[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("first receive: %+v", first)
	}
	e.advance(29 * time.Second)
	if got := e.receive(url, 1); len(got) != 0 {
		t.Fatalf("at 29 s the message is visible again")
	}
	e.advance(time.Second)
	second := e.receive(url, 1)
	if len(second) != 1 {
		t.Fatalf("at 30 s: no message")
	}
	m := second[0]
	if m.Attributes["ApproximateReceiveCount"] != "2" || aws.ToString(m.ReceiptHandle) == aws.ToString(first[0].ReceiptHandle) ||
		aws.ToString(m.MessageId) != aws.ToString(first[0].MessageId) {
		t.Fatalf("second receive: count %s, same handle %v", m.Attributes["ApproximateReceiveCount"], m.ReceiptHandle == first[0].ReceiptHandle)
	}
	if m.Attributes["ApproximateFirstReceiveTimestamp"] != first[0].Attributes["ApproximateFirstReceiveTimestamp"] ||
		m.Attributes["SentTimestamp"] != "1795867200000" || m.Attributes["SenderId"] == "" {
		t.Errorf("system attributes: %v", m.Attributes)
	}

	// A receive's VisibilityTimeout overrides the queue's.
	e.advance(30 * time.Second)
	out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), VisibilityTimeout: 5})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive with VisibilityTimeout 5: %v, %v", out, err)
	}
	e.advance(5 * time.Second)
	if got := e.receive(url, 1); len(got) != 1 {
		t.Fatalf("5 s after a receive with VisibilityTimeout 5: no message")
	}

	// A long poll that started while the message was in flight returns it
	// once the fake clock passes the timeout and Wake is called.
	got := make(chan []types.Message, 1)
	go func() {
		out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 10})
		if err != nil {
			t.Error(err)
		}
		got <- out.Messages
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	e.advance(30 * time.Second)
	select {
	case msgs := <-got:
		if len(msgs) != 1 {
			t.Fatalf("long poll returned %d messages", len(msgs))
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("long poll took %v after Wake", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not return after Wake")
	}
}

func TestChangeMessageVisibility(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	std := e.createQueue("std", nil)
	fifo := e.fifoQueue("f.fifo", nil)

	change := func(url string, handle *string, timeout int32) error {
		_, err := e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: handle, VisibilityTimeout: timeout})
		return err
	}

	e.send(std, "m")
	m := e.receive(std, 1)[0]
	if err := change(std, m.ReceiptHandle, 0); err != nil {
		t.Fatalf("visibility 0: %v", err)
	}
	m2 := e.receive(std, 1)
	if len(m2) != 1 {
		t.Fatal("visibility 0 did not make the message visible")
	}
	// Extend, then let the extension run out.
	if err := change(std, m2[0].ReceiptHandle, 100); err != nil {
		t.Fatal(err)
	}
	e.advance(99 * time.Second)
	if got := e.receive(std, 1); len(got) != 0 {
		t.Fatal("visible before the extended timeout")
	}
	e.advance(time.Second)
	notInFlight := m2[0].ReceiptHandle // its timeout is over

	e.sendGroup(fifo, "g", "f")
	f1 := e.receive(fifo, 1)[0]
	if err := change(fifo, f1.ReceiptHandle, 0); err != nil {
		t.Fatal(err)
	}
	f2 := e.receive(fifo, 1)[0]

	other := e.createQueue("other", nil)
	e.send(other, "deleted")
	deleted := e.receive(other, 1)[0].ReceiptHandle
	if _, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(other), ReceiptHandle: deleted}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		url     string
		handle  *string
		timeout int32
		code    string
		check   func(error) bool
	}{
		{"malformed handle", std, aws.String("not-a-handle"), 10, "ReceiptHandleIsInvalid", isType[*types.ReceiptHandleIsInvalid]},
		{"handle of another queue", fifo, m.ReceiptHandle, 10, "ReceiptHandleIsInvalid", isType[*types.ReceiptHandleIsInvalid]},
		{"message not in flight", std, notInFlight, 10, "AWS.SimpleQueueService.MessageNotInflight", isType[*types.MessageNotInflight]},
		{"deleted message", other, deleted, 10, "InvalidParameterValue", nil},
		{"over 12 hours", fifo, f2.ReceiptHandle, 43201, "InvalidParameterValue", nil},
		{"negative", fifo, f2.ReceiptHandle, -1, "InvalidParameterValue", nil},
		{"FIFO: superseded handle has expired", fifo, f1.ReceiptHandle, 10, "InvalidParameterValue", nil},
		{"FIFO: latest handle", fifo, f2.ReceiptHandle, 43200, "", nil},
		{"12 hours in total from the receive", fifo, f2.ReceiptHandle, 43200, "InvalidParameterValue", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "12 hours in total from the receive" {
				e.advance(time.Minute)
			}
			err := change(tc.url, tc.handle, tc.timeout)
			if got := errorCode(err); got != tc.code {
				t.Fatalf("ChangeMessageVisibility: %v: code %q, want %q", err, got, tc.code)
			}
			if tc.check != nil && !tc.check(err) {
				t.Fatalf("%v (%T) is not of the SDK's typed error", err, err)
			}
		})
	}
}

func TestDeleteMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	std := e.createQueue("std", nil)
	fifo := e.fifoQueue("f.fifo", nil)
	del := func(url string, handle *string) error {
		_, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: handle})
		return err
	}

	// Standard: an older handle of a message received again still deletes
	// it (SQS: "succeeds, but the message might not be deleted"; memsqs
	// takes the outcome that is harder on a protocol).
	e.send(std, "a")
	old := e.receive(std, 1)[0].ReceiptHandle
	e.advance(30 * time.Second)
	current := e.receive(std, 1)[0].ReceiptHandle
	if err := del(std, old); err != nil {
		t.Fatalf("delete with an older handle: %v", err)
	}
	if n := e.attributes(std, types.QueueAttributeNameAll)["ApproximateNumberOfMessagesNotVisible"]; n != "0" {
		t.Fatalf("after delete with an older handle: %s in flight", n)
	}
	// Deleting again, with either handle, succeeds.
	if err := del(std, current); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if err := del(std, aws.String("garbage")); !isType[*types.ReceiptHandleIsInvalid](err) {
		t.Fatalf("malformed handle: %v, want ReceiptHandleIsInvalid", err)
	}

	// Standard: a handle whose timeout is over still deletes.
	e.send(std, "b")
	h := e.receive(std, 1)[0].ReceiptHandle
	e.advance(31 * time.Second)
	if err := del(std, h); err != nil {
		t.Fatalf("delete after the timeout: %v", err)
	}
	if got := e.receive(std, 1); len(got) != 0 {
		t.Fatalf("deleted message received: %v", bodies(got))
	}

	// FIFO: the handle expires with the visibility timeout, and a later
	// receive supersedes it.
	e.sendGroup(fifo, "g", "f")
	f1 := e.receive(fifo, 1)[0].ReceiptHandle
	e.advance(30 * time.Second)
	if err := del(fifo, f1); errorCode(err) != "InvalidParameterValue" {
		t.Fatalf("FIFO delete after the timeout: %v, want InvalidParameterValue (expired)", err)
	}
	f2 := e.receive(fifo, 1)[0].ReceiptHandle
	if err := del(fifo, f1); errorCode(err) != "InvalidParameterValue" {
		t.Fatalf("FIFO delete with a superseded handle: %v, want InvalidParameterValue (expired)", err)
	}
	if err := del(fifo, f2); err != nil {
		t.Fatalf("FIFO delete with the latest handle: %v", err)
	}
	if err := del(fifo, f2); err != nil {
		t.Fatalf("FIFO delete of a deleted message: %v", err)
	}
}

func TestBatchVisibilityAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("b", nil)
	e.send(url, "1")
	e.send(url, "2")
	e.send(url, "3")
	msgs := e.receive(url, 3)
	if len(msgs) != 3 {
		t.Fatalf("received %d", len(msgs))
	}
	if _, err := e.c.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: msgs[2].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	cv, err := e.c.ChangeMessageVisibilityBatch(e.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("ok"), ReceiptHandle: msgs[0].ReceiptHandle, VisibilityTimeout: 60},
		{Id: aws.String("visible"), ReceiptHandle: msgs[2].ReceiptHandle, VisibilityTimeout: 60},
		{Id: aws.String("junk"), ReceiptHandle: aws.String("junk"), VisibilityTimeout: 60},
	}})
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{}
	for _, f := range cv.Failed {
		codes[aws.ToString(f.Id)] = aws.ToString(f.Code)
		if !f.SenderFault {
			t.Errorf("%s: SenderFault false", aws.ToString(f.Id))
		}
	}
	if len(cv.Successful) != 1 || codes["visible"] != "AWS.SimpleQueueService.MessageNotInflight" || codes["junk"] != "ReceiptHandleIsInvalid" {
		t.Errorf("ChangeMessageVisibilityBatch: %d successful, failed %v", len(cv.Successful), codes)
	}

	dm, err := e.c.DeleteMessageBatch(e.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: msgs[0].ReceiptHandle},
		{Id: aws.String("b"), ReceiptHandle: msgs[1].ReceiptHandle},
		{Id: aws.String("c"), ReceiptHandle: aws.String("junk")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(dm.Successful) != 2 || len(dm.Failed) != 1 || aws.ToString(dm.Failed[0].Code) != "ReceiptHandleIsInvalid" {
		t.Errorf("DeleteMessageBatch: %+v", dm)
	}
	if got := bodies(e.receive(url, 10)); len(got) != 1 || got[0] != "3" {
		t.Errorf("left on the queue: %v, want 3", got)
	}
	_, err = e.c.DeleteMessageBatch(e.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: msgs[0].ReceiptHandle}, {Id: aws.String("a"), ReceiptHandle: msgs[1].ReceiptHandle},
	}})
	if !isType[*types.BatchEntryIdsNotDistinct](err) {
		t.Errorf("repeated ids: %v", err)
	}
}
