// Package memaws is the fast tier's AWS: an in-memory S3, SQS and DynamoDB
// (mems3, memsqs, memdynamo) behind one in-process transport, so the real
// AWS SDK for Go clients — and through them the real handlers, the records
// store, the event source and the CLI — run without an emulator and
// without a socket.
//
// Why at the wire and not behind Go interfaces: the code under test keeps
// its SDK clients, its serialisation, its retries and its error decoding;
// the condition expressions shared/records writes are parsed and evaluated
// as DynamoDB would; and the contract tests that hold the emulator to AWS's
// behaviour (localstack/platformtest) hold this tier to it too.
//
// Every request passes a Gate first, if one is set: the explorer
// (tests/explore) uses it to run the handlers one AWS call at a time in
// the order it chooses, and to crash one between two calls.
package memaws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"

	"github.com/sluice-dev/sluice/localstack/memaws/memdynamo"
	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
	"github.com/sluice-dev/sluice/localstack/memaws/memsqs"
)

// Endpoint is the URL the clients of a Cloud are given. Nothing listens
// there: the Cloud's transport answers every request itself.
const Endpoint = "http://memaws.local"

// Options configure a Cloud. The zero value is ready to use.
type Options struct {
	// Region of every service; default "us-east-1".
	Region string
	// Account in ARNs and queue URLs; default "000000000000".
	Account string
	// Clock is the services' now (visibility timeouts, delays, object
	// times, token windows); default time.Now.
	Clock func() time.Time
}

// Call is one AWS request as the Gate sees it, before it is applied.
type Call struct {
	// Ctx is the caller's context: an explorer tags it to know which
	// actor is calling.
	Ctx       context.Context
	Service   string // "S3", "SQS" or "DynamoDB"
	Operation string // the SDK's operation name, e.g. "TransactWriteItems"
}

// Gate is consulted before every request is applied. It may block (to
// hold a caller until its turn) and may return an error, which the caller
// receives as a transport failure with nothing applied.
type Gate func(Call) error

// Cloud is one in-memory AWS: three services and the transport to them.
type Cloud struct {
	S3       *mems3.Server
	SQS      *memsqs.Server
	DynamoDB *memdynamo.Server

	mu   sync.RWMutex
	gate Gate
}

// New returns an empty Cloud whose bucket notifications reach its queues.
func New(opts Options) *Cloud {
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.Account == "" {
		opts.Account = "000000000000"
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	c := &Cloud{
		SQS:      memsqs.New(memsqs.Options{Region: opts.Region, Account: opts.Account, Endpoint: Endpoint, Clock: opts.Clock}),
		DynamoDB: memdynamo.New(memdynamo.Options{Region: opts.Region, Account: opts.Account, Clock: opts.Clock}),
	}
	c.S3 = mems3.New(mems3.Options{Region: opts.Region, Clock: opts.Clock, Notify: c.SQS.SendToARN})
	return c
}

// SetGate installs g (nil removes it).
func (c *Cloud) SetGate(g Gate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate = g
}

// ErrGateClosed is what a caller gets when the gate refuses its request.
var ErrGateClosed = errors.New("memaws: request refused by the gate")

// Do answers one request in-process: it satisfies the SDK's HTTPClient.
func (c *Cloud) Do(req *http.Request) (*http.Response, error) {
	service, handler := c.route(req)
	c.mu.RLock()
	gate := c.gate
	c.mu.RUnlock()
	if gate != nil {
		call := Call{Ctx: req.Context(), Service: service, Operation: awsmiddleware.GetOperationName(req.Context())}
		if err := gate(call); err != nil {
			return nil, fmt.Errorf("%s %s: %w", service, call.Operation, err)
		}
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, asServerRequest(req))
	// A long poll whose caller gave up answers empty: the caller must see
	// its context's error, as over a socket, not an empty receive.
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

// route picks the service by the request's shape: DynamoDB and SQS speak
// JSON with an X-Amz-Target, S3 is everything else (path-style REST).
func (c *Cloud) route(req *http.Request) (string, http.Handler) {
	target := req.Header.Get("X-Amz-Target")
	switch {
	case strings.HasPrefix(target, "DynamoDB_"):
		return "DynamoDB", c.DynamoDB
	case strings.HasPrefix(target, "AmazonSQS."):
		return "SQS", c.SQS
	default:
		return "S3", c.S3
	}
}

// asServerRequest makes a client request look as a server receives it:
// the request URI set and the length in a header.
func asServerRequest(req *http.Request) *http.Request {
	r := req.Clone(req.Context())
	r.RequestURI = req.URL.RequestURI()
	if r.Body == nil {
		r.Body = http.NoBody
	}
	if req.ContentLength >= 0 && r.Header.Get("Content-Length") == "" {
		r.Header.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	}
	if r.Host == "" {
		r.Host = req.URL.Host
	}
	return r
}
