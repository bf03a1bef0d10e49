package downsample

import (
	"errors"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// Native histograms are downsampled as Thanos does it: an aggregate chunk
// whose count is an XOR chunk (histograms per window), whose sum is a float
// histogram chunk (the window's histograms added up, a gauge) and whose
// counter is a float histogram chunk (the running counter, resets folded
// in); min and max are absent. A series that changes between floats and
// histograms is downsampled run by run, each run its own chunks.

// hsample is one histogram sample.
type hsample struct {
	t  int64
	fh *histogram.FloatHistogram
}

// errCustomBuckets is the error for a window mixing custom-bucket and
// exponential histograms, or custom buckets of different bounds: their
// sums are not defined (Thanos stops on them too).
var errCustomBuckets = errors.New("native histograms with custom buckets of different layouts cannot be aggregated")

// isHistogramEncoding says whether a raw chunk holds histograms.
func isHistogramEncoding(e chunkenc.Encoding) bool {
	switch e {
	case chunkenc.EncHistogram, chunkenc.EncFloatHistogram, chunkenc.EncHistogramST, chunkenc.EncFloatHistogramST:
		return true
	}
	return false
}

// histograms appends the histogram samples of a raw chunk to dst as float
// histograms, leaving out stale markers and any sample earlier than the
// one before it in the chunk (as Thanos reads them).
func histograms(c chunkenc.Chunk, dst []hsample) ([]hsample, error) {
	it := c.Iterator(nil)
	var lastT int64
	for {
		var (
			t  int64
			fh *histogram.FloatHistogram
		)
		switch it.Next() {
		case chunkenc.ValNone:
			return dst, it.Err()
		case chunkenc.ValHistogram:
			var h *histogram.Histogram
			t, h = it.AtHistogram(nil)
			fh = h.ToFloat(nil)
		case chunkenc.ValFloatHistogram:
			t, fh = it.AtFloatHistogram(nil)
		default:
			return dst, fmt.Errorf("a float sample in a %s chunk", c.Encoding())
		}
		if value.IsStaleNaN(fh.Sum) || t < lastT {
			continue
		}
		dst = append(dst, hsample{t, fh})
		lastT = t
	}
}

// histogramWindow accumulates one window's histogram aggregates and the
// counter across the whole batch.
type histogramWindow struct {
	count        int
	total        int
	sum, counter *histogram.FloatHistogram
	previous     *histogram.FloatHistogram
	// schema is the batch's smallest: every histogram is brought down to
	// it, so that sums and the chunk appender's layout agree.
	schema int32
}

// open starts a new window; the counter carries on.
func (w *histogramWindow) open() { w.count, w.sum = 0, nil }

// add folds in one histogram. A counter reset (detected against the
// previous one, unless the histogram is a gauge) adds the new histogram
// whole, otherwise the counter grows by the difference.
func (w *histogramWindow) add(in *histogram.FloatHistogram) error {
	fh := in
	if fh.Schema > w.schema {
		if fh.UsesCustomBuckets() || histogram.IsCustomBucketsSchema(w.schema) {
			return errCustomBuckets
		}
		var err error
		if fh, err = fh.CopyToSchema(w.schema); err != nil {
			return fmt.Errorf("reduce a histogram to schema %d: %w", w.schema, err)
		}
		// Thanos' Prometheus version drops the counter reset hint on a
		// copy to a lower schema; so does this, to write the chunks it
		// writes.
		fh.CounterResetHint = histogram.UnknownCounterReset
	}
	if w.total == 0 {
		w.counter = fh.Copy()
	} else {
		d := fh
		if fh.CounterResetHint == histogram.GaugeType || !in.DetectReset(w.previous) {
			var err error
			if d, _, _, err = fh.Copy().Sub(w.previous); err != nil {
				return fmt.Errorf("%w: %w", errCustomBuckets, err)
			}
		}
		if _, _, _, err := w.counter.Add(d); err != nil {
			return fmt.Errorf("%w: %w", errCustomBuckets, err)
		}
	}
	if w.sum == nil {
		w.sum = fh.Copy()
	} else if _, _, _, err := w.sum.Add(fh); err != nil {
		return fmt.Errorf("%w: %w", errCustomBuckets, err)
	}
	// A window's sum may be lower than the one before: it is a gauge, so
	// that the chunk appender does not take that for a counter reset.
	w.sum.CounterResetHint = histogram.GaugeType
	w.previous = fh
	w.count++
	w.total++
	return nil
}

// eachHistogramWindow walks data (ordered) window by window as eachWindow
// does, calling emit at the close of each window.
func eachHistogramWindow(data []hsample, res int64, emit func(t int64, w *histogramWindow) error) error {
	last := data[len(data)-1].t
	w := histogramWindow{schema: minSchema(data)}
	closeAt := int64(-1)
	for _, s := range data {
		if s.t > closeAt {
			if closeAt != -1 {
				if err := emit(closeAt, &w); err != nil {
					return err
				}
			}
			w.open()
			closeAt = min(windowEnd(s.t, res), last)
		}
		if err := w.add(s.fh); err != nil {
			return fmt.Errorf("at %d: %w", s.t, err)
		}
	}
	return emit(closeAt, &w)
}

// minSchema is the smallest schema of data.
func minSchema(data []hsample) int32 {
	s := int32(math.MaxInt32)
	for _, x := range data {
		s = min(s, x.fh.Schema)
	}
	return s
}

// histogramBuilder writes one histogram aggregate chunk.
type histogramBuilder struct {
	count      chunkenc.Chunk
	countApp   chunkenc.Appender
	fh         [numAggrs]chunkenc.Chunk // Sum and Counter
	fhApp      [numAggrs]chunkenc.Appender
	mint, maxt int64
}

func newHistogramBuilder() *histogramBuilder {
	b := &histogramBuilder{mint: math.MaxInt64, maxt: math.MinInt64}
	b.count, b.countApp = newXOR()
	for _, a := range []Aggr{Sum, Counter} {
		c := chunkenc.NewFloatHistogramChunk()
		app, err := c.Appender()
		if err != nil {
			panic(fmt.Sprintf("an empty float histogram chunk has no appender: %v", err)) // cannot happen
		}
		b.fh[a], b.fhApp[a] = c, app
	}
	return b
}

func newXOR() (chunkenc.Chunk, chunkenc.Appender) {
	c := chunkenc.NewXORChunk()
	app, err := c.Appender()
	if err != nil {
		panic(fmt.Sprintf("an empty XOR chunk has no appender: %v", err)) // cannot happen
	}
	return c, app
}

func (b *histogramBuilder) span(t int64) { b.mint, b.maxt = min(b.mint, t), max(b.maxt, t) }

// put appends fh to aggregate a (Sum or Counter) at t. The appender may
// recode the chunk for new buckets (the chunk it returns holds every
// sample) or, for what it takes as a counter reset, start a new one; the
// builder keeps whichever it returns, as Thanos does.
func (b *histogramBuilder) put(a Aggr, t int64, fh *histogram.FloatHistogram) error {
	c, _, app, err := b.fhApp[a].AppendFloatHistogram(b.fhApp[a], 0, t, fh, false)
	if err != nil {
		return fmt.Errorf("%s aggregate at %d: %w", a, t, err)
	}
	if c != nil {
		b.fh[a] = c
	}
	b.fhApp[a] = app
	b.span(t)
	return nil
}

func (b *histogramBuilder) meta() chunks.Meta {
	var parts [numAggrs]chunkenc.Chunk
	parts[Count], parts[Sum], parts[Counter] = b.count, b.fh[Sum], b.fh[Counter]
	c := EncodeAggr(parts)
	return chunks.Meta{MinTime: b.mint, MaxTime: b.maxt, Chunk: &c}
}

// histogramsFromRaw downsamples one raw histogram series (ordered, stale
// markers left out) to res, batched as fromRaw batches floats.
func histogramsFromRaw(data []hsample, res int64) ([]chunks.Meta, error) {
	if len(data) == 0 {
		return nil, nil
	}
	k := chunkCount(data[0].t, data[len(data)-1].t, assumedScrape, res, len(data))
	size := len(data)/k + 1
	var out []chunks.Meta
	for len(data) > 0 {
		j := min(size, len(data))
		for end := windowEnd(data[j-1].t, res); j < len(data) && data[j].t <= end; j++ {
		}
		batch := make([]hsample, 0, j)
		for _, s := range data[:j] {
			if !math.IsNaN(s.fh.Sum) {
				batch = append(batch, s)
			}
		}
		data = data[j:]
		if len(batch) == 0 {
			continue
		}
		gauge := batch[0].fh.CounterResetHint == histogram.GaugeType
		b := newHistogramBuilder()
		err := eachHistogramWindow(batch, res, func(t int64, w *histogramWindow) error {
			if gauge {
				w.counter.CounterResetHint = histogram.GaugeType
				w.sum.CounterResetHint = histogram.GaugeType
			}
			if err := b.put(Counter, t, w.counter); err != nil {
				return err
			}
			if err := b.put(Sum, t, w.sum); err != nil {
				return err
			}
			b.countApp.Append(0, t, float64(w.count))
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, b.meta())
	}
	return out, nil
}

// isHistogramAggr says whether an aggregate chunk holds a histogram series:
// its counter is a histogram chunk.
func isHistogramAggr(c AggrChunk) bool {
	cc, err := c.Get(Counter)
	if err != nil {
		return false
	}
	return isHistogramEncoding(cc.Encoding())
}

// histogramAggregateBatch re-aggregates a run of histogram aggregate
// chunks into one: the counter windowed again (resets applied), the sums
// added up per window, the counts too.
func histogramAggregateBatch(part []AggrChunk, res int64) (chunks.Meta, error) {
	b := newHistogramBuilder()
	for _, a := range []Aggr{Counter, Sum} {
		data, err := expandHistograms(part, a)
		if err != nil {
			return chunks.Meta{}, err
		}
		if len(data) == 0 {
			return chunks.Meta{}, fmt.Errorf("histogram aggregate chunks without a %s aggregate", a)
		}
		err = eachHistogramWindow(data, res, func(t int64, w *histogramWindow) error {
			if a == Counter {
				return b.put(Counter, t, w.counter)
			}
			return b.put(Sum, t, w.sum)
		})
		if err != nil {
			return chunks.Meta{}, fmt.Errorf("%s aggregate: %w", a, err)
		}
	}
	counts, err := expand(part, Count, nil)
	if err != nil {
		return chunks.Meta{}, err
	}
	if len(counts) > 0 {
		b.count, b.countApp = newXOR()
		eachWindow(counts, res, func(t int64, w *window) {
			b.countApp.Append(0, t, w.sum)
			b.span(t)
		})
	}
	return b.meta(), nil
}

// expandHistograms reads aggregate a (Sum or Counter) of every chunk of
// part, in order, as Thanos reads them (stale markers and samples going
// back in time within a chunk left out).
func expandHistograms(part []AggrChunk, a Aggr) ([]hsample, error) {
	var out []hsample
	for _, c := range part {
		ac, err := c.Get(a)
		if err == ErrAbsent {
			continue
		}
		if err != nil {
			return nil, err
		}
		if out, err = histograms(ac, out); err != nil {
			return nil, fmt.Errorf("%s aggregate: %w", a, err)
		}
	}
	return out, nil
}
