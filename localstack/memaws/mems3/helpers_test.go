package mems3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

// inProcess is an http.RoundTripper that serves each request with the
// handler in the calling goroutine: the SDK's whole client stack runs,
// no socket is opened.
type inProcess struct {
	h      http.Handler
	mangle func(*http.Request) // optional: change the request in flight
}

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	sr := r.Clone(r.Context())
	sr.RequestURI = r.URL.RequestURI()
	sr.RemoteAddr = "127.0.0.1:40000"
	if sr.Body == nil {
		sr.Body = http.NoBody
	}
	if t.mangle != nil {
		t.mangle(sr)
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, sr)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	resp := rec.Result()
	resp.Request = r
	if r.Method == http.MethodHead {
		resp.Body = http.NoBody
	}
	return resp, nil
}

// logRecorder keeps what the SDK logs (notably the checksum validation
// middleware's "skipped" messages).
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Logf(_ logging.Classification, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *logRecorder) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

type clientConfig struct {
	https       bool
	maxAttempts int
	mangle      func(*http.Request)
}

// newClient is the real SDK client, configured as config.LoadDefaultConfig
// would (checksums "when supported"), talking to srv in-process.
func newClient(srv *mems3.Server, logs *logRecorder, cc clientConfig) *s3.Client {
	endpoint := "http://s3.memaws.local"
	if cc.https {
		endpoint = "https://s3.memaws.local"
	}
	attempts := cc.maxAttempts
	if attempts == 0 {
		attempts = 3
	}
	cfg := aws.Config{
		Region:                     "us-east-1",
		Credentials:                credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:                 &http.Client{Transport: inProcess{h: srv, mangle: cc.mangle}},
		BaseEndpoint:               aws.String(endpoint),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported,
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = attempts
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
				o.RateLimiter = ratelimit.None
			})
		},
	}
	if logs != nil {
		cfg.Logger = logs
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
}

// fixture is a server with one client and a fresh bucket.
type fixture struct {
	srv    *mems3.Server
	c      *s3.Client
	logs   *logRecorder
	bucket string
}

func newFixture(t *testing.T, opts mems3.Options, versioning bool) *fixture {
	t.Helper()
	f := &fixture{srv: mems3.New(opts), logs: &logRecorder{}, bucket: "bucket-1"}
	f.c = newClient(f.srv, f.logs, clientConfig{})
	ctx := t.Context()
	if _, err := f.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(f.bucket)}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	if versioning {
		f.setVersioning(t, "Enabled")
	}
	return f
}

func (f *fixture) setVersioning(t *testing.T, status string) {
	t.Helper()
	if _, err := f.c.PutBucketVersioning(t.Context(), &s3.PutBucketVersioningInput{
		Bucket:                  aws.String(f.bucket),
		VersioningConfiguration: &s3types.VersioningConfiguration{Status: s3types.BucketVersioningStatus(status)},
	}); err != nil {
		t.Fatalf("PutBucketVersioning %s: %v", status, err)
	}
}

func (f *fixture) put(t *testing.T, key, body string, mods ...func(*s3.PutObjectInput)) *s3.PutObjectOutput {
	t.Helper()
	out, err := f.tryPut(t.Context(), key, body, mods...)
	if err != nil {
		t.Fatalf("PutObject %s: %v", key, err)
	}
	return out
}

func (f *fixture) tryPut(ctx context.Context, key, body string, mods ...func(*s3.PutObjectInput)) (*s3.PutObjectOutput, error) {
	in := &s3.PutObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key), Body: strings.NewReader(body)}
	for _, m := range mods {
		m(in)
	}
	return f.c.PutObject(ctx, in)
}

// get returns the body of key (at version vid if not ""), read to the end
// so that the SDK's checksum validation runs.
func (f *fixture) get(ctx context.Context, key, vid string, mods ...func(*s3.GetObjectInput)) (string, *s3.GetObjectOutput, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key)}
	if vid != "" {
		in.VersionId = aws.String(vid)
	}
	for _, m := range mods {
		m(in)
	}
	out, err := f.c.GetObject(ctx, in)
	if err != nil {
		return "", nil, err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return "", nil, fmt.Errorf("read body: %w", err)
	}
	return string(b), out, nil
}

func (f *fixture) mustGet(t *testing.T, key, vid string) string {
	t.Helper()
	body, _, err := f.get(t.Context(), key, vid)
	if err != nil {
		t.Fatalf("GetObject %s@%s: %v", key, vid, err)
	}
	return body
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// wantError checks an SDK error's S3 code and HTTP status.
func wantError(t *testing.T, what string, err error, code string, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %s (%d)", what, code, status)
	}
	if got := apiCode(err); got != code {
		t.Fatalf("%s: error code %q (%v), want %q", what, got, err, code)
	}
	if got := httpStatus(err); got != status {
		t.Fatalf("%s: HTTP status %d, want %d", what, got, status)
	}
}

func sdkBody(s string) io.Reader { return bytes.NewReader([]byte(s)) }
