package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/shared/metrics"
)

// emf is the part of an EMF record CloudWatch reads.
type emf struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name string `json:"Name"`
				Unit string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
}

func emitted(t *testing.T, b *metrics.Batch, at time.Time) []map[string]any {
	t.Helper()
	var buf bytes.Buffer
	b.Emit(context.Background(), slog.New(slog.NewJSONHandler(&buf, nil)).With("function", "compact"), at)
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestEmitWritesEMF: each line is a valid EMF record CloudWatch turns into
// metrics: the directive names every metric whose value sits at the top
// level, the dimension values sit there too, counters of one invocation
// add up, gauges keep the last value, and two tenants get two lines.
func TestEmitWritesEMF(t *testing.T) {
	b := metrics.NewBatch("sluice-state")
	b.Add(metrics.Compactions, 1, "team-a")
	b.Add(metrics.Compactions, 1, "team-a")
	b.Add(metrics.BytesRead, 4096, "team-a")
	b.Add(metrics.Compactions, 1, "team-b")
	b.Add(metrics.OldestUncompacted, 100, "team-b")
	b.Add(metrics.OldestUncompacted, 30, "team-b")
	b.Add(metrics.ConditionLosses, 1, "commit partition")
	at := time.UnixMilli(1_700_000_000_000)
	lines := emitted(t, b, at)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (team-a, team-b, one transition): %v", len(lines), lines)
	}
	byKey := map[string]map[string]any{}
	for _, l := range lines {
		raw, _ := json.Marshal(l)
		var e emf
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		if e.AWS.Timestamp != at.UnixMilli() || len(e.AWS.CloudWatchMetrics) != 1 {
			t.Fatalf("directive %+v", e.AWS)
		}
		d := e.AWS.CloudWatchMetrics[0]
		if d.Namespace != metrics.Namespace {
			t.Errorf("namespace %q", d.Namespace)
		}
		if len(d.Dimensions) != 2 || d.Dimensions[0][0] != metrics.DimDeployment || len(d.Dimensions[1]) != 1 {
			t.Errorf("dimension sets %v, want [Deployment, own] and [Deployment]", d.Dimensions)
		}
		for _, set := range d.Dimensions {
			for _, name := range set {
				if _, ok := l[name].(string); !ok {
					t.Errorf("dimension %s has no value at the top level of %v", name, l)
				}
			}
		}
		for _, m := range d.Metrics {
			if _, ok := l[m.Name].(float64); !ok {
				t.Errorf("metric %s has no value at the top level of %v", m.Name, l)
			}
		}
		if l[metrics.DimDeployment] != "sluice-state" {
			t.Errorf("deployment %v", l[metrics.DimDeployment])
		}
		key, _ := l[metrics.DimTenant].(string)
		if key == "" {
			key, _ = l[metrics.DimTransition].(string)
		}
		byKey[key] = l
	}
	checks := []struct {
		line, metric string
		want         float64
	}{
		{"team-a", metrics.Compactions.Name, 2},
		{"team-a", metrics.BytesRead.Name, 4096},
		{"team-b", metrics.Compactions.Name, 1},
		{"team-b", metrics.OldestUncompacted.Name, 30},
		{"commit partition", metrics.ConditionLosses.Name, 1},
	}
	for _, c := range checks {
		if got := byKey[c.line][c.metric]; got != c.want {
			t.Errorf("%s %s = %v, want %v", c.line, c.metric, got, c.want)
		}
	}
	if again := emitted(t, b, at); len(again) != 0 {
		t.Errorf("a batch emitted twice wrote %d lines the second time, want 0", len(again))
	}
}

// TestNilBatchRecordsNothing: code below a context without a batch (a
// test, the CLI) may record freely.
func TestNilBatchRecordsNothing(t *testing.T) {
	b := metrics.From(context.Background())
	b.Add(metrics.Compactions, 1, "t")
	if v := b.Values(); len(v) != 0 {
		t.Errorf("nil batch holds %v", v)
	}
	real := metrics.NewBatch("d")
	ctx := metrics.With(context.Background(), real)
	metrics.From(ctx).Add(metrics.Rejections, 1, "t")
	if v := real.Values(); len(v) != 1 || v[0].V != 1 {
		t.Errorf("batch from context holds %v", v)
	}
}

// TestPrometheusText: `sluice metrics`' output parses with Prometheus' own
// text parser, with the types and labels given.
func TestPrometheusText(t *testing.T) {
	b := metrics.NewBatch("d")
	b.Add(metrics.OldestUncompacted, 7200, "team-a")
	b.Add(metrics.OldestUncompacted, 60, "team-\"b\"")
	b.Add(metrics.Compactions, 3, "team-a")
	var buf bytes.Buffer
	if err := metrics.WritePrometheus(&buf, "sluice-state", b.Values()); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("Prometheus cannot parse the output: %v\n%s", err, buf.String())
	}
	age := fams[metrics.OldestUncompacted.Name]
	if age == nil || age.GetType().String() != "GAUGE" || len(age.Metric) != 2 {
		t.Fatalf("oldest-uncompacted family %v", age)
	}
	got := map[string]float64{}
	for _, m := range age.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["deployment"] != "sluice-state" {
			t.Errorf("labels %v", labels)
		}
		got[labels["tenant"]] = m.GetGauge().GetValue()
	}
	if got["team-a"] != 7200 || got[`team-"b"`] != 60 {
		t.Errorf("gauges %v", got)
	}
	if c := fams[metrics.Compactions.Name]; c == nil || c.GetType().String() != "COUNTER" || c.Metric[0].GetCounter().GetValue() != 3 {
		t.Errorf("compactions family %v", c)
	}
}

// TestNamesAreUnique: two metrics with one name would merge in CloudWatch.
func TestNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range metrics.All() {
		if seen[m.Name] || m.Help == "" || m.Unit == "" {
			t.Errorf("metric %+v: duplicate name or missing help/unit", m)
		}
		seen[m.Name] = true
		if (m.Kind == metrics.Counter) != strings.HasSuffix(m.Name, "_total") {
			t.Errorf("%s: a counter's name ends in _total and a gauge's does not", m.Name)
		}
	}
}
