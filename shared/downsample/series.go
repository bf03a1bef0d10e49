package downsample

import (
	"fmt"
	"math"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// The resolutions Thanos downsamples to, in milliseconds.
const (
	Res5m int64 = 5 * 60 * 1000
	Res1h int64 = 60 * 60 * 1000
)

const (
	// assumedScrape is the raw sample interval Thanos assumes when it sizes
	// the chunks of a raw series' aggregates. Scrapes are often denser;
	// only the number of chunks depends on it.
	assumedScrape int64 = 60 * 1000
	// windowsPerChunk is the most windows an output chunk holds on
	// average: outputs are cut so that each chunk stays under it.
	windowsPerChunk = 140
)

// sample is one float sample.
type sample struct {
	t int64
	v float64
}

// windowEnd is the last millisecond of the window of width res holding t.
// Windows are aligned to the epoch, so 5m windows fall inside 1h ones.
func windowEnd(t, res int64) int64 { return t - t%res + res - 1 }

// chunkCount is how many output chunks a series spanning [mint, maxt] with
// n input samples at resolution inRes is cut into at outRes: the windows
// it can fill, scaled by how densely the input covers its span, at most
// windowsPerChunk to a chunk. It is Thanos' rule, so chunk boundaries (and
// with them the counter aggregate's raw first and last values) fall where
// Thanos puts them.
func chunkCount(mint, maxt, inRes, outRes int64, n int) int {
	span := maxt - mint
	windows := float64(span / outRes)
	fullness := 1.0
	if span > 0 {
		fullness = min(1, float64(n)/(float64(span)/float64(inRes)))
	}
	expected := int(windows*fullness) + 1
	k := 1
	for expected/k > windowsPerChunk {
		k++
	}
	return k
}

// window accumulates one window's aggregates, and the counter over every
// window of a batch so far (counter resets folded in).
type window struct {
	count         int
	sum, min, max float64
	counter, last float64
	seen          int
}

// open starts a new window; the counter carries on.
func (w *window) open() {
	w.count, w.sum, w.min, w.max = 0, 0, math.MaxFloat64, -math.MaxFloat64
}

func (w *window) add(v float64) {
	switch {
	case w.seen == 0:
		w.counter = v
	case v < w.last: // a reset: the counter started again from zero
		w.counter += v
	default:
		w.counter += v - w.last
	}
	w.last = v
	w.seen++
	w.count++
	w.sum += v
	w.min = min(w.min, v)
	w.max = max(w.max, v)
}

// eachWindow walks data (ordered, no NaN) window by window and calls emit
// at the close of each with the window's timestamp: its end, or the batch's
// last sample for the last window, so no output sample lies past the
// batch (the next batch starts a new chunk). It returns the last
// timestamp emitted.
func eachWindow(data []sample, res int64, emit func(t int64, w *window)) int64 {
	last := data[len(data)-1].t
	var w window
	closeAt := int64(-1)
	for _, s := range data {
		if s.t > closeAt {
			if closeAt != -1 {
				emit(closeAt, &w)
			}
			w.open()
			closeAt = min(windowEnd(s.t, res), last)
		}
		w.add(s.v)
	}
	emit(closeAt, &w)
	return closeAt
}

// builder writes one output chunk: an XOR chunk per aggregate present.
type builder struct {
	parts      [numAggrs]chunkenc.Chunk
	apps       [numAggrs]chunkenc.Appender
	mint, maxt int64
}

func newBuilder() *builder { return &builder{mint: math.MaxInt64, maxt: math.MinInt64} }

// start makes aggregate a present.
func (b *builder) start(a Aggr) {
	c := chunkenc.NewXORChunk()
	app, err := c.Appender()
	if err != nil {
		panic(fmt.Sprintf("an empty XOR chunk has no appender: %v", err)) // cannot happen
	}
	b.parts[a], b.apps[a] = c, app
}

// put appends v to aggregate a at t, a window's timestamp.
func (b *builder) put(a Aggr, t int64, v float64) {
	b.mint, b.maxt = min(b.mint, t), max(b.maxt, t)
	b.apps[a].Append(0, t, v)
}

func (b *builder) meta() chunks.Meta {
	c := EncodeAggr(b.parts)
	return chunks.Meta{MinTime: b.mint, MaxTime: b.maxt, Chunk: &c}
}

// fromRaw downsamples one raw float series (ordered; NaN samples, stale
// markers among them, are left out of every aggregate) to res. The series
// is cut into batches of about equal size, each extended to the end of its
// last window so that no window spans two; each batch is one chunk. Its
// counter aggregate starts with the batch's first raw sample and ends with
// a second sample at the last window's timestamp holding the batch's last
// raw value, which lets a reader tell a counter reset between chunks.
func fromRaw(data []sample, res int64) []chunks.Meta {
	if len(data) == 0 {
		return nil
	}
	k := chunkCount(data[0].t, data[len(data)-1].t, assumedScrape, res, len(data))
	size := len(data)/k + 1
	var out []chunks.Meta
	batch := make([]sample, 0, size)
	for len(data) > 0 {
		j := min(size, len(data))
		for end := windowEnd(data[j-1].t, res); j < len(data) && data[j].t <= end; j++ {
		}
		batch = batch[:0]
		for _, s := range data[:j] {
			if !math.IsNaN(s.v) {
				batch = append(batch, s)
			}
		}
		data = data[j:]
		if len(batch) == 0 {
			continue
		}
		b := newBuilder()
		for a := Count; a < numAggrs; a++ {
			b.start(a)
		}
		b.apps[Counter].Append(0, batch[0].t, batch[0].v)
		lastT := eachWindow(batch, res, func(t int64, w *window) {
			b.put(Sum, t, w.sum)
			b.put(Min, t, w.min)
			b.put(Max, t, w.max)
			b.put(Count, t, float64(w.count))
			b.put(Counter, t, w.counter)
		})
		b.apps[Counter].Append(0, lastT, batch[len(batch)-1].v)
		out = append(out, b.meta())
	}
	return out
}

// fromAggregates downsamples a series of aggregate chunks at inRes to res.
// Batches follow the input's chunk boundaries (a chunk's counter holds the
// series' true first and last raw values, which must survive), so a window
// may be split between two output chunks; a reader sums such windows. A
// series that changed between floats and histograms is downsampled run by
// run of chunks of one kind.
func fromAggregates(chks []chunks.Meta, inRes, res int64) ([]chunks.Meta, error) {
	if len(chks) == 0 {
		return nil, nil
	}
	aggrs := make([]AggrChunk, len(chks))
	for i, c := range chks {
		ac, ok := c.Chunk.(*AggrChunk)
		if !ok {
			return nil, fmt.Errorf("chunk %d of %d is %s, not an aggregate chunk, in a block at resolution %d", i, len(chks), c.Chunk.Encoding(), inRes)
		}
		aggrs[i] = *ac
	}
	var out []chunks.Meta
	for start := 0; start < len(aggrs); {
		hist := isHistogramAggr(aggrs[start])
		end := start + 1
		for end < len(aggrs) && isHistogramAggr(aggrs[end]) == hist {
			end++
		}
		run, err := fromAggregateRun(chks[start:end], aggrs[start:end], hist, inRes, res)
		if err != nil {
			return nil, err
		}
		out = append(out, run...)
		start = end
	}
	return out, nil
}

// fromAggregateRun downsamples a run of aggregate chunks of one kind.
func fromAggregateRun(chks []chunks.Meta, aggrs []AggrChunk, hist bool, inRes, res int64) ([]chunks.Meta, error) {
	n := 0
	for _, ac := range aggrs {
		n += ac.NumSamples()
	}
	k := chunkCount(chks[0].MinTime, chks[len(chks)-1].MaxTime, inRes, res, n)
	size := max(1, len(aggrs)/k)
	var out []chunks.Meta
	var buf []sample
	for len(aggrs) > 0 {
		j := min(size, len(aggrs))
		var (
			m   chunks.Meta
			err error
		)
		if hist {
			m, err = histogramAggregateBatch(aggrs[:j], res)
		} else {
			m, err = aggregateBatch(aggrs[:j], res, &buf)
		}
		if err != nil {
			return nil, err
		}
		if m.MinTime <= m.MaxTime {
			out = append(out, m)
		}
		aggrs = aggrs[j:]
	}
	return out, nil
}

// aggregateBatch re-aggregates a run of aggregate chunks into one: count
// and sum add up, min and max keep theirs, and the counter is read across
// the chunks with resets applied, then windowed like raw samples.
func aggregateBatch(part []AggrChunk, res int64, buf *[]sample) (chunks.Meta, error) {
	b := newBuilder()
	for _, a := range []Aggr{Count, Sum, Min, Max} {
		var err error
		if *buf, err = expand(part, a, (*buf)[:0]); err != nil {
			return chunks.Meta{}, err
		}
		if len(*buf) == 0 {
			continue
		}
		b.start(a)
		eachWindow(*buf, res, func(t int64, w *window) {
			switch a {
			case Count, Sum:
				b.put(a, t, w.sum)
			case Min:
				b.put(a, t, w.min)
			case Max:
				b.put(a, t, w.max)
			}
		})
	}
	cs, lastRaw, err := counterSeries(part, (*buf)[:0])
	*buf = cs
	if err != nil {
		return chunks.Meta{}, err
	}
	if len(cs) > 0 {
		b.start(Counter)
		b.apps[Counter].Append(0, cs[0].t, cs[0].v)
		lastT := eachWindow(cs, res, func(t int64, w *window) { b.put(Counter, t, w.counter) })
		b.apps[Counter].Append(0, lastT, lastRaw)
	}
	return b.meta(), nil
}

// expand appends aggregate a's samples from every chunk of part to dst.
func expand(part []AggrChunk, a Aggr, dst []sample) ([]sample, error) {
	for _, c := range part {
		ac, err := c.Get(a)
		if err == ErrAbsent {
			continue
		}
		if err != nil {
			return dst, err
		}
		it := ac.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			t, v := it.At()
			dst = append(dst, sample{t, v})
		}
		if err := it.Err(); err != nil {
			return dst, fmt.Errorf("%s aggregate: %w", a, err)
		}
	}
	return dst, nil
}

// counterSeries reads the counter aggregates of chks, in order, as one
// series that only rises: within a chunk the values already have resets
// folded in; between chunks, the first raw value of a chunk against the
// last raw value of the one before (the sample repeating the previous
// timestamp) tells whether the counter reset. Samples at or before the
// last one read (an overlap) are skipped. It returns the samples with
// their running total, and the last raw value.
func counterSeries(chks []AggrChunk, dst []sample) ([]sample, float64, error) {
	var (
		lastT        int64
		lastV, total float64
		started      bool
		reuse        chunkenc.Iterator
	)
	for _, c := range chks {
		cc, err := c.Get(Counter)
		if err == ErrAbsent {
			continue
		}
		if err != nil {
			return dst, 0, err
		}
		reuse = cc.Iterator(reuse)
		for reuse.Next() == chunkenc.ValFloat {
			t, v := reuse.At()
			switch {
			case math.IsNaN(v):
			case !started:
				started = true
				lastT, lastV, total = t, v, v
				dst = append(dst, sample{t, total})
			case t > lastT:
				if v >= lastV {
					total += v - lastV
				} else {
					total += v
				}
				lastT, lastV = t, v
				dst = append(dst, sample{t, total})
			case t == lastT:
				lastV = v // the chunk's closing raw value
			}
		}
		if err := reuse.Err(); err != nil {
			return dst, 0, fmt.Errorf("counter aggregate: %w", err)
		}
	}
	return dst, lastV, nil
}
