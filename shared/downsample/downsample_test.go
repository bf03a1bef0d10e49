package downsample_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/downsample/downsampletest"
)

// raw writes the test series (and a histogram series, with hist) as a
// raw block under dir.
func raw(t *testing.T, dir string, series []downsampletest.Series, hist bool) (string, *blockmeta.Meta) {
	t.Helper()
	d, m, err := downsampletest.Write(context.Background(), dir, series, hist)
	if err != nil {
		t.Fatal(err)
	}
	return d, m
}

func testSeries(start int64) []downsampletest.Series {
	return downsampletest.Make(downsampletest.Options{Start: start, Span: 38 * time.Hour, Counters: 20, Seed: 7})
}

// expected is what a window of res holds, computed from the raw samples
// alone: NaN (stale markers) left out; the counter is the first value plus
// every increase, a drop counting the new value as increase, up to the
// window's last sample. The counter is defined for series that are never
// negative (counters are not): for the others, counter is false.
func expected(s downsampletest.Series, res int64) (out []downsample.Window, counter bool) {
	var c, last float64
	seen := false
	counter = true
	for i, t := range s.Ts {
		v := s.Vs[i]
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

// checkWindows reads a downsampled series' chunks back and holds every
// window to want (the counter too, when counter).
func checkWindows(t *testing.T, series string, chks []chunks.Meta, res int64, want []downsample.Window, counter bool) {
	t.Helper()
	ws, err := downsample.Windows(chks, res)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	if len(ws) != len(want) {
		t.Errorf("%s: %d windows, want %d", series, len(ws), len(want))
		return
	}
	for i, w := range want {
		g := ws[i]
		if g.End != w.End || g.Count != w.Count || !near(g.Sum, w.Sum) || g.Min != w.Min || g.Max != w.Max || (counter && !near(g.Counter, w.Counter)) {
			t.Errorf("%s window %d ending %s: got %+v, want %+v", series, i, time.UnixMilli(w.End).UTC(), g, w)
			return
		}
	}
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
	src, m := raw(t, filepath.Join(dir, "raw"), series, false)
	out5 := downsampleDir(t, src, m, filepath.Join(dir, "5m"), downsample.Res5m)
	out1h := downsampleDir(t, out5.Dir, out5.Meta, filepath.Join(dir, "1h"), downsample.Res1h)

	var rawSamples uint64
	for _, s := range series {
		rawSamples += uint64(len(s.Ts))
	}
	if out5.RawSamples != rawSamples {
		t.Errorf("5m read %d raw samples, the block holds %d", out5.RawSamples, rawSamples)
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
				chks, ok := got[s.Labels.String()]
				if len(want) == 0 {
					if ok {
						t.Errorf("%s: only stale markers, yet a downsampled series", s.Labels)
					}
					continue
				}
				if !ok {
					t.Errorf("%s: missing", s.Labels)
					continue
				}
				checkWindows(t, s.Labels.String(), chks, c.res, want, counter)
				windows += len(want)
			}
			long := got[series[0].Labels.String()]
			if c.res == downsample.Res5m && len(long) < 2 {
				t.Errorf("the day-and-a-half counter fits %d chunk(s): the counter was never read across a chunk edge", len(long))
			}
			t.Logf("%s: %d series, %d windows checked, %d chunks for the first counter", c.name, len(got), windows, len(long))
		})
	}
}

// TestRefusals: a resolution that is not coarser is refused, and nothing
// is left behind.
func TestRefusals(t *testing.T) {
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	dir := t.TempDir()
	src, m := raw(t, filepath.Join(dir, "raw"), testSeries(start)[:2], false)
	b, err := tsdb.OpenBlock(nil, src, downsample.NewPool(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out := filepath.Join(dir, "out")
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
