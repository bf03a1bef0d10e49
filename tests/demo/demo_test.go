// Package demo_test runs the `make demo` scenario at a smaller size and
// checks its summary: every upload compacted and deleted, one live 24h
// block per tenant holding exactly the uploaded samples, `sluice verify`
// clean, no dead letters, and no LIST on the pipeline's path.
package demo_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/localstack/demo"
	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/protocol"
)

func TestDemoScenarioSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	endpoint := envtest.Endpoint()
	if !envtest.Answers(context.Background(), endpoint, 2*time.Second) {
		if os.Getenv("SLUICE_REQUIRE_EMULATOR") == "1" {
			t.Fatalf("no emulator answers at %s; SLUICE_REQUIRE_EMULATOR=1", endpoint)
		}
		t.Skipf("no emulator answers at %s (start it with `make up`)", endpoint)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	dir := t.TempDir()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	start := time.Now()
	sum, err := demo.Run(ctx, demo.Options{
		Endpoint: endpoint, Prefix: "t-demo-" + hex.EncodeToString(rnd[:]),
		Series: 40, SamplesPerSeries: 30, MaxSeriesPerPartition: 40, DeletionDelay: 2 * time.Second, Seed: 7,
		WorkDir: filepath.Join(dir, "work"), EnvFile: filepath.Join(dir, "demo.env"), LogFile: filepath.Join(dir, "demo.log"),
		Timeout: 10 * time.Minute, Out: &out, // generous: the suite shares one emulator
	})
	t.Logf("demo output (%s):\n%s", time.Since(start).Round(time.Second), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !sum.OK() {
		// The failures come last, after the logs: CI shows the head and
		// the tail of a long output, and the middle may be cut.
		for _, name := range []string{"demo.log", "demo-thanos.log"} {
			logs, _ := os.ReadFile(filepath.Join(dir, name))
			t.Logf("last lines of %s:\n%s", name, tail(string(logs), 30))
		}
		t.Fatalf("demo failed:\n  %s", strings.Join(sum.Failures, "\n  "))
	}

	if sum.Uploaded != 38 || sum.Duplicated != 4 || !sum.Settled {
		t.Errorf("uploaded %d (want 36 and the archive tenant's 2), duplicated %d (want 4), settled %v", sum.Uploaded, sum.Duplicated, sum.Settled)
	}
	// The archive tenant's blocks, past the retention its override sets,
	// are expired by retention's schedule and deleted after their marks.
	if rr := sum.Retention; rr == nil || rr.Uploaded != 2 || rr.Deleted != 2 || rr.Marked != 2 {
		t.Errorf("retention = %+v; want the archive tenant's 2 blocks deleted, each after a deletion mark", rr)
	}
	if !strings.Contains(out.String(), "bucket-index.json.gz lists") || !strings.Contains(out.String(), "expired by retention") {
		t.Errorf("the report shows no bucket index or no retention deletion:\n%s", out.String())
	}
	checkStatusPage(t, sum)
	checkStatusPage(t, sum.Thanos)
	if !strings.Contains(out.String(), "status page of "+sum.Prefix+": file://"+sum.StatusPage) {
		t.Errorf("the report does not end by saying where the status page is:\n%s", tail(out.String(), 10))
	}
	want := map[string]int{"team-a": 12, "team-b": 24}
	for _, ts := range sum.Tenants {
		if ts.Uploaded != want[ts.Tenant] {
			t.Errorf("%s: %d uploads, want %d", ts.Tenant, ts.Uploaded, want[ts.Tenant])
		}
		if n := ts.After[0][protocol.BlockDeleted]; n != ts.Uploaded {
			t.Errorf("%s: %d of %d uploads deleted", ts.Tenant, n, ts.Uploaded)
		}
		var series uint64
		for _, lb := range ts.Live {
			if lb.Level != 2 || lb.MaxT-lb.MinT != (24*time.Hour).Milliseconds() {
				t.Errorf("%s: live block %+v is not a 24h level-2 output", ts.Tenant, lb)
			}
			series += lb.Series
		}
		if len(ts.Live) == 0 || series != 40 {
			t.Errorf("%s: %d live blocks with %d series, want the 40 series at level 2", ts.Tenant, len(ts.Live), series)
		}
		if len(ts.Groups) != 3 || ts.Partitions < 4 {
			t.Errorf("%s: %d groups, %d partition jobs; want 2 at 12h and 1 at 24h, some partitioned", ts.Tenant, len(ts.Groups), ts.Partitions)
		}
		// A group ends RETIRED, or SUPERSEDED when the next level's group
		// claimed its sources first (a late replica is planned by both
		// its level-1 group and the level-2 group over the same range;
		// the claims are fenced and one wins: ci on fd9013b). Either way
		// the range is compacted once: the live blocks and equivalence
		// below say so.
		retired := 0
		for _, g := range ts.Groups {
			switch g.State {
			case string(protocol.GroupRetired):
				retired++
			case string(protocol.GroupSuperseded):
			default:
				t.Errorf("%s: group %s ended %s", ts.Tenant, g.Group, g.State)
			}
		}
		if retired == 0 {
			t.Errorf("%s: no group retired a version", ts.Tenant)
		}
		e := ts.Equivalence
		if !e.OK() || e.InputSamples != 40*30*12 || e.InputSeries != 40 {
			t.Errorf("%s: equivalence %s", ts.Tenant, e.String())
		}
		if ts.Violations != 0 {
			t.Errorf("%s: %d violations", ts.Tenant, ts.Violations)
		}
		// The handlers' EMF records count at least one compaction per
		// group run, and once settled nothing is overdue or planned.
		if m := ts.Metrics; m.Compactions < float64(len(ts.Groups)) || m.BytesRead <= 0 ||
			m.Figures.OldestUncompacted != 0 || m.Figures.Planned != 0 || m.Figures.Live != len(ts.Live) {
			t.Errorf("%s: metrics %+v; want ≥ %d compactions, bytes read, nothing overdue or planned, %d live", ts.Tenant, m, len(ts.Groups), len(ts.Live))
		}
	}
	partitions := 0
	for _, ts := range sum.Tenants {
		partitions += ts.Partitions
	}
	for _, q := range sum.Requests {
		// One LIST of a block's own prefix per registration and orphan
		// sweeps of retried partitions: never a tenant or bucket scan.
		if strings.HasSuffix(q.Operation, awsenv.WiderThanABlock) && q.Pipeline > 0 {
			t.Errorf("the pipeline called %s %d times", q.Operation, q.Pipeline)
		}
		if bound := sum.Uploaded + partitions; strings.HasPrefix(q.Operation, "S3 List") && q.Pipeline > bound {
			t.Errorf("the pipeline called %s %d times, more than %d (uploads + partition jobs)", q.Operation, q.Pipeline, bound)
		}
		if q.Operation == "S3 PutObject" && q.Upload != sum.Uploaded*3 {
			t.Errorf("upload put %d objects, want %d (meta.json, index and one chunk segment per block)", q.Upload, sum.Uploaded*3)
		}
	}
	for _, line := range []string{"TENANT team-a (replication factor 1)", "TENANT team-b (replication factor 2)",
		"blocks before  12 × 2h (level 0)", "sluice verify  ok", "equivalence    ok", "AWS REQUESTS", "ALL CHECKS PASSED"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q", line)
		}
	}
	env, err := cli.ReadEnvFile(filepath.Join(dir, "demo.env"))
	if err != nil || env["SLUICE_BUCKET"] == "" || env["AWS_ENDPOINT_URL"] != endpoint {
		t.Errorf("env file: %v %v", env, err)
	}
	checkThanos(t, sum, out.String(), filepath.Join(dir, "demo-thanos.env"))
}

// checkThanos: the demo's Thanos bucket — two servers × two replicas in
// the single-tenant layout — ends with one block per server and range,
// never partitioned, holding exactly the uploaded samples, and the report
// shows Thanos' verdict (or why it was not run) next to sluice verify's.
func checkThanos(t *testing.T, sum *demo.Summary, out, envFile string) {
	t.Helper()
	th := sum.Thanos
	if th == nil || len(th.Tenants) != 1 || !th.Settled {
		t.Fatalf("no settled Thanos deployment in the summary: %+v", th)
	}
	ts := th.Tenants[0]
	if ts.Tenant != "thanos" || ts.Uploaded != 2*2*12 || ts.After[0][protocol.BlockDeleted] != ts.Uploaded {
		t.Errorf("thanos: %d uploads (want 48), %d deleted", ts.Uploaded, ts.After[0][protocol.BlockDeleted])
	}
	if len(ts.Live) != 2 {
		t.Errorf("thanos: %d live blocks, want one 24h block per server", len(ts.Live))
	}
	for _, lb := range ts.Live {
		if lb.Level != 2 || lb.MaxT-lb.MinT != (24*time.Hour).Milliseconds() || lb.Series != 40 {
			t.Errorf("thanos: live block %+v is not one server's 24h level-2 output of 40 series", lb)
		}
	}
	for _, g := range ts.Groups {
		for _, n := range g.Partitions {
			if n != 1 {
				t.Errorf("thanos: group %s ran a version in %d partitions; a Thanos bucket gets one block per group", g.Group, n)
			}
		}
	}
	if e := ts.Equivalence; !e.OK() || e.InputSeries != 80 || ts.Violations != 0 {
		t.Errorf("thanos: equivalence %s, %d violations", e.String(), ts.Violations)
	}
	verdict := th.ThanosVerdict
	if os.Getenv("THANOS") == "" && !strings.HasPrefix(verdict, "not run") || os.Getenv("THANOS") != "" && !strings.HasPrefix(verdict, "ok") {
		t.Errorf("thanos verdict %q (THANOS=%q)", verdict, os.Getenv("THANOS"))
	}
	for _, line := range []string{"A THANOS BUCKET", "TENANT thanos (replication factor 2)", "thanos verify  " + verdict} {
		if !strings.Contains(out, line) {
			t.Errorf("report lacks %q", line)
		}
	}
	env, err := cli.ReadEnvFile(envFile)
	if err != nil || env["SLUICE_LAYOUT"] != "single-tenant" || env["SLUICE_TENANT"] != "thanos" || env["SLUICE_REPLICA_LABELS"] != "replica" {
		t.Errorf("thanos env file: %v %v", env, err)
	}
}

func TestDemoCommandRefusesBadSizes(t *testing.T) {
	var stderr bytes.Buffer
	code := cli.Main(context.Background(), cli.IO{Stdout: io.Discard, Stderr: &stderr}, []string{"demo", "--hours", "3", "--endpoint", "http://127.0.0.1:1"})
	if code != 2 && code != 1 {
		t.Errorf("exit %d", code)
	}
	if strings.Count(strings.TrimSpace(stderr.String()), "\n") > 1 || stderr.Len() == 0 {
		t.Errorf("stderr: %q", stderr.String())
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkStatusPage: the demo wrote its status page, and the page draws
// every block the deployment ends with (tests/ui proves in a browser that
// such a page loads and places each bar where it belongs).
func checkStatusPage(t *testing.T, sum *demo.Summary) {
	t.Helper()
	if sum == nil {
		return
	}
	page, err := os.ReadFile(sum.StatusPage)
	if err != nil {
		t.Fatalf("%s: no status page: %v", sum.Prefix, err)
	}
	for _, ts := range sum.Tenants {
		if !strings.Contains(string(page), ts.Tenant) {
			t.Errorf("%s: the status page does not name tenant %s", sum.Prefix, ts.Tenant)
		}
		for _, lb := range ts.Live {
			if !strings.Contains(string(page), `data-block="`+lb.ID+`"`) {
				t.Errorf("%s: the status page draws no bar for %s's live block %s", sum.Prefix, ts.Tenant, lb.ID)
			}
		}
	}
}
