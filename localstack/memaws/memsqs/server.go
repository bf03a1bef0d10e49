package memsqs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	Region   string           // default "us-east-1"
	Account  string           // default "000000000000"
	Endpoint string           // base of queue URLs, default "http://sqs.memaws.local"; QueueUrl = Endpoint + "/" + Account + "/" + name
	Clock    func() time.Time // default time.Now: visibility timeouts, delays, retention, dedup windows all use it
}

// Server is an in-memory SQS. It is safe for concurrent use; each request
// is applied atomically.
type Server struct {
	opts Options

	mu sync.Mutex
	// queues by name.
	queues map[string]*queue
	// deleted remembers when a queue name was deleted, for SQS's rule that
	// a name can be reused only 60 seconds later.
	deleted map[string]time.Time
	fault   func(op, queueName string) *Failure
	// wake is closed (and replaced) whenever something a long poll may be
	// waiting for happens.
	wake chan struct{}
	ids  counters
}

// counters hold the last value handed out of each kind of identifier.
type counters struct {
	queue, message, receipt, sequence, request uint64
}

// New returns an empty server.
func New(opts Options) *Server {
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.Account == "" {
		opts.Account = "000000000000"
	}
	if opts.Endpoint == "" {
		opts.Endpoint = "http://sqs.memaws.local"
	}
	opts.Endpoint = strings.TrimRight(opts.Endpoint, "/")
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &Server{
		opts:    opts,
		queues:  map[string]*queue{},
		deleted: map[string]time.Time{},
		wake:    make(chan struct{}),
	}
}

// Wake makes every waiting long poll re-check now. A test that advances a
// fake Clock calls it: memsqs waits in real time and cannot know that the
// fake time moved.
func (s *Server) Wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broadcast()
}

// SetFault installs f, consulted before each request (and each SendToARN)
// is applied, with the operation name ("SendMessage", …, "SendToARN") and
// the name of the queue the request addresses ("" for ListQueues). A
// non-nil Failure is returned to the caller instead, and the state is left
// untouched. SetFault(nil) removes it.
func (s *Server) SetFault(f func(op, queueName string) *Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// broadcast wakes every long poll; the caller holds s.mu.
func (s *Server) broadcast() {
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *Server) now() time.Time { return s.opts.Clock() }

// injected consults the fault function outside the lock, so that it may
// call back into the server.
func (s *Server) injected(op, queueName string) *apiError {
	s.mu.Lock()
	f := s.fault
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	if fl := f(op, queueName); fl != nil {
		return fl.apiError()
	}
	return nil
}

// maxRequestBytes bounds what ServeHTTP reads: a batch of ten 1 MiB
// messages, JSON-escaped, fits.
const maxRequestBytes = 64 << 20

// ServeHTTP serves the AWS JSON 1.0 protocol for SQS.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.ids.request++
	reqID := requestID(s.ids.request)
	s.mu.Unlock()
	w.Header().Set("x-amzn-RequestId", reqID)

	if r.Method != http.MethodPost {
		writeError(w, &apiError{shape: "InvalidAction", code: "InvalidAction", status: http.StatusMethodNotAllowed,
			message: fmt.Sprintf("memsqs serves POST only, not %s", r.Method)})
		return
	}
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, "AmazonSQS.")
	if !ok {
		writeError(w, &apiError{shape: "InvalidAction", code: "InvalidAction", status: http.StatusBadRequest,
			message: fmt.Sprintf("X-Amz-Target %q does not name an AmazonSQS operation", target)})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		writeError(w, &apiError{shape: "SerializationException", code: "SerializationException", status: http.StatusBadRequest,
			message: fmt.Sprintf("%s: read request body: %v", op, err)})
		return
	}
	if len(body) > maxRequestBytes {
		writeError(w, &apiError{shape: "RequestEntityTooLarge", code: "RequestEntityTooLarge", status: http.StatusRequestEntityTooLarge,
			message: fmt.Sprintf("%s: request body over %d bytes", op, maxRequestBytes)})
		return
	}
	out, aerr := s.dispatch(r.Context(), op, body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// empty is the output of an operation that returns nothing.
type empty struct{}

// request is implemented by every operation's input: target names the
// queue the request addresses, for the fault function.
type request interface {
	target() string
}

func (s *Server) dispatch(ctx context.Context, op string, body []byte) (any, *apiError) {
	switch op {
	case "CreateQueue":
		return serve(ctx, s, op, body, s.createQueue)
	case "GetQueueUrl":
		return serve(ctx, s, op, body, s.getQueueURL)
	case "ListQueues":
		return serve(ctx, s, op, body, s.listQueues)
	case "DeleteQueue":
		return serve(ctx, s, op, body, s.deleteQueue)
	case "PurgeQueue":
		return serve(ctx, s, op, body, s.purgeQueue)
	case "GetQueueAttributes":
		return serve(ctx, s, op, body, s.getQueueAttributes)
	case "SetQueueAttributes":
		return serve(ctx, s, op, body, s.setQueueAttributes)
	case "TagQueue":
		return serve(ctx, s, op, body, s.tagQueue)
	case "UntagQueue":
		return serve(ctx, s, op, body, s.untagQueue)
	case "ListQueueTags":
		return serve(ctx, s, op, body, s.listQueueTags)
	case "ListDeadLetterSourceQueues":
		return serve(ctx, s, op, body, s.listDeadLetterSourceQueues)
	case "SendMessage":
		return serve(ctx, s, op, body, s.sendMessage)
	case "SendMessageBatch":
		return serve(ctx, s, op, body, s.sendMessageBatch)
	case "ReceiveMessage":
		return serve(ctx, s, op, body, s.receiveMessage)
	case "DeleteMessage":
		return serve(ctx, s, op, body, s.deleteMessage)
	case "DeleteMessageBatch":
		return serve(ctx, s, op, body, s.deleteMessageBatch)
	case "ChangeMessageVisibility":
		return serve(ctx, s, op, body, s.changeMessageVisibility)
	case "ChangeMessageVisibilityBatch":
		return serve(ctx, s, op, body, s.changeMessageVisibilityBatch)
	case "AddPermission", "RemovePermission", "StartMessageMoveTask", "CancelMessageMoveTask", "ListMessageMoveTasks":
		return nil, &apiError{shape: "UnsupportedOperation", code: "AWS.SimpleQueueService.UnsupportedOperation",
			status: http.StatusBadRequest, message: fmt.Sprintf("memsqs does not implement %s", op)}
	default:
		return nil, &apiError{shape: "UnknownOperationException", code: "InvalidAction", status: http.StatusBadRequest,
			message: fmt.Sprintf("the action %s is not valid for this endpoint", op)}
	}
}

// serve decodes an operation's input, consults the fault function and
// runs the operation.
func serve[Req request, Resp any](ctx context.Context, s *Server, op string, body []byte,
	fn func(context.Context, *Req) (Resp, *apiError)) (any, *apiError) {
	var req Req
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, &apiError{shape: "SerializationException", code: "SerializationException", status: http.StatusBadRequest,
				message: fmt.Sprintf("%s: cannot decode the request: %v", op, err)}
		}
	}
	if aerr := s.injected(op, req.target()); aerr != nil {
		return nil, aerr
	}
	return fn(ctx, &req)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only a bug in memsqs's own response types gets here.
		writeError(w, &apiError{shape: "InternalError", code: "InternalError", status: http.StatusInternalServerError,
			message: fmt.Sprintf("memsqs: encode response: %v", err)})
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
