package downsample_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/downsample"
)

// rawSeries is one series of a test block: its samples as written.
type rawSeries struct {
	lset labels.Labels
	ts   []int64
	vs   []float64
}

// testSeries is a day and a half of samples of every shape a real block
// holds: counters with resets (some right at window and chunk edges),
// gauges scraped at irregular intervals with gaps, stale markers, a series
// of nothing but stale markers, a single sample.
func testSeries(start int64) []rawSeries {
	rng := rand.New(rand.NewPCG(7, 11))
	span := int64(38 * time.Hour / time.Millisecond)
	var out []rawSeries
	add := func(name string, extra ...string) *rawSeries {
		out = append(out, rawSeries{lset: labels.FromStrings(append([]string{"__name__", name}, extra...)...)})
		return &out[len(out)-1]
	}
	for i := 0; i < 20; i++ {
		s := add("requests_total", "instance", fmt.Sprint(i))
		v := float64(rng.IntN(1000))
		step := int64(15_000 + 1000*i)
		for t := start + int64(i)*1000; t < start+span; t += step {
			if rng.IntN(700) == 0 {
				v = float64(rng.IntN(5)) // a restart
			} else {
				v += float64(rng.IntN(10))
			}
			s.ts, s.vs = append(s.ts, t), append(s.vs, v)
		}
	}
	// A reset on the first sample of a 5m window, and on its last.
	edge := add("edge_resets_total")
	for t, v := start, 100.0; t < start+span; t += 15_000 {
		switch {
		case (t-start)%(6*3600_000) == 0:
			v = 0
		case (t+15_000)%300_000 < 15_000:
			v = 1
		default:
			v += 3
		}
		edge.ts, edge.vs = append(edge.ts, t), append(edge.vs, v)
	}
	// Two counters that drop on alternate samples: wherever a chunk edge
	// falls, one of them resets across it.
	for phase := 0; phase < 2; phase++ {
		s := add("sawtooth_total", "phase", fmt.Sprint(phase))
		for t, k := start, phase; t < start+span; t, k = t+20_000, k+1 {
			s.ts, s.vs = append(s.ts, t), append(s.vs, float64(1+99*(k%2)))
		}
	}
	for i := 0; i < 10; i++ {
		s := add("temperature", "room", fmt.Sprint(i))
		for t := start + 3_000; t < start+span; t += int64(5_000 + rng.IntN(85_000)) {
			if t > start+span/3 && t < start+span/3+3600_000 {
				continue // an hour's gap
			}
			s.ts, s.vs = append(s.ts, t), append(s.vs, rng.NormFloat64()*10+20)
		}
	}
	stale := add("up", "job", "flaky")
	for t, k := start, 0; t < start+span; t, k = t+30_000, k+1 {
		v := 1.0
		if k%100 == 99 {
			v = math.Float64frombits(value.StaleNaN)
		}
		stale.ts, stale.vs = append(stale.ts, t), append(stale.vs, v)
	}
	gone := add("up", "job", "gone")
	for t := start; t < start+3600_000; t += 30_000 {
		gone.ts, gone.vs = append(gone.ts, t), append(gone.vs, math.Float64frombits(value.StaleNaN))
	}
	once := add("build_info", "version", "1.0")
	once.ts, once.vs = []int64{start + span/2}, []float64{1}
	return out
}

// writeRaw writes the series as a block with Prometheus' own block writer
// (the one promtool tsdb create-blocks-from uses) and returns its
// directory and meta.json, given a Thanos section like a sidecar's.
func writeRaw(t *testing.T, dir string, series []rawSeries, hist bool) (string, *blockmeta.Meta) {
	t.Helper()
	w, err := tsdb.NewBlockWriter(nopLogger(), dir, int64(48*time.Hour/time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	app := w.Appender(ctx)
	for _, s := range series {
		for i, ts := range s.ts {
			if _, err := app.Append(0, s.lset, ts, s.vs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if hist {
		h := &histogram.Histogram{Count: 3, Sum: 2, Schema: 0, ZeroThreshold: 0.001,
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{3}}
		if _, err := app.AppendHistogram(0, labels.FromStrings("__name__", "latency"), series[0].ts[0], h, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	id, err := w.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bdir := filepath.Join(dir, id.String())
	m, err := blockmeta.ReadDir(bdir)
	if err != nil {
		t.Fatal(err)
	}
	m.Thanos = &blockmeta.Thanos{Labels: map[string]string{"cluster": "eu1"}, Source: "sidecar"}
	if err := m.WriteDir(bdir); err != nil {
		t.Fatal(err)
	}
	return bdir, m
}

// expected is what a window of res holds, computed from the raw samples
// alone: NaN (stale markers) left out; the counter is the first value plus
// every increase, a drop counting the new value as increase, up to the
// window's last sample. The counter is defined for series that are never
// negative (counters are not): for the others, counter is false.
func expected(s rawSeries, res int64) (out []downsample.Window, counter bool) {
	var c, last float64
	seen := false
	counter = true
	for i, t := range s.ts {
		v := s.vs[i]
		if math.IsNaN(v) {
			continue
		}
		switch {
		case !seen:
			c = v
		case v < last:
			c += v
		default:
			c += v - last
		}
		counter = counter && v >= 0
		seen, last = true, v
		end := t - t%res + res - 1
		if len(out) == 0 || out[len(out)-1].End != end {
			out = append(out, downsample.Window{End: end, Min: v, Max: v})
		}
		w := &out[len(out)-1]
		w.Count++
		w.Sum += v
		w.Min, w.Max = min(w.Min, v), max(w.Max, v)
		w.Counter = c
	}
	return out, counter
}

func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b))
}

// readSeries reads every series of a downsampled block: its labels and
// chunks.
func readSeries(t *testing.T, dir string) (map[string][]chunks.Meta, *blockmeta.Meta) {
	t.Helper()
	b, err := tsdb.OpenBlock(nil, dir, downsample.NewPool(), nil)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer b.Close()
	ir, err := b.Index()
	if err != nil {
		t.Fatal(err)
	}
	defer ir.Close()
	cr, err := b.Chunks()
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	k, v := index.AllPostingsKey()
	p, err := ir.Postings(context.Background(), k, v)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]chunks.Meta{}
	var lb labels.ScratchBuilder
	for p.Next() {
		var chks []chunks.Meta
		if err := ir.Series(p.At(), &lb, &chks); err != nil {
			t.Fatal(err)
		}
		for i := range chks {
			c, _, err := cr.ChunkOrIterable(chks[i])
			if err != nil {
				t.Fatal(err)
			}
			// The reader reuses its buffers: keep a copy.
			ac := append(downsample.AggrChunk(nil), c.Bytes()...)
			if c.Encoding() != downsample.EncAggr {
				t.Fatalf("%s: chunk encoding %s, want the aggregate one", lb.Labels(), c.Encoding())
			}
			chks[i].Chunk = &ac
		}
		out[lb.Labels().String()] = chks
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	m, err := blockmeta.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out, m
}

func downsampleDir(t *testing.T, src string, m *blockmeta.Meta, out string, res int64) downsample.Result {
	t.Helper()
	b, err := tsdb.OpenBlock(nil, src, downsample.NewPool(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := downsample.Block(context.Background(), nopLogger(), b, m, out, ulid.Make(), res)
	if err != nil {
		t.Fatalf("downsample to %d: %v", res, err)
	}
	return r
}

// TestWindowsMatchTheRawSamples downsamples a block written by
// Prometheus' block writer to 5m, and that to 1h, and checks for every
// series and every window that count, sum, min, max and the counter are
// what the raw samples give.
func TestWindowsMatchTheRawSamples(t *testing.T) {
	start := time.Date(2025, 3, 1, 0, 0, 7, 0, time.UTC).UnixMilli()
	series := testSeries(start)
	dir := t.TempDir()
	src, m := writeRaw(t, filepath.Join(dir, "raw"), series, false)
	out5 := downsampleDir(t, src, m, filepath.Join(dir, "5m"), downsample.Res5m)
	out1h := downsampleDir(t, out5.Dir, out5.Meta, filepath.Join(dir, "1h"), downsample.Res1h)

	var raw uint64
	for _, s := range series {
		raw += uint64(len(s.ts))
	}
	if out5.RawSamples != raw {
		t.Errorf("5m read %d raw samples, the block holds %d", out5.RawSamples, raw)
	}
	for _, c := range []struct {
		name string
		res  int64
		dir  string
	}{{"5m", downsample.Res5m, out5.Dir}, {"1h", downsample.Res1h, out1h.Dir}} {
		t.Run(c.name, func(t *testing.T) {
			got, gm := readSeries(t, c.dir)
			if gm.Thanos == nil || gm.Thanos.Downsample.Resolution != c.res {
				t.Fatalf("meta.json resolution: %+v", gm.Thanos)
			}
			if gm.Thanos.Labels["cluster"] != "eu1" || gm.MinTime != m.MinTime || gm.MaxTime != m.MaxTime ||
				gm.Compaction.Level != m.Compaction.Level || len(gm.Compaction.Sources) != 1 || gm.Compaction.Sources[0] != m.ULID {
				t.Errorf("meta.json lost the source's labels, range or lineage: %+v", gm)
			}
			if gm.Stats.NumSeries != uint64(len(got)) || gm.Stats.NumSeries != uint64(len(series)-1) {
				t.Errorf("stats say %d series, the index has %d, want %d (the all-stale series has no window)", gm.Stats.NumSeries, len(got), len(series)-1)
			}
			windows := 0
			for _, s := range series {
				want, counter := expected(s, c.res)
				chks, ok := got[s.lset.String()]
				if len(want) == 0 {
					if ok {
						t.Errorf("%s: only stale markers, yet a downsampled series", s.lset)
					}
					continue
				}
				if !ok {
					t.Errorf("%s: missing", s.lset)
					continue
				}
				ws, err := downsample.Windows(chks, c.res)
				if err != nil {
					t.Fatalf("%s: %v", s.lset, err)
				}
				if len(ws) != len(want) {
					t.Errorf("%s: %d windows, want %d", s.lset, len(ws), len(want))
					continue
				}
				for i, w := range want {
					g := ws[i]
					if g.End != w.End || g.Count != w.Count || !near(g.Sum, w.Sum) || g.Min != w.Min || g.Max != w.Max || (counter && !near(g.Counter, w.Counter)) {
						t.Errorf("%s window %d ending %s: got %+v, want %+v", s.lset, i, time.UnixMilli(w.End).UTC(), g, w)
						break
					}
				}
				windows += len(want)
			}
			long := got[series[0].lset.String()]
			if c.res == downsample.Res5m && len(long) < 2 {
				t.Errorf("the day-and-a-half counter fits %d chunk(s): the counter was never read across a chunk edge", len(long))
			}
			t.Logf("%s: %d series, %d windows checked, %d chunks for the first counter", c.name, len(got), windows, len(long))
		})
	}
}

// TestRefusals: a histogram series, a resolution that is not coarser, and
// nothing left behind by either.
func TestRefusals(t *testing.T) {
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	dir := t.TempDir()
	src, m := writeRaw(t, filepath.Join(dir, "raw"), testSeries(start)[:2], true)
	b, err := tsdb.OpenBlock(nil, src, downsample.NewPool(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out := filepath.Join(dir, "out")
	if _, err := downsample.Block(context.Background(), nopLogger(), b, m, out, ulid.Make(), downsample.Res5m); !errors.Is(err, downsample.ErrHistogram) {
		t.Errorf("a histogram series: err %v, want ErrHistogram", err)
	}
	m.Thanos.Downsample.Resolution = downsample.Res1h
	if _, err := downsample.Block(context.Background(), nopLogger(), b, m, out, ulid.Make(), downsample.Res5m); err == nil {
		t.Error("downsampling a 1h block to 5m succeeded")
	}
	left, _ := os.ReadDir(out)
	if len(left) != 0 {
		t.Errorf("failed runs left %d entries in the output dir", len(left))
	}
}

// TestAggrChunk: the five parts round-trip, an absent one says so, and
// damaged bytes are an error, never a panic.
func TestAggrChunk(t *testing.T) {
	var parts [5]chunkenc.Chunk
	for i := range parts {
		if i == int(downsample.Min) {
			continue
		}
		c := chunkenc.NewXORChunk()
		app, _ := c.Appender()
		app.Append(0, 1000, float64(i))
		app.Append(0, 2000, float64(10*i))
		parts[i] = c
	}
	ac := downsample.EncodeAggr(parts)
	if ac.NumSamples() != 2 || ac.Encoding() != downsample.EncAggr {
		t.Fatalf("NumSamples %d, encoding %v", ac.NumSamples(), ac.Encoding())
	}
	for a := downsample.Count; a <= downsample.Counter; a++ {
		c, err := ac.Get(a)
		if a == downsample.Min {
			if !errors.Is(err, downsample.ErrAbsent) {
				t.Errorf("absent min: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		it := c.Iterator(nil)
		it.Next()
		it.Next()
		if ts, v := it.At(); ts != 2000 || v != float64(10*int(a)) {
			t.Errorf("%s: last sample %d %v", a, ts, v)
		}
	}
	for n := 0; n < len(ac); n++ {
		if _, err := downsample.AggrChunk(ac[:n]).Get(downsample.Counter); err == nil {
			t.Errorf("counter read from the first %d of %d bytes", n, len(ac))
		}
	}
}

func nopLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
