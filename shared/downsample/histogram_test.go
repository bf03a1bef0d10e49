package downsample_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/downsample/downsampletest"
)

// histogramWindow is what a window of a histogram series holds, from the
// raw samples alone: how many histograms, their sum, and the last one.
type histogramWindow struct {
	end       int64
	count     float64
	sum, last *histogram.FloatHistogram
}

// expectedHistograms windows the histogram samples of s at res (staleness
// markers left out); floats (a series that changes kind) are left to
// expected.
func expectedHistograms(t *testing.T, s downsampletest.Series, res int64) []histogramWindow {
	t.Helper()
	var out []histogramWindow
	for i, ts := range s.Ts {
		var fh *histogram.FloatHistogram
		switch {
		case i < len(s.H) && s.H[i] != nil:
			fh = s.H[i].ToFloat(nil)
		case i < len(s.FH) && s.FH[i] != nil:
			fh = s.FH[i].Copy()
		default:
			continue
		}
		if value.IsStaleNaN(fh.Sum) {
			continue
		}
		end := ts - ts%res + res - 1
		if len(out) == 0 || out[len(out)-1].end != end {
			out = append(out, histogramWindow{end: end})
		}
		w := &out[len(out)-1]
		w.count++
		w.last = fh
		if w.sum == nil {
			w.sum = fh.Copy()
		} else if _, _, _, err := w.sum.Add(fh); err != nil {
			t.Fatalf("%s at %d: %v", s.Labels, ts, err)
		}
	}
	return out
}

// sameHistogram compares what a reader sums: the number of observations,
// their sum and the zero bucket's count.
func sameHistogram(a, b *histogram.FloatHistogram) bool {
	return a != nil && b != nil && near(a.Count, b.Count) && near(a.Sum, b.Sum) && near(a.ZeroCount, b.ZeroCount)
}

// TestHistogramWindowsMatchTheRawSamples downsamples native histogram
// series of every shape (downsampletest's: buckets that spread, restarts,
// staleness markers, a schema that drops, a gauge, float histograms, a
// series changing between floats and histograms, custom buckets) to 5m,
// and that to 1h, and holds every window to the raw samples: the number
// of histograms and their sum; the float windows of the series that
// changes kind to the float rules. At 5m, the counter aggregate only rises
// within a chunk (restarts folded in) and, for the series that never
// restarts, is the window's last raw histogram.
func TestHistogramWindowsMatchTheRawSamples(t *testing.T) {
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + 7
	all := downsampletest.Make(downsampletest.Options{Start: start, Span: 48 * time.Hour, Seed: 9, Histograms: true})
	var series []downsampletest.Series
	for _, s := range all {
		if len(s.H) > 0 {
			series = append(series, s)
		}
	}
	if len(series) < 6 {
		t.Fatalf("%d histogram series made, want the six shapes", len(series))
	}
	dir := t.TempDir()
	src, m := raw(t, filepath.Join(dir, "raw"), series, false)
	out5 := downsampleDir(t, src, m, filepath.Join(dir, "5m"), downsample.Res5m)
	out1h := downsampleDir(t, out5.Dir, out5.Meta, filepath.Join(dir, "1h"), downsample.Res1h)
	if out5.Meta.Stats.NumHistogramSamples == 0 || out5.Meta.Stats.NumFloatSamples == 0 {
		t.Errorf("5m meta.json counts %d histogram and %d float windows; the block has both", out5.Meta.Stats.NumHistogramSamples, out5.Meta.Stats.NumFloatSamples)
	}
	for _, c := range []struct {
		name string
		dir  string
		res  int64
	}{{"5m", out5.Dir, downsample.Res5m}, {"1h", out1h.Dir, downsample.Res1h}} {
		got, _ := readSeries(t, c.dir)
		checked := 0
		for _, s := range series {
			chks, ok := got[s.Labels.String()]
			if !ok {
				t.Errorf("%s: series %s missing", c.name, s.Labels)
				continue
			}
			ws, err := downsample.Windows(chks, c.res)
			if err != nil {
				t.Fatalf("%s %s: %v", c.name, s.Labels, err)
			}
			hw := map[int64]downsample.Window{}
			var floatWindows []downsample.Window
			for _, w := range ws {
				if w.Histograms != nil {
					hw[w.End] = w
				} else {
					floatWindows = append(floatWindows, w)
				}
			}
			want := expectedHistograms(t, s, c.res)
			if len(hw) != len(want) {
				t.Errorf("%s %s: %d histogram windows, the raw samples fill %d", c.name, s.Labels, len(hw), len(want))
				continue
			}
			for _, w := range want {
				g := hw[w.end]
				if g.Count != w.count || !sameHistogram(g.Histograms, w.sum) {
					t.Errorf("%s %s window ending %s: %v histograms summing to %v; the raw samples give %v summing to %v",
						c.name, s.Labels, time.UnixMilli(w.end).UTC(), g.Count, g.Histograms, w.count, w.sum)
					break
				}
				checked++
			}
			if floats := floatPart(s); len(floats.Ts) > 0 {
				fw, _ := expected(floats, c.res)
				if len(floatWindows) != len(fw) {
					t.Errorf("%s %s: %d float windows, want %d", c.name, s.Labels, len(floatWindows), len(fw))
				}
			}
			if c.res == downsample.Res5m {
				checkHistogramCounter(t, s, chks, want)
			}
		}
		t.Logf("%s: %d histogram windows checked", c.name, checked)
	}
}

// floatPart is the series' float samples alone.
func floatPart(s downsampletest.Series) downsampletest.Series {
	f := downsampletest.Series{Labels: s.Labels}
	for i, ts := range s.Ts {
		if (i < len(s.H) && s.H[i] != nil) || (i < len(s.FH) && s.FH[i] != nil) {
			continue
		}
		f.Ts, f.Vs = append(f.Ts, ts), append(f.Vs, s.Vs[i])
	}
	return f
}

// checkHistogramCounter: in every 5m chunk the counter's observation count
// never falls (unless the series is a gauge), and for the float histogram series (which never restarts
// and keeps its schema) each window's counter is its last raw histogram.
func checkHistogramCounter(t *testing.T, s downsampletest.Series, chks []chunks.Meta, want []histogramWindow) {
	t.Helper()
	last := map[int64]*histogram.FloatHistogram{}
	for _, w := range want {
		last[w.end] = w.last
	}
	exact := strings.Contains(s.Labels.String(), "job_duration_seconds")
	gauge := s.H[0] != nil && s.H[0].CounterResetHint == histogram.GaugeType
	for i, c := range chks {
		cc, err := c.Chunk.(*downsample.AggrChunk).Get(downsample.Counter)
		if err != nil {
			t.Fatalf("%s chunk %d: %v", s.Labels, i, err)
		}
		if cc.Encoding() != chunkenc.EncFloatHistogram {
			continue // a float run of the series that changes kind
		}
		it := cc.Iterator(nil)
		prev := -1.0
		for it.Next() == chunkenc.ValFloatHistogram {
			ts, fh := it.AtFloatHistogram(nil)
			if fh.Count < prev && !gauge {
				t.Errorf("%s chunk %d: the counter falls from %v to %v at %d", s.Labels, i, prev, fh.Count, ts)
				return
			}
			prev = fh.Count
			// A chunk's last window is stamped with its last sample, not
			// the window's end.
			end := ts - ts%downsample.Res5m + downsample.Res5m - 1
			if exact && !sameHistogram(fh, last[end]) {
				t.Errorf("%s chunk %d: counter %v at %d, the window's last raw histogram is %v", s.Labels, i, fh, ts, last[end])
				return
			}
		}
	}
}
