package cli

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/records"
)

// world is one test's deployment (in the emulator, or in memory under
// -short) and a way to run sluice commands against it, in-process, as a
// user would type them.
type world struct {
	t     *testing.T
	env   *envtest.Env
	vars  map[string]string
	store *records.Store
}

func newWorld(t *testing.T) *world {
	t.Helper()
	env := envtest.New(t)
	vars := env.Deployment.Env()
	vars["AWS_ENDPOINT_URL"] = env.Endpoint
	return &world{t: t, env: env, vars: vars, store: records.NewStore(env.Clients.DynamoDB, env.Deployment.Table, env.Logger)}
}

// result is what one command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// run runs `sluice args...` with the world's settings.
func (w *world) run(args ...string) result {
	w.t.Helper()
	return w.runVars(w.vars, args...)
}

// runVars runs `sluice args...` against the world's deployment with other
// settings.
func (w *world) runVars(vars map[string]string, args ...string) result {
	w.t.Helper()
	var hc aws.HTTPClient
	if w.env.Cloud != nil {
		hc = w.env.Cloud
	}
	return runIn(w.t, vars, hc, args...)
}

// runWith runs `sluice args...` with vars as its whole environment, on no
// deployment (or the emulator, if vars name it).
func runWith(t *testing.T, vars map[string]string, args ...string) result {
	t.Helper()
	return runIn(t, vars, nil, args...)
}

func runIn(t *testing.T, vars map[string]string, hc aws.HTTPClient, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := Main(ctx, IO{Stdout: &out, Stderr: &errb, Progress: io.Discard, HTTPClient: hc,
		Getenv: func(k string) string { return vars[k] }}, args)
	t.Logf("$ sluice %s → %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

func (r result) wantOneLineError(t *testing.T, parts ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	first := lines[0]
	for _, p := range parts {
		if !strings.Contains(first, p) {
			t.Errorf("stderr's first line %q does not say %q", first, p)
		}
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
		t.Errorf("stderr holds a stack trace:\n%s", r.stderr)
	}
	if len(lines) > 2 {
		t.Errorf("stderr has %d lines, want a one-line message (plus a usage hint):\n%s", len(lines), r.stderr)
	}
}

// gen writes blocks for a test and returns their directories.
func gen(t *testing.T, opts blockgen.Options) []string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "blocks")
	if opts.Series == 0 {
		opts.Series = 20
	}
	if opts.SamplesPerSeries == 0 {
		opts.SamplesPerSeries = 30
	}
	opts.ThanosFiles = true
	bs, err := blockgen.Generate(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range bs {
		out = append(out, b.Dir)
	}
	return out
}
