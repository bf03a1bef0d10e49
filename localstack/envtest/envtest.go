// Package envtest gives an integration test its own Sluice deployment, in
// the local emulator or in the fast tier's in-memory AWS.
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
// Where the deployment lives (Backend): under `go test -short`, in a
// memaws.Cloud of the test's own — the real SDK clients talking to an
// in-memory S3, SQS and DynamoDB in-process, in milliseconds; otherwise in
// the emulator (AWS_ENDPOINT_URL, default http://127.0.0.1:4566).
// SLUICE_BACKEND=memory or =emulator overrides the choice. A test that
// proves something about the emulator itself, or that needs what only a
// server on a port gives (another process, a CLI reading
// AWS_ENDPOINT_URL), says so with EmulatorOnly and is skipped in memory.
// When the emulator does not answer, New skips, or fails when
// SLUICE_REQUIRE_EMULATOR=1 (make test sets it, so CI can never pass by
// skipping).
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
	"github.com/sluice-dev/sluice/localstack/memaws"
	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/spec"
)

// DefaultEndpoint is where the emulator listens unless AWS_ENDPOINT_URL says
// otherwise (docs/design.md §7).
const DefaultEndpoint = "http://127.0.0.1:4566"

// DefaultVisibilityTimeout is every test queue's visibility timeout unless
// WithVisibilityTimeout says otherwise: long enough that a handler slowed
// down by a loaded machine (seen: a batch of ten planner messages taking
// 20 s while the whole suite shares one emulator) is never redelivered
// while it works. Tests that want failures back sooner set the runner's
// RetryAfter (testworld does).
const DefaultVisibilityTimeout = 60 * time.Second

// Backend is where a test's deployment lives.
type Backend string

const (
	// Emulator is the local AWS emulator, over HTTP.
	Emulator Backend = "emulator"
	// Memory is an in-memory AWS of the test's own (localstack/memaws).
	Memory Backend = "memory"
)

// BackendFor is the backend New gives tests: SLUICE_BACKEND when set,
// else Memory under -short and Emulator otherwise.
func BackendFor() Backend {
	switch os.Getenv("SLUICE_BACKEND") {
	case string(Memory):
		return Memory
	case string(Emulator):
		return Emulator
	}
	if testing.Short() {
		return Memory
	}
	return Emulator
}

// Env is one test's deployment and the clients to use it.
type Env struct {
	// Backend is where the deployment lives.
	Backend Backend
	// Endpoint is the emulator's URL (memaws.Endpoint in memory, where
	// nothing listens: use NewClients, not the URL).
	Endpoint string
	// Cloud is the in-memory AWS (nil on the emulator).
	Cloud *memaws.Cloud
	// Clients talk to the deployment and count every request in Counter.
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
	// emulatorOnly, when set, is why the test needs the emulator.
	emulatorOnly string
	backend      Backend
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

// WithBackend puts the deployment in b whatever BackendFor says: the
// explorer runs only in memory (it snapshots the services' state).
func WithBackend(b Backend) Option { return func(o *options) { o.backend = b } }

// EmulatorOnly marks a test that needs the emulator (why: what it proves
// about it, or what needs a server on a port); in memory it is skipped.
func EmulatorOnly(why string) Option { return func(o *options) { o.emulatorOnly = why } }

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
	o := options{visibility: DefaultVisibilityTimeout, logLevel: slog.LevelDebug}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := &Env{Backend: BackendFor(), Counter: awsenv.NewRequestCounter()}
	if o.backend != "" {
		env.Backend = o.backend
	}
	if env.Backend == Memory {
		if o.emulatorOnly != "" {
			t.Skip("needs the emulator (" + o.emulatorOnly + "); the in-memory tier runs under -short")
		}
		env.Cloud = memaws.New(memaws.Options{})
		env.Endpoint = memaws.Endpoint
	} else {
		env.Endpoint = Endpoint()
		if o.endpoint != "" {
			env.Endpoint = o.endpoint
		}
		requireEmulator(ctx, t, env.Endpoint)
	}
	env.Logger = slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: o.logLevel}))
	clients, err := env.NewClients(ctx, awsenv.Options{Counter: env.Counter})
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	env.Clients = clients

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
	env.Deployment = d
	env.Logger.Debug("envtest: provisioned", "prefix", r.Prefix, "backend", env.Backend, "took", time.Since(start).Round(time.Millisecond))

	t.Cleanup(func() {
		if env.Backend == Memory {
			return // the Cloud goes with the test
		}
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
	return env
}

// NewClients builds another set of clients for the deployment (opts'
// Endpoint and HTTPClient are set here): a test that wants its own retry
// settings or request counter uses it.
func (e *Env) NewClients(ctx context.Context, opts awsenv.Options) (*awsenv.Clients, error) {
	opts.Endpoint = e.Endpoint
	if e.Cloud != nil {
		opts.HTTPClient = e.Cloud
	}
	return awsenv.Load(ctx, opts)
}

// requireEmulator skips or fails t (see the package doc) unless the
// emulator at endpoint answers.
func requireEmulator(ctx context.Context, t testing.TB, endpoint string) {
	t.Helper()
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
