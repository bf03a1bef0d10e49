// Package docs runs the commands README.md and docs/cli.md tell a user to
// type, exactly as printed, against the local emulator: if a hint goes
// stale, this fails.
//
// A runnable block is a fenced block between the comments
// <!-- runs-as-printed: NAME --> and <!-- /runs-as-printed -->; every line
// starting with "$ " is run, in order, by bash in one scratch directory
// (with bin/ holding the freshly built sluice and sluice-local, and
// promtool on the PATH), and must succeed. The tests below say which blocks
// they run, and what they prepare (the OpenMetrics file the README's
// promtool line reads).
package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/localstack/envtest"
)

// repoRoot is two directories up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// block returns the "$ " lines of the runnable block name in file.
func block(t *testing.T, file, name string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	begin := "<!-- runs-as-printed: " + name + " -->"
	i := strings.Index(string(raw), begin)
	if i < 0 {
		t.Fatalf("%s has no runnable block %q", file, name)
	}
	rest := string(raw)[i+len(begin):]
	j := strings.Index(rest, "<!-- /runs-as-printed -->")
	if j < 0 {
		t.Fatalf("%s: block %q is not closed", file, name)
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(rest[:j]))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "$ "); ok {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: block %q has no $ lines", file, name)
	}
	return out
}

// scratch is a directory with bin/sluice, bin/sluice-local and promtool.
type scratch struct {
	t   *testing.T
	dir string
	env []string
}

func newScratch(t *testing.T) *scratch {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the documented commands against the emulator; skipped with -short")
	}
	endpoint := envtest.Endpoint()
	if !envtest.Answers(context.Background(), endpoint, 5*time.Second) {
		if os.Getenv("SLUICE_REQUIRE_EMULATOR") == "1" {
			t.Fatalf("no emulator at %s", endpoint)
		}
		t.Skipf("no emulator at %s (make up)", endpoint)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	root := repoRoot(t)
	for name, pkg := range map[string]string{"sluice": "./cmd/sluice", "sluice-local": "./localstack/cmd/sluice-local"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	tools := promtoolDir(t)
	env := append(os.Environ(), "PATH="+tools+string(os.PathListSeparator)+os.Getenv("PATH"), "AWS_ENDPOINT_URL="+endpoint)
	return &scratch{t: t, dir: dir, env: env}
}

// run runs one documented line in bash and returns what it printed.
func (s *scratch) run(line string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir, cmd.Env = s.dir, s.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	s.t.Logf("$ %s\n%s", line, out.String())
	if err != nil {
		s.t.Fatalf("the documented command %q failed: %v", line, err)
	}
	return out.String()
}

// promtoolDir returns a directory holding promtool at the Prometheus
// version of go.mod: the one on the PATH, the one make promtool-check
// installed, or one installed now (a few minutes, once per machine).
func promtoolDir(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return filepath.Dir(p)
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/prometheus/prometheus")
	cmd.Dir = repoRoot(t)
	v, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	cache := os.Getenv("SLUICE_TOOLS_DIR")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(base, "sluice", "tools")
	}
	dir := filepath.Join(cache, "promtool-"+version)
	if _, err := os.Stat(filepath.Join(dir, "promtool")); err == nil {
		return dir
	}
	t.Logf("installing promtool %s into %s (once per machine)", version, dir)
	install := exec.Command("go", "install", "github.com/prometheus/prometheus/cmd/promtool@"+version)
	install.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install promtool: %v\n%s", err, out)
	}
	return dir
}

// writeOpenMetrics writes what the README's promtool line reads: a day of
// one-minute samples of 40 series, ending two days ago, as OpenMetrics
// text — what `promtool tsdb create-blocks-from openmetrics` takes.
func writeOpenMetrics(t *testing.T, path string) {
	t.Helper()
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour).Unix()
	var b strings.Builder
	b.WriteString("# HELP http_requests_total Requests served.\n# TYPE http_requests_total counter\n")
	for inst := range 20 {
		v := 0
		for ts := start; ts < start+86400; ts += 60 {
			v += int(ts/60+int64(inst)) % 7
			fmt.Fprintf(&b, "http_requests_total{instance=\"10.0.0.%d:8080\",job=\"api\"} %d %d\n", inst, v, ts)
		}
	}
	b.WriteString("# HELP temperature_celsius Room temperature.\n# TYPE temperature_celsius gauge\n")
	for inst := range 20 {
		for ts := start; ts < start+86400; ts += 60 {
			fmt.Fprintf(&b, "temperature_celsius{instance=\"10.0.0.%d:8080\",job=\"api\"} %g %d\n", inst, 20+float64((ts/60+int64(inst))%11)/2, ts)
		}
	}
	b.WriteString("# EOF\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeTryItOnYourOwnBlocks runs README's "Try it on your own
// blocks" as printed: a local deployment, real blocks from promtool
// uploaded from a data directory, `sluice run --until-idle`, and status
// and verify showing them compacted.
func TestReadmeTryItOnYourOwnBlocks(t *testing.T) {
	s := newScratch(t)
	writeOpenMetrics(t, filepath.Join(s.dir, "metrics.om"))
	var outs []string
	for _, line := range block(t, "README.md", "try-it") {
		outs = append(outs, s.run(line))
	}
	all := strings.Join(outs, "\n")
	for _, want := range []string{
		"provisioned mine", "uploaded 12 block(s) of tenant team-a",
		"sluice run: nothing is left to do now",
		"level 2 (24h)", "RETIRED",
		"I2 no double coverage ...... ok",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the README's commands did not print %q", want)
		}
	}
}

// TestDemoHints runs `sluice-local demo` (small) and then the lines its
// closing message suggests, exactly as it prints them, and the commands
// docs/cli.md shows after it. The Thanos deployment is left out
// (--thanos=false): tests/demo runs it, and here it would only double the
// wall time. --timeout 10m: the suite shares one emulator on two cores, and
// the demo's default 150 s settle window is for a machine doing nothing
// else.
func TestDemoHints(t *testing.T) {
	s := newScratch(t)
	out := s.run("bin/sluice-local demo --name docs-demo --thanos=false --hours 12 --series 20 --deletion-delay 1s --timeout 10m")
	var hints []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if cmd, _, ok := strings.Cut(line, "        # or: "); ok && strings.HasPrefix(cmd, "source ") {
			hints = append(hints, strings.TrimSpace(cmd), strings.TrimSpace(strings.SplitN(line, "# or: ", 2)[1]))
		}
	}
	if len(hints) != 2 {
		t.Fatalf("the demo's closing lines suggest %d commands, want 2:\n%s", len(hints), out)
	}
	for _, h := range hints {
		s.run(h)
	}
	for _, line := range block(t, "docs/cli.md", "after-the-demo") {
		s.run(line)
	}
}
