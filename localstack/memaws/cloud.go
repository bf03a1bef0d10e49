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
// Each service can Snapshot and Restore its state: the explorer
// (tests/explore) backtracks that way instead of replaying a schedule.
package memaws

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

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

// Cloud is one in-memory AWS: three services and the transport to them.
type Cloud struct {
	S3       *mems3.Server
	SQS      *memsqs.Server
	DynamoDB *memdynamo.Server
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

// Do answers one request in-process: it satisfies the SDK's HTTPClient.
func (c *Cloud) Do(req *http.Request) (*http.Response, error) {
	handler := c.route(req)
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

// ServeHTTP answers a request that came over a socket: a Cloud is also an
// http.Handler, so its services can be served on a port to other
// processes (the scale bench's compaction jobs, each a process of its own,
// and gigabytes of blocks moto cannot list in time).
func (c *Cloud) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	c.route(req).ServeHTTP(w, req)
}

// route picks the service by the request's shape: DynamoDB and SQS speak
// JSON with an X-Amz-Target, S3 is everything else (path-style REST).
func (c *Cloud) route(req *http.Request) http.Handler {
	target := req.Header.Get("X-Amz-Target")
	switch {
	case strings.HasPrefix(target, "DynamoDB_"):
		return c.DynamoDB
	case strings.HasPrefix(target, "AmazonSQS."):
		return c.SQS
	default:
		return c.S3
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
