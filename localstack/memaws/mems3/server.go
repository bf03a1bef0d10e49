package mems3

import (
	"bytes"
	"context"
	"encoding/xml"
	"hash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server. Zero values mean the documented defaults.
type Options struct {
	Region string           // default "us-east-1"
	Clock  func() time.Time // default time.Now; used for LastModified, event times
	// Notify delivers one S3 event notification body (JSON, exactly as S3
	// sends it to SQS) to the queue with the given ARN. Nil: notifications
	// are dropped. It is called outside the server lock, never
	// concurrently, in commit order, and before the request whose commit
	// produced the event is answered; it must not call back into the
	// server synchronously. An error drops the event (S3's delivery is best
	// effort) and counts in DroppedNotifications; for the s3:TestEvent sent
	// by PutBucketNotificationConfiguration it fails that request, as S3
	// does when it cannot validate a destination.
	Notify func(ctx context.Context, queueARN string, body []byte) error
	// MinPartSize is the smallest size of every part but the last of a
	// multipart upload (S3's EntityTooSmall rule). Default 5 MiB; tests
	// lower it to keep uploads small.
	MinPartSize int64
}

const defaultMinPartSize = 5 << 20

// Failure is an error response a test makes the server give, as AWS can.
type Failure struct {
	Status        int
	Code, Message string
	// AfterApply applies the request and then answers with the failure
	// anyway, as when S3 commits a write but the response is lost: the
	// client sees an error (and its SDK retries) although the write
	// happened.
	AfterApply bool
}

// Server is an in-memory S3. Create it with New; it is safe for
// concurrent use.
type Server struct {
	region      string
	clock       func() time.Time
	notify      func(ctx context.Context, queueARN string, body []byte) error
	minPartSize int64

	mu         sync.Mutex // guards everything below it up to deliverMu
	buckets    map[string]*bucket
	versionSeq uint64     // versions and delete markers made
	uploadSeq  uint64     // multipart uploads created
	eventSeq   uint64     // event sequencer
	pending    []delivery // committed, not yet delivered notifications

	deliverMu sync.Mutex // held while calling notify, so calls are serial and in order

	requestSeq atomic.Uint64
	dropped    atomic.Int64
	fault      atomic.Pointer[faultFunc]
}

type faultFunc func(op, bucket, key string) *Failure

// New returns an empty server.
func New(opts Options) *Server {
	s := &Server{
		region:      opts.Region,
		clock:       opts.Clock,
		notify:      opts.Notify,
		minPartSize: opts.MinPartSize,
		buckets:     map[string]*bucket{},
	}
	if s.region == "" {
		s.region = "us-east-1"
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.minPartSize <= 0 {
		s.minPartSize = defaultMinPartSize
	}
	return s
}

// SetFault lets a test make requests fail as AWS can: f is consulted
// before each request is applied (op is the SDK's operation name, such as
// "PutObject"; key is "" for bucket operations); a non-nil *Failure makes
// the server answer with that status and S3 error code instead of applying
// the request. DeleteObjects also consults f for each of its keys, and a
// Failure for one key becomes that key's <Error> entry. Nil removes the
// fault.
func (s *Server) SetFault(f func(op string, bucket, key string) *Failure) {
	if f == nil {
		s.fault.Store(nil)
		return
	}
	ff := faultFunc(f)
	s.fault.Store(&ff)
}

func (s *Server) faultFor(op, bucket, key string) *Failure {
	f := s.fault.Load()
	if f == nil {
		return nil
	}
	return (*f)(op, bucket, key)
}

func failureError(f *Failure) *s3Error {
	status, code := f.Status, f.Code
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if code == "" {
		code = strings.ReplaceAll(http.StatusText(status), " ", "")
	}
	msg := f.Message
	if msg == "" {
		msg = "Injected failure: " + code
	}
	return newError(status, code, msg)
}

// DroppedNotifications is the number of event notifications Notify failed
// to deliver.
func (s *Server) DroppedNotifications() int { return int(s.dropped.Load()) }

// request is one S3 request being served.
type request struct {
	r      *http.Request
	op     string
	bucket string
	key    string
	query  url.Values
	id     string
	hostID string
	queued bool // the request committed changes with notifications to deliver
}

// response is a successful answer, written by ServeHTTP (so that an
// injected AfterApply failure can replace it).
type response struct {
	status int
	header http.Header
	body   []byte
}

func newResponse() *response { return &response{status: http.StatusOK, header: http.Header{}} }

func xmlResponse(v any) *response {
	resp := newResponse()
	resp.header.Set("Content-Type", "application/xml")
	resp.body = xmlBody(v)
	return resp
}

func xmlBody(v any) []byte {
	out, err := xml.Marshal(v)
	if err != nil {
		panic("mems3: marshal response: " + err.Error())
	}
	return append([]byte(xml.Header), out...)
}

// ServeHTTP answers one S3 REST request (path-style: /{bucket}/{key}).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := requestID(s.requestSeq.Add(1))
	rq := &request{r: r, query: r.URL.Query(), id: rid, hostID: hostID(rid)}
	rq.bucket, rq.key, _ = strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	op, err := route(r.Method, rq.bucket, rq.key, rq.query, r.Header)
	var resp *response
	if err == nil {
		rq.op = op
		resp, err = s.serve(rq)
	}
	s.write(w, rq, resp, err)
}

func (s *Server) serve(rq *request) (*response, *s3Error) {
	f := s.faultFor(rq.op, rq.bucket, rq.key)
	if f != nil && !f.AfterApply {
		return nil, failureError(f)
	}
	resp, err := s.dispatch(rq)
	if rq.queued {
		s.deliver(context.WithoutCancel(rq.r.Context()))
	}
	if f != nil {
		return nil, failureError(f)
	}
	return resp, err
}

func (s *Server) dispatch(rq *request) (*response, *s3Error) {
	switch rq.op {
	case "ListBuckets":
		return s.listBuckets(rq)
	case "CreateBucket":
		return s.createBucket(rq)
	case "HeadBucket":
		return s.headBucket(rq)
	case "DeleteBucket":
		return s.deleteBucket(rq)
	case "GetBucketLocation":
		return s.getBucketLocation(rq)
	case "PutBucketVersioning":
		return s.putBucketVersioning(rq)
	case "GetBucketVersioning":
		return s.getBucketVersioning(rq)
	case "PutBucketNotificationConfiguration":
		return s.putBucketNotification(rq)
	case "GetBucketNotificationConfiguration":
		return s.getBucketNotification(rq)
	case "ListObjects":
		return s.listObjects(rq)
	case "ListObjectsV2":
		return s.listObjectsV2(rq)
	case "ListObjectVersions":
		return s.listObjectVersions(rq)
	case "ListMultipartUploads":
		return s.listMultipartUploads(rq)
	case "DeleteObjects":
		return s.deleteObjects(rq)
	case "PutObject":
		return s.putObject(rq)
	case "CopyObject":
		return s.copyObject(rq)
	case "GetObject", "HeadObject":
		return s.getObject(rq)
	case "DeleteObject":
		return s.deleteObject(rq)
	case "CreateMultipartUpload":
		return s.createMultipartUpload(rq)
	case "UploadPart":
		return s.uploadPart(rq)
	case "CompleteMultipartUpload":
		return s.completeMultipartUpload(rq)
	case "AbortMultipartUpload":
		return s.abortMultipartUpload(rq)
	case "ListParts":
		return s.listParts(rq)
	}
	return nil, errNotImplemented(rq.op)
}

// unimplementedSubresources are query parameters naming S3 APIs this
// server does not have; a request with one is answered NotImplemented
// rather than served as the plain operation it would otherwise look like.
var unimplementedSubresources = []string{
	"accelerate", "acl", "analytics", "attributes", "cors", "encryption", "intelligent-tiering",
	"inventory", "legal-hold", "lifecycle", "logging", "metadataConfiguration", "metadataTable",
	"metrics", "object-lock", "ownershipControls", "policy", "policyStatus", "publicAccessBlock",
	"replication", "requestPayment", "restore", "retention", "select", "session", "tagging",
	"torrent", "website", "renameObject",
}

// route names the S3 operation a request is, as the SDK names it.
func route(method, bucket, key string, q url.Values, h http.Header) (string, *s3Error) {
	for _, sub := range unimplementedSubresources {
		if q.Has(sub) {
			return "", errNotImplemented(method + " ?" + sub)
		}
	}
	notAllowed := newError(http.StatusMethodNotAllowed, "MethodNotAllowed",
		"The specified method is not allowed against this resource.").with("Method", method)
	if bucket == "" {
		if method == http.MethodGet {
			return "ListBuckets", nil
		}
		return "", notAllowed
	}
	if key == "" {
		switch method {
		case http.MethodPut:
			switch {
			case q.Has("versioning"):
				return "PutBucketVersioning", nil
			case q.Has("notification"):
				return "PutBucketNotificationConfiguration", nil
			}
			return "CreateBucket", nil
		case http.MethodGet:
			switch {
			case q.Has("versioning"):
				return "GetBucketVersioning", nil
			case q.Has("notification"):
				return "GetBucketNotificationConfiguration", nil
			case q.Has("versions"):
				return "ListObjectVersions", nil
			case q.Has("uploads"):
				return "ListMultipartUploads", nil
			case q.Has("location"):
				return "GetBucketLocation", nil
			case q.Get("list-type") == "2":
				return "ListObjectsV2", nil
			}
			return "ListObjects", nil
		case http.MethodHead:
			return "HeadBucket", nil
		case http.MethodDelete:
			return "DeleteBucket", nil
		case http.MethodPost:
			if q.Has("delete") {
				return "DeleteObjects", nil
			}
		}
		return "", notAllowed
	}
	switch method {
	case http.MethodPut:
		if q.Has("uploadId") || q.Has("partNumber") {
			if h.Get("X-Amz-Copy-Source") != "" {
				return "", errNotImplemented("UploadPartCopy")
			}
			return "UploadPart", nil
		}
		if h.Get("X-Amz-Copy-Source") != "" {
			return "CopyObject", nil
		}
		return "PutObject", nil
	case http.MethodGet:
		if q.Has("uploadId") {
			return "ListParts", nil
		}
		return "GetObject", nil
	case http.MethodHead:
		return "HeadObject", nil
	case http.MethodDelete:
		if q.Has("uploadId") {
			return "AbortMultipartUpload", nil
		}
		return "DeleteObject", nil
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			return "CreateMultipartUpload", nil
		case q.Has("uploadId"):
			return "CompleteMultipartUpload", nil
		}
	}
	return "", notAllowed
}

// write sends the response, or the error document. HEAD answers carry no
// body, so the SDK derives the code of a failed HEAD from the status.
func (s *Server) write(w http.ResponseWriter, rq *request, resp *response, err *s3Error) {
	h := w.Header()
	h.Set("x-amz-request-id", rq.id)
	h.Set("x-amz-id-2", rq.hostID)
	h.Set("Server", "AmazonS3")
	head := rq.r.Method == http.MethodHead
	if err != nil {
		for k, vs := range err.header {
			h[k] = vs
		}
		var body []byte
		if !head {
			body = errorBody(err, rq)
			h.Set("Content-Type", "application/xml")
			h.Set("Content-Length", strconv.Itoa(len(body)))
		}
		w.WriteHeader(err.status)
		_, _ = w.Write(body)
		return
	}
	for k, vs := range resp.header {
		h[k] = vs
	}
	if h.Get("Content-Length") == "" && resp.status != http.StatusNoContent {
		h.Set("Content-Length", strconv.Itoa(len(resp.body)))
	}
	w.WriteHeader(resp.status)
	if !head && len(resp.body) > 0 {
		_, _ = w.Write(resp.body)
	}
}

func errorBody(err *s3Error, rq *request) []byte {
	var b bytes.Buffer
	b.WriteString(xml.Header)
	b.WriteString("<Error>")
	elem := func(name, value string) {
		b.WriteString("<" + name + ">")
		_ = xml.EscapeText(&b, []byte(value))
		b.WriteString("</" + name + ">")
	}
	elem("Code", err.code)
	elem("Message", err.message)
	for _, f := range err.fields {
		elem(f[0], f[1])
	}
	elem("RequestId", rq.id)
	elem("HostId", rq.hostID)
	b.WriteString("</Error>")
	return b.Bytes()
}

// Digest writes a canonical, deterministic serialization of the durable
// state to h; see digest.go.
func (s *Server) Digest(h hash.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.digest(h)
}
