package memsqs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/localstack/memaws/memsqs"
)

// TestLongPoll runs on the real clock: a long poll waits in real time.
func TestLongPoll(t *testing.T) {
	t.Parallel()
	srv := memsqs.New(memsqs.Options{})
	c := newClient(srv)
	ctx := context.Background()
	create := func(name string, attrs map[string]string) *string {
		out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		return out.QueueUrl
	}

	t.Run("returns early when a message is sent", func(t *testing.T) {
		t.Parallel()
		url := create("early", nil)
		go func() {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("hi")}); err != nil {
				t.Error(err)
			}
		}()
		start := time.Now()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 10, MaxNumberOfMessages: 10})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("long poll: %v, %v", out, err)
		}
		if d := time.Since(start); d < 90*time.Millisecond || d > 2*time.Second {
			t.Errorf("long poll returned after %v, want about 100 ms", d)
		}
	})

	t.Run("returns empty after the wait", func(t *testing.T) {
		t.Parallel()
		url := create("empty", nil)
		start := time.Now()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 1})
		if err != nil || len(out.Messages) != 0 {
			t.Fatalf("long poll: %v, %v", out, err)
		}
		if d := time.Since(start); d < time.Second || d > 3*time.Second {
			t.Errorf("long poll returned after %v, want 1 s", d)
		}
	})

	t.Run("the queue's ReceiveMessageWaitTimeSeconds is the default", func(t *testing.T) {
		t.Parallel()
		url := create("default-wait", map[string]string{"ReceiveMessageWaitTimeSeconds": "1"})
		start := time.Now()
		if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("receive without WaitTimeSeconds returned after %v, want the queue's 1 s", d)
		}
	})

	t.Run("a delay ending wakes the poll", func(t *testing.T) {
		t.Parallel()
		url := create("delayed", nil)
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("later"), DelaySeconds: 1}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 5})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("long poll: %v, %v", out, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("long poll returned after %v, want about 1 s", d)
		}
	})

	t.Run("ends with the request's context", func(t *testing.T) {
		t.Parallel()
		url := create("cancelled", nil)
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.ReceiveMessage(cctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 20})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("cancelled long poll: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("cancelled long poll returned after %v", d)
		}
		// Nothing was taken by the abandoned poll.
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("x")}); err != nil {
			t.Fatal(err)
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url})
		if err != nil || len(out.Messages) != 1 {
			t.Errorf("after the cancelled poll: %v, %v", out, err)
		}
	})
}

func TestReceiveParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("r", nil)
	for _, in := range []sqs.ReceiveMessageInput{
		{MaxNumberOfMessages: 11},
		{MaxNumberOfMessages: -1},
		{WaitTimeSeconds: 21},
		{VisibilityTimeout: 43201},
	} {
		in.QueueUrl = aws.String(url)
		if _, err := e.c.ReceiveMessage(e.ctx, &in); errorCode(err) != "InvalidParameterValue" {
			t.Errorf("ReceiveMessage %+v: %v, want InvalidParameterValue", in, err)
		}
	}

	for range 12 {
		e.send(url, "m")
	}
	if got := e.receive(url, 0); len(got) != 1 {
		t.Errorf("default MaxNumberOfMessages gave %d messages, want 1", len(got))
	}
	if got := e.receive(url, 10); len(got) != 10 {
		t.Errorf("MaxNumberOfMessages 10 gave %d", len(got))
	}

	// Which attributes come back.
	if _, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("attrs"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"trace.id": strAttr("String", "t"), "trace.span": strAttr("String", "s"), "tenant": strAttr("String", "b"),
		}}); err != nil {
		t.Fatal(err)
	}
	e.advance(30 * time.Second)
	tests := []struct {
		name       string
		system     []types.MessageSystemAttributeName
		legacy     []types.QueueAttributeName
		user       []string
		wantSystem []string
		wantUser   []string
		wantNoMD5  bool
	}{
		{"nothing asked", nil, nil, nil, nil, nil, true},
		{"one of each", []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp}, nil, []string{"tenant"},
			[]string{"SentTimestamp"}, []string{"tenant"}, false},
		{"legacy AttributeNames", nil, []types.QueueAttributeName{"ApproximateReceiveCount"}, nil,
			[]string{"ApproximateReceiveCount"}, nil, true},
		{"prefix", nil, nil, []string{"trace.*"}, nil, []string{"trace.id", "trace.span"}, false},
		{"All", []types.MessageSystemAttributeName{"All"}, nil, []string{"All"},
			[]string{"SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp"},
			[]string{"trace.id", "trace.span", "tenant"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.advance(30 * time.Second)
			var m types.Message
			for m.Body == nil || aws.ToString(m.Body) != "attrs" {
				in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
					MessageSystemAttributeNames: tc.system, MessageAttributeNames: tc.user}
				//lint:ignore SA1019 SQS still honours the deprecated AttributeNames, and older clients send it.
				in.AttributeNames = tc.legacy
				out, err := e.c.ReceiveMessage(e.ctx, in)
				if err != nil || len(out.Messages) == 0 {
					t.Fatalf("receive: %v, %v", out, err)
				}
				for _, x := range out.Messages {
					if aws.ToString(x.Body) == "attrs" {
						m = x
					}
				}
			}
			if len(m.Attributes) != len(tc.wantSystem) {
				t.Errorf("system attributes %v, want %v", m.Attributes, tc.wantSystem)
			}
			for _, k := range tc.wantSystem {
				if m.Attributes[k] == "" {
					t.Errorf("system attribute %s missing: %v", k, m.Attributes)
				}
			}
			if len(m.MessageAttributes) != len(tc.wantUser) {
				t.Errorf("message attributes %v, want %v", m.MessageAttributes, tc.wantUser)
			}
			for _, k := range tc.wantUser {
				if _, ok := m.MessageAttributes[k]; !ok {
					t.Errorf("message attribute %s missing", k)
				}
			}
			if (m.MD5OfMessageAttributes == nil) != tc.wantNoMD5 {
				t.Errorf("MD5OfMessageAttributes = %v", m.MD5OfMessageAttributes)
			}
		})
	}
}
