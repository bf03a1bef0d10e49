// Package downsampletest writes raw blocks for downsampling tests and
// checks: series of every shape a real block holds, written with
// Prometheus' own block writer (the one promtool tsdb create-blocks-from
// uses), so their chunks are cut the way Prometheus cuts them.
package downsampletest

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

// Series is one series: its samples as written. Sample i is a histogram
// where H[i] (or FH[i], a float histogram) is set, else the float Vs[i].
type Series struct {
	Labels labels.Labels
	Ts     []int64
	Vs     []float64
	H      []*histogram.Histogram
	FH     []*histogram.FloatHistogram
}

// Options shape the series.
type Options struct {
	// Start is the first sample's time (ms).
	Start int64
	// Span is how long the series run.
	Span time.Duration
	// Counters is the number of plain counters (with occasional resets).
	Counters int
	// Seed makes the samples deterministic.
	Seed uint64
	// Histograms adds native histogram series of every shape (see
	// histogramSeries), with a random source of their own: the float
	// series stay as they are without them.
	Histograms bool
}

// Make returns series of every shape: counters with occasional resets at
// distinct scrape intervals, a counter resetting right at 5m window edges,
// two counters that drop on alternate samples (so that wherever a chunk
// edge falls, one of them resets across it), gauges at irregular
// intervals with an hour's gap that go negative, a series with stale
// markers, one of nothing but stale markers, and a single sample.
func Make(o Options) []Series {
	rng := rand.New(rand.NewPCG(o.Seed, 11))
	start, span := o.Start, o.Span.Milliseconds()
	var out []Series
	add := func(name string, extra ...string) *Series {
		out = append(out, Series{Labels: labels.FromStrings(append([]string{"__name__", name}, extra...)...)})
		return &out[len(out)-1]
	}
	for i := 0; i < o.Counters; i++ {
		s := add("requests_total", "instance", fmt.Sprint(i))
		v := float64(rng.IntN(1000))
		step := int64(15_000 + 1000*(i%20))
		for t := start + int64(i%60)*1000; t < start+span; t += step {
			if rng.IntN(700) == 0 {
				v = float64(rng.IntN(5)) // a restart
			} else {
				v += float64(rng.IntN(10))
			}
			s.Ts, s.Vs = append(s.Ts, t), append(s.Vs, v)
		}
	}
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
		edge.Ts, edge.Vs = append(edge.Ts, t), append(edge.Vs, v)
	}
	for phase := 0; phase < 2; phase++ {
		s := add("sawtooth_total", "phase", fmt.Sprint(phase))
		for t, k := start, phase; t < start+span; t, k = t+20_000, k+1 {
			s.Ts, s.Vs = append(s.Ts, t), append(s.Vs, float64(1+99*(k%2)))
		}
	}
	for i := 0; i < 10; i++ {
		s := add("temperature", "room", fmt.Sprint(i))
		for t := start + 3_000; t < start+span; t += int64(5_000 + rng.IntN(85_000)) {
			if t > start+span/3 && t < start+span/3+3600_000 {
				continue // an hour's gap
			}
			s.Ts, s.Vs = append(s.Ts, t), append(s.Vs, rng.NormFloat64()*10+20)
		}
	}
	stale := add("up", "job", "flaky")
	for t, k := start, 0; t < start+span; t, k = t+30_000, k+1 {
		v := 1.0
		if k%100 == 99 {
			v = math.Float64frombits(value.StaleNaN)
		}
		stale.Ts, stale.Vs = append(stale.Ts, t), append(stale.Vs, v)
	}
	gone := add("up", "job", "gone")
	for t := start; t < start+3600_000; t += 30_000 {
		gone.Ts, gone.Vs = append(gone.Ts, t), append(gone.Vs, math.Float64frombits(value.StaleNaN))
	}
	once := add("build_info", "version", "1.0")
	once.Ts, once.Vs = []int64{start + span/2}, []float64{1}
	if o.Histograms {
		out = append(out, histogramSeries(start, span, rand.New(rand.NewPCG(o.Seed, 13)))...)
	}
	return out
}

// Write writes the series (and, with histogram, one native histogram
// series) as one block under dir with Prometheus' block writer, gives it a
// Thanos section like a sidecar's (external label cluster="eu1"), and
// returns its directory and meta.json.
func Write(ctx context.Context, dir string, series []Series, histogramToo bool) (string, *blockmeta.Meta, error) {
	logger := slog.New(slog.DiscardHandler)
	w, err := tsdb.NewBlockWriter(logger, dir, (14 * 24 * time.Hour).Milliseconds())
	if err != nil {
		return "", nil, err
	}
	defer w.Close()
	app := w.Appender(ctx)
	for _, s := range series {
		for i, ts := range s.Ts {
			var err error
			switch {
			case i < len(s.H) && s.H[i] != nil:
				_, err = app.AppendHistogram(0, s.Labels, ts, s.H[i], nil)
			case i < len(s.FH) && s.FH[i] != nil:
				_, err = app.AppendHistogram(0, s.Labels, ts, nil, s.FH[i])
			default:
				_, err = app.Append(0, s.Labels, ts, s.Vs[i])
			}
			if err != nil {
				return "", nil, fmt.Errorf("%s at %d: %w", s.Labels, ts, err)
			}
		}
	}
	if histogramToo && len(series) > 0 && len(series[0].Ts) > 0 {
		h := &histogram.Histogram{Count: 3, Sum: 2, ZeroThreshold: 0.001,
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{3}}
		if _, err := app.AppendHistogram(0, labels.FromStrings("__name__", "latency"), series[0].Ts[0], h, nil); err != nil {
			return "", nil, err
		}
	}
	if err := app.Commit(); err != nil {
		return "", nil, err
	}
	id, err := w.Flush(ctx)
	if err != nil {
		return "", nil, err
	}
	bdir := filepath.Join(dir, id.String())
	m, err := blockmeta.ReadDir(bdir)
	if err != nil {
		return "", nil, err
	}
	m.Thanos = &blockmeta.Thanos{Labels: map[string]string{"cluster": "eu1"}, Source: "sidecar"}
	if err := m.WriteDir(bdir); err != nil {
		return "", nil, err
	}
	return bdir, m, nil
}

// Golden is the raw block behind shared/downsample's golden file: small
// (19 series over 48h), every shape Make has. The golden test and
// scripts/thanos-downsample-check.sh (which writes the file from Thanos'
// own downsampling of this block) both build it from these options.
func Golden() Options {
	return Options{
		Start:      time.Date(2025, 3, 1, 0, 0, 7, 0, time.UTC).UnixMilli(),
		Span:       48 * time.Hour,
		Counters:   4,
		Seed:       42,
		Histograms: true,
	}
}
