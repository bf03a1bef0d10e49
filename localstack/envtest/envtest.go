// Package envtest gives an integration test its own Sluice deployment in the
// local emulator.
//
//	func TestSomething(t *testing.T) {
//		env := envtest.New(t)
//		// env.Clients, env.Deployment.QueueURLs[spec.CompactionJobs], ...
//	}
//
// Every call provisions fresh resources under a unique prefix, so tests run
// in parallel against one emulator without seeing each other. Queues get
// test-sized visibility timeouts, so a failed message comes back in seconds,
// and block-events starts empty (the s3:TestEvent that configuring the
// bucket's notification sends is purged).
//
// New skips under `go test -short`. When the emulator
// (AWS_ENDPOINT_URL, default http://127.0.0.1:4566) does not answer, it
// skips, or fails when SLUICE_REQUIRE_EMULATOR=1 (make test sets it, so CI
// can never pass by skipping).
package envtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/spec"
)

// DefaultEndpoint is where the emulator listens unless AWS_ENDPOINT_URL says
// otherwise (DESIGN.md §7).
const DefaultEndpoint = "http://127.0.0.1:4566"

// DefaultVisibilityTimeout is every test queue's visibility timeout unless
// WithVisibilityTimeout says otherwise: long enough that a handler slowed
// down by a loaded machine (seen: a batch of ten planner messages taking
// 20 s while the whole suite shares one emulator) is never redelivered
// while it works. Tests that want failures back sooner set the runner's
// RetryAfter (testworld does).
const DefaultVisibilityTimeout = 60 * time.Second

// Env is one test's deployment and the clients to use it.
type Env struct {
	// Endpoint is the emulator's URL.
	Endpoint string
	// Clients talk to the emulator and count every request in Counter.
	Clients    *awsenv.Clients
	Deployment provision.Deployment
	Counter    *awsenv.RequestCounter
	// Logger writes to t.Log (shown with -v or when the test fails).
	Logger *slog.Logger
}

// Option tunes New.
type Option func(*options)

type options struct {
	visibility time.Duration
	tweaks     []func(*spec.Resources)
	keep       bool
	logLevel   slog.Level
	endpoint   string
}

// WithVisibilityTimeout sets every queue's visibility timeout (default
// DefaultVisibilityTimeout). SQS counts whole seconds.
func WithVisibilityTimeout(d time.Duration) Option {
	return func(o *options) { o.visibility = d }
}

// WithMaxReceiveCount sets every queue's redrive count (default: the spec's).
func WithMaxReceiveCount(n int) Option {
	return WithResources(func(r *spec.Resources) {
		for i := range r.Queues {
			r.Queues[i].MaxReceiveCount = n
		}
	})
}

// WithResources changes the resources before they are provisioned, after
// the visibility timeout is applied.
func WithResources(fn func(*spec.Resources)) Option {
	return func(o *options) { o.tweaks = append(o.tweaks, fn) }
}

// WithKeep keeps the resources after the test (they are always kept when it
// fails, so they can be inspected).
func WithKeep() Option { return func(o *options) { o.keep = true } }

// WithLogLevel sets the Logger's level (default Debug: t.Log output is shown
// only with -v or on failure anyway).
func WithLogLevel(l slog.Level) Option { return func(o *options) { o.logLevel = l } }

// WithEndpoint provisions on the emulator at url instead of Endpoint():
// a run spread over several emulators (the chaos run) picks one per test.
func WithEndpoint(url string) Option { return func(o *options) { o.endpoint = url } }

// Endpoint is the emulator's URL: AWS_ENDPOINT_URL or DefaultEndpoint.
func Endpoint() string {
	if e := os.Getenv("AWS_ENDPOINT_URL"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Answers reports whether anything answers HTTP at endpoint within timeout.
func Answers(ctx context.Context, endpoint string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// New provisions a fresh deployment for t, or skips t (see the package doc).
// Resources are deleted when t ends, unless it failed or WithKeep was given.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	o := options{visibility: DefaultVisibilityTimeout, logLevel: slog.LevelDebug}
	for _, opt := range opts {
		opt(&o)
	}
	endpoint := Endpoint()
	if o.endpoint != "" {
		endpoint = o.endpoint
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	required := os.Getenv("SLUICE_REQUIRE_EMULATOR") == "1"
	answers := Answers(ctx, endpoint, 2*time.Second)
	// A required emulator that is busy (one Python process serving a
	// loaded run) may take longer than one probe: ask again for a while
	// before failing the test.
	for deadline := time.Now().Add(30 * time.Second); !answers && required && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		answers = Answers(ctx, endpoint, 5*time.Second)
	}
	if !answers {
		msg := fmt.Sprintf("no emulator answers at %s (start it with `make up`)", endpoint)
		if required {
			t.Fatal(msg + "; SLUICE_REQUIRE_EMULATOR=1")
		}
		t.Skip(msg)
	}

	logger := slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: o.logLevel}))
	counter := awsenv.NewRequestCounter()
	clients, err := awsenv.Load(ctx, awsenv.Options{Endpoint: endpoint, Counter: counter})
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}

	r := spec.Default(uniquePrefix(t.Name()))
	for i := range r.Queues {
		r.Queues[i].VisibilityTimeout = o.visibility
	}
	for _, fn := range o.tweaks {
		fn(&r)
	}
	start := time.Now()
	d, err := provision.Provision(ctx, clients, r)
	if err != nil {
		t.Fatalf("envtest: provision %s: %v", r.Prefix, err)
	}
	// Setting the bucket's notification made S3 send an s3:TestEvent to
	// block-events. The planner ignores it, but a test that counts
	// messages should start from an empty queue.
	if _, err := clients.SQS.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(d.QueueURLs[spec.BlockEvents])}); err != nil {
		t.Fatalf("envtest: purge %s: %v", d.QueueURLs[spec.BlockEvents], err)
	}
	logger.Debug("envtest: provisioned", "prefix", r.Prefix, "took", time.Since(start).Round(time.Millisecond))

	t.Cleanup(func() {
		if o.keep || t.Failed() {
			t.Logf("envtest: kept resources under prefix %s", r.Prefix)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := teardown(ctx, clients, d); err != nil {
			t.Logf("envtest: teardown %s: %v", r.Prefix, err)
		}
	})
	return &Env{Endpoint: endpoint, Clients: clients, Deployment: d, Counter: counter, Logger: logger}
}

// uniquePrefix is a valid resource prefix that names the test and cannot
// collide with another test's, in this run or an earlier one.
func uniquePrefix(testName string) string {
	var b strings.Builder
	b.WriteString("t-")
	for _, c := range strings.ToLower(testName) {
		if b.Len() >= 32 {
			break
		}
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b.WriteRune(c)
		default:
			if !strings.HasSuffix(b.String(), "-") {
				b.WriteByte('-')
			}
		}
	}
	var rnd [5]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return strings.TrimSuffix(b.String(), "-") + "-" + hex.EncodeToString(rnd[:])
}
