package memsqs_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/localstack/memaws/memsqs"
)

// inProcess is an http.RoundTripper that serves every request with h in
// the calling goroutine, with the request's context; like a network
// transport, it fails a request whose context ended.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

// newClient is the real SDK client a user of SQS would have, talking to h.
func newClient(h http.Handler, optFns ...func(*sqs.Options)) *sqs.Client {
	return sqs.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: inProcess{h}},
		BaseEndpoint: aws.String("http://sqs.memaws.local"),
	}, optFns...)
}

// clock is a fake Options.Clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one server with a fake clock and a client.
type env struct {
	t     *testing.T
	ctx   context.Context
	srv   *memsqs.Server
	clock *clock
	c     *sqs.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := newClock()
	srv := memsqs.New(memsqs.Options{Clock: clk.Now})
	return &env{t: t, ctx: context.Background(), srv: srv, clock: clk, c: newClient(srv)}
}

// advance moves the fake clock and wakes long polls, as a test must.
func (e *env) advance(d time.Duration) {
	e.clock.Advance(d)
	e.srv.Wake()
}

func (e *env) createQueue(name string, attrs map[string]string) string {
	e.t.Helper()
	out, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		e.t.Fatalf("create queue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

func (e *env) fifoQueue(name string, attrs map[string]string) string {
	e.t.Helper()
	a := map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	for k, v := range attrs {
		a[k] = v
	}
	return e.createQueue(name, a)
}

func (e *env) send(url, body string) *sqs.SendMessageOutput {
	e.t.Helper()
	out, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		e.t.Fatalf("send %q: %v", body, err)
	}
	return out
}

func (e *env) sendGroup(url, group, body string) *sqs.SendMessageOutput {
	e.t.Helper()
	out, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageGroupId: aws.String(group),
	})
	if err != nil {
		e.t.Fatalf("send %q to group %s: %v", body, group, err)
	}
	return out
}

// receive receives up to max messages without waiting, with every system
// and message attribute.
func (e *env) receive(url string, max int32) []types.Message {
	e.t.Helper()
	out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: max,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		e.t.Fatalf("receive from %s: %v", url, err)
	}
	return out.Messages
}

func (e *env) attributes(url string, names ...types.QueueAttributeName) map[string]string {
	e.t.Helper()
	out, err := e.c.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		e.t.Fatalf("get attributes of %s: %v", url, err)
	}
	return out.Attributes
}

func bodies(msgs []types.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// errorCode is the code a user of the SDK matches on: the query code
// (x-amzn-query-error) when SQS sent one.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isType reports whether err is (or wraps) an error of type T, as
// errors.As would find it.
func isType[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}
