package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// logLines collects a pipeline's JSON log lines, as CloudWatch Logs would.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// emf returns every EMF record: the lines with an _aws directive.
func (l *logLines) emf(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if _, ok := m["_aws"]; ok {
			out = append(out, m)
		}
	}
	return out
}

// gauges parses `sluice metrics` output with Prometheus' own parser and
// returns metric → tenant (or queue) → value.
func gauges(t *testing.T, w *testworld.World, now time.Time) map[string]map[string]float64 {
	t.Helper()
	var out bytes.Buffer
	if err := cli.WriteMetrics(context.Background(), &out, w.Store, w.Env.Clients.SQS, w.Config, "", now); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatalf("sluice metrics' output does not parse: %v\n%s", err, out.String())
	}
	got := map[string]map[string]float64{}
	for name, f := range fams {
		got[name] = map[string]float64{}
		for _, m := range f.Metric {
			key := ""
			for _, l := range m.Label {
				if l.GetName() == "tenant" || l.GetName() == "queue" {
					key = l.GetValue()
				}
			}
			got[name][key] = m.GetGauge().GetValue()
		}
	}
	return got
}

// TestMetricsTellWhatIsBehind: while a half day's compaction is held
// before its commit, `sluice metrics` — read three hours later by its
// clock — says the tenant's oldest level-0 block is two hours overdue
// (its range was due an hour after its last upload) and that partitions
// are still planned; once the pipeline settles, nothing is overdue or
// planned. Meanwhile the functions' logs carry EMF records CloudWatch
// turns into metrics: one committed compaction per partition, the bytes
// read, and the metrics pass's gauges.
func TestMetricsTellWhatIsBehind(t *testing.T) {
	t.Parallel()
	logs := &logLines{}
	steps := &testworld.Steps{}
	w := testworld.New(t, testworld.Options{
		Pipeline:  localrun.Options{Hook: steps.Hook, Logger: slog.New(slog.NewJSONHandler(logs, nil))},
		Configure: func(c *config.Config) { c.MetricsInterval = time.Second },
	})
	ctx := context.Background()
	at := steps.At("compact.before-commit", "@v1/")
	halfDay(ctx, w, "acme", 71)
	settled := make(chan error, 1)
	go func() {
		settled <- w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
			return w.Quiescent(ctx, "acme")
		})
	}()
	at.Wait(t, settleTimeout)
	later := time.Now().Add(3 * time.Hour)
	held := gauges(t, w, later)
	age := held[metrics.OldestUncompacted.Name]["acme"]
	// Due an hour after the last upload, a little before now: overdue by
	// two hours and the time since that upload.
	if age < 2*3600 || age > 2*3600+10*60 {
		t.Errorf("while held, 3h on: oldest uncompacted %.0fs, want 2h and the minutes since the last upload", age)
	}
	if held[metrics.PlannedCompactions.Name]["acme"] < 1 {
		t.Errorf("while held: %v planned partitions, want at least the held one", held[metrics.PlannedCompactions.Name])
	}
	at.Release()
	if err := <-settled; err != nil {
		t.Fatal(err)
	}

	after := gauges(t, w, later)
	for _, m := range []metrics.Metric{metrics.OldestUncompacted, metrics.PlannedCompactions, metrics.QuarantinedBlocks, metrics.QuarantinedGroups} {
		if v := after[m.Name]["acme"]; v != 0 {
			t.Errorf("settled: %s = %v, want 0", m.Name, v)
		}
	}
	live := 0
	for _, b := range w.Blocks(ctx, "acme") {
		if b.State == protocol.BlockLive {
			live++
		}
	}
	if got := after[metrics.LiveBlocks.Name]["acme"]; got != float64(live) {
		t.Errorf("settled: %v live blocks, the records hold %d", got, live)
	}
	if dl := after[metrics.DeadLetters.Name]; len(dl) != len(w.Env.Deployment.QueueURLs) {
		t.Errorf("dead letters reported for %v, want every queue", dl)
	}

	groups, err := w.Store.TenantGroups(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, g := range groups {
		parts, err := w.Store.Partitions(ctx, "acme", g.Key, g.Version)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			if p.State == protocol.PartitionDone {
				done++
			}
		}
	}
	var compactions, read float64
	pass := false
	for _, m := range logs.emf(t) {
		if m["Tenant"] != "acme" {
			continue
		}
		if v, ok := m[metrics.Compactions.Name].(float64); ok {
			compactions += v
		}
		if v, ok := m[metrics.BytesRead.Name].(float64); ok {
			read += v
		}
		if _, ok := m[metrics.OldestUncompacted.Name]; ok {
			pass = true
		}
		if m[metrics.DimDeployment] != w.Config.Table {
			t.Errorf("EMF record of deployment %v, want %s", m[metrics.DimDeployment], w.Config.Table)
		}
	}
	if done == 0 || compactions != float64(done) {
		t.Errorf("EMF counted %v compactions of acme; the records hold %d partitions done", compactions, done)
	}
	if read <= 0 {
		t.Errorf("EMF counted %v bytes read", read)
	}
	if !pass {
		t.Errorf("no EMF record of the metrics pass's gauges for acme")
	}
	if t.Failed() {
		t.Logf("EMF records:\n%s", strings.Join(func() []string {
			var s []string
			for _, m := range logs.emf(t) {
				b, _ := json.Marshal(m)
				s = append(s, string(b))
			}
			return s
		}(), "\n"))
	}
}
