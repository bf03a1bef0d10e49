package memsqs_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/localstack/memaws/memsqs"
)

func TestSendToARN(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("block-events", nil)
	e.fifoQueue("jobs.fifo", nil)
	event := []byte(`{"Records":[{"eventName":"ObjectCreated:Put"}]}`)
	if err := e.srv.SendToARN(e.ctx, "arn:aws:sqs:us-east-1:000000000000:block-events", event); err != nil {
		t.Fatalf("SendToARN: %v", err)
	}
	got := e.receive(url, 10)
	if len(got) != 1 || aws.ToString(got[0].Body) != string(event) {
		t.Fatalf("received %v", bodies(got))
	}
	for _, arn := range []string{
		"arn:aws:sqs:us-east-1:000000000000:nope",
		"arn:aws:sqs:eu-west-1:000000000000:block-events",
		"arn:aws:sqs:us-east-1:000000000000:jobs.fifo",
	} {
		if err := e.srv.SendToARN(e.ctx, arn, event); err == nil {
			t.Errorf("SendToARN %s succeeded", arn)
		}
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("q", nil)
	other := e.createQueue("other", nil)

	var calls atomic.Int32
	e.srv.SetFault(func(op, queue string) *memsqs.Failure {
		calls.Add(1)
		if op == "SendMessage" && queue == "q" {
			return &memsqs.Failure{Code: "AWS.SimpleQueueService.NonExistentQueue", Message: "injected"}
		}
		if op == "ReceiveMessage" && queue == "q" {
			return &memsqs.Failure{Code: "com.amazonaws.sqs#OverLimit"}
		}
		if op == "SendToARN" {
			return &memsqs.Failure{Code: "InternalError"}
		}
		return nil
	})
	before := digest(e.srv)
	_, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")})
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) || missing.ErrorMessage() != "injected" {
		t.Fatalf("injected SendMessage failure: %v", err)
	}
	_, err = e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
	if !isType[*types.OverLimit](err) {
		t.Fatalf("injected ReceiveMessage failure: %v (%T)", err, err)
	}
	if err := e.srv.SendToARN(e.ctx, "arn:aws:sqs:us-east-1:000000000000:q", []byte("x")); err == nil {
		t.Fatal("injected SendToARN failure did not fail")
	}
	if after := digest(e.srv); after != before {
		t.Fatal("a failed request changed the state")
	}
	e.send(other, "unaffected")
	if calls.Load() < 4 {
		t.Fatalf("fault function consulted %d times", calls.Load())
	}

	// A transient server error is retried by the SDK: one failure, then
	// the request is applied once.
	var failures atomic.Int32
	e.srv.SetFault(func(op, _ string) *memsqs.Failure {
		if op == "SendMessage" && failures.Add(1) == 1 {
			return &memsqs.Failure{Code: "ServiceUnavailable", Message: "try again"}
		}
		return nil
	})
	if _, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("retried")}); err != nil {
		t.Fatalf("SendMessage after one 503: %v", err)
	}
	if got := bodies(e.receive(url, 10)); len(got) != 1 || got[0] != "retried" {
		t.Fatalf("after the retried send: %v", got)
	}

	// Without retries the error reaches the caller with its code, fault
	// and status.
	e.srv.SetFault(func(op, _ string) *memsqs.Failure {
		return &memsqs.Failure{Code: "ThrottlingException", Message: "slow down", Status: http.StatusTooManyRequests}
	})
	_, err = newClient(e.srv, func(o *sqs.Options) { o.RetryMaxAttempts = 1 }).GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("q")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ThrottlingException" || ae.ErrorFault() != smithy.FaultClient {
		t.Fatalf("unmodeled fault: %v", err)
	}
	e.srv.SetFault(nil)
	if _, err := e.c.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("q")}); err != nil {
		t.Fatalf("after SetFault(nil): %v", err)
	}
}

func digest(s *memsqs.Server) string {
	h := sha256.New()
	s.Digest(h)
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestDigestAndIdentifiers(t *testing.T) {
	t.Parallel()
	script := func(e *env) []string {
		var ids []string
		std := e.createQueue("std", map[string]string{"VisibilityTimeout": "40"})
		fifo := e.fifoQueue("f.fifo", nil)
		for i := range 3 {
			ids = append(ids, aws.ToString(e.send(std, fmt.Sprint("s", i)).MessageId))
			out := e.sendGroup(fifo, "g", fmt.Sprint("f", i))
			ids = append(ids, aws.ToString(out.MessageId), aws.ToString(out.SequenceNumber))
		}
		for _, m := range e.receive(std, 2) {
			ids = append(ids, aws.ToString(m.ReceiptHandle))
		}
		m := e.receive(fifo, 1)[0]
		if _, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(fifo), ReceiptHandle: m.ReceiptHandle}); err != nil {
			e.t.Fatal(err)
		}
		return ids
	}
	a, b := newEnv(t), newEnv(t)
	idsA, idsB := script(a), script(b)
	if fmt.Sprint(idsA) != fmt.Sprint(idsB) {
		t.Errorf("identifiers differ:\n%v\n%v", idsA, idsB)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	if !uuid.MatchString(idsA[0]) {
		t.Errorf("MessageId %s does not look like a UUID", idsA[0])
	}
	if idsA[0] == idsA[1] {
		t.Error("two messages share a MessageId")
	}
	if da, db := digest(a.srv), digest(b.srv); da != db {
		t.Fatalf("digests differ after the same requests: %s %s", da, db)
	}
	same := digest(a.srv)
	if digest(a.srv) != same {
		t.Fatal("Digest is not stable")
	}
	a.send("http://sqs.memaws.local/000000000000/std", "one more")
	if digest(a.srv) == digest(b.srv) {
		t.Fatal("digest unchanged by one more send")
	}
	b.send("http://sqs.memaws.local/000000000000/std", "one more")
	if digest(a.srv) != digest(b.srv) {
		t.Fatal("digests differ after the same extra send")
	}
	// Visibility is part of the state.
	b.receive("http://sqs.memaws.local/000000000000/std", 1)
	if digest(a.srv) == digest(b.srv) {
		t.Fatal("digest unchanged by a receive")
	}
}

// TestProtocol checks the wire details a non-SDK client sees.
func TestProtocol(t *testing.T) {
	t.Parallel()
	srv := memsqs.New(memsqs.Options{Endpoint: "http://localhost:4566/", Account: "123456789012", Region: "eu-west-1"})
	c := newClient(srv)
	ctx := context.Background()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q")})
	if err != nil || aws.ToString(out.QueueUrl) != "http://localhost:4566/123456789012/q" {
		t.Fatalf("CreateQueue = %v, %v", out, err)
	}
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
	if err != nil || a.Attributes["QueueArn"] != "arn:aws:sqs:eu-west-1:123456789012:q" {
		t.Fatalf("QueueArn = %v, %v", a, err)
	}
	// Any host works; the account must match.
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String("https://sqs.eu-west-1.amazonaws.com/123456789012/q"), MessageBody: aws.String("x")}); err != nil {
		t.Errorf("URL with another host: %v", err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String("http://localhost:4566/000000000000/q"), MessageBody: aws.String("x")}); !isType[*types.QueueDoesNotExist](err) {
		t.Errorf("URL of another account: %v", err)
	}
	if _, err := c.AddPermission(ctx, &sqs.AddPermissionInput{QueueUrl: out.QueueUrl, Label: aws.String("l"),
		AWSAccountIds: []string{"1"}, Actions: []string{"SendMessage"}}); !isType[*types.UnsupportedOperation](err) {
		t.Errorf("AddPermission: %v", err)
	}
}
