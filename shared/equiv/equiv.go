// Package equiv checks that compaction lost and invented nothing: the union
// of the output blocks holds exactly the deduplicated union of the input
// blocks, as sets of (labels, timestamp, value), floats and native
// histograms alike.
//
// It streams: every side is a merge of the blocks' label-sorted series, so
// only one series' samples (from all blocks) are in memory at a time.
package equiv

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/stream"
)

// MaxExamples bounds Report.Examples.
const MaxExamples = 10

// Report is the outcome of Check.
type Report struct {
	// InputSamples counts distinct (labels, t, value) samples of the inputs.
	InputSamples uint64
	// OutputSamples counts every sample read from the outputs, duplicates
	// included.
	OutputSamples uint64
	// Missing: input samples no output holds.
	Missing uint64
	// Extra: output samples no input holds.
	Extra uint64
	// DuplicatedInOutputs: output samples that repeat another output sample
	// (two partitions holding one series, or a block holding it twice).
	DuplicatedInOutputs uint64
	// InputSeries and OutputSeries count distinct label sets (per stream).
	InputSeries, OutputSeries uint64
	// Streams counts the streams compared (inputs' and outputs' together).
	Streams int
	// Examples describe up to MaxExamples differences.
	Examples []string
}

// OK reports whether outputs and inputs hold the same samples, each once.
func (r Report) OK() bool {
	return r.Missing == 0 && r.Extra == 0 && r.DuplicatedInOutputs == 0
}

func (r Report) String() string {
	s := fmt.Sprintf("input %d samples in %d series, output %d samples in %d series (%d stream(s)): %d missing, %d extra, %d duplicated",
		r.InputSamples, r.InputSeries, r.OutputSamples, r.OutputSeries, r.Streams, r.Missing, r.Extra, r.DuplicatedInOutputs)
	if len(r.Examples) > 0 {
		s += "\n  " + strings.Join(r.Examples, "\n  ")
	}
	return s
}

func (r *Report) example(format string, args ...any) {
	if len(r.Examples) < MaxExamples {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// Check compares the samples of the input block directories with those of
// the output block directories, stream by stream: a sample is identified
// by its stream (the block's external labels without replicaLabels, and
// its resolution: stream.Of), its series labels, timestamp and value. So a
// west cluster's samples in an output labelled east are missing from west
// and extra in east. Samples are read within each block's [minTime,
// maxTime) and after its tombstones, as Prometheus reads them.
func Check(ctx context.Context, inputs, outputs, replicaLabels []string) (Report, error) {
	ins, err := byStream(inputs, replicaLabels)
	if err != nil {
		return Report{}, fmt.Errorf("inputs: %w", err)
	}
	outs, err := byStream(outputs, replicaLabels)
	if err != nil {
		return Report{}, fmt.Errorf("outputs: %w", err)
	}
	names := map[string]bool{}
	for k := range ins {
		names[k] = true
	}
	for k := range outs {
		names[k] = true
	}
	var rep Report
	for _, name := range slices.Sorted(maps.Keys(names)) {
		r, err := checkStream(ctx, ins[name], outs[name])
		if err != nil {
			return rep, fmt.Errorf("stream %s: %w", name, err)
		}
		rep.Streams++
		rep.InputSamples += r.InputSamples
		rep.OutputSamples += r.OutputSamples
		rep.Missing += r.Missing
		rep.Extra += r.Extra
		rep.DuplicatedInOutputs += r.DuplicatedInOutputs
		rep.InputSeries += r.InputSeries
		rep.OutputSeries += r.OutputSeries
		for _, e := range r.Examples {
			if len(names) > 1 {
				e = "stream " + name + ": " + e
			}
			rep.example("%s", e)
		}
	}
	return rep, nil
}

// byStream groups block directories by the stream of their meta.json.
func byStream(dirs, replicaLabels []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, dir := range dirs {
		m, err := blockmeta.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		name := stream.Of(m, replicaLabels).String()
		out[name] = append(out[name], dir)
	}
	return out, nil
}

// checkStream compares the samples of one stream's input and output blocks.
func checkStream(ctx context.Context, inputs, outputs []string) (rep Report, err error) {
	in, err := openSide(inputs)
	if err != nil {
		return rep, fmt.Errorf("inputs: %w", err)
	}
	defer func() { err = errors.Join(err, in.close()) }()
	out, err := openSide(outputs)
	if err != nil {
		return rep, fmt.Errorf("outputs: %w", err)
	}
	defer func() { err = errors.Join(err, out.close()) }()

	inOK, outOK := in.next(), out.next()
	for n := 0; inOK || outOK; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
		}
		var c int
		switch {
		case !inOK:
			c = 1
		case !outOK:
			c = -1
		default:
			c = labels.Compare(in.lset, out.lset)
		}
		switch {
		case c < 0: // series only in inputs
			uniq, _ := dedup(in.samples)
			rep.InputSeries++
			rep.InputSamples += uint64(len(uniq))
			rep.Missing += uint64(len(uniq))
			rep.example("missing series %s (%d samples)", in.lset, len(uniq))
			inOK = in.next()
		case c > 0: // series only in outputs
			rep.OutputSeries++
			rep.OutputSamples += uint64(len(out.samples))
			uniq, dups := dedup(out.samples)
			rep.Extra += uint64(len(uniq))
			rep.DuplicatedInOutputs += dups
			rep.example("extra series %s (%d samples)", out.lset, len(out.samples))
			outOK = out.next()
		default:
			rep.InputSeries++
			rep.OutputSeries++
			rep.OutputSamples += uint64(len(out.samples))
			a, _ := dedup(in.samples)
			b, dups := dedup(out.samples)
			rep.InputSamples += uint64(len(a))
			if dups > 0 {
				rep.DuplicatedInOutputs += dups
				rep.example("series %s: %d samples duplicated in outputs", out.lset, dups)
			}
			compareSorted(&rep, in.lset, a, b)
			inOK, outOK = in.next(), out.next()
		}
	}
	if err := errors.Join(in.err, out.err); err != nil {
		return rep, err
	}
	return rep, nil
}

// sample is one (t, value); histograms are compared by a canonical key that
// ignores bucket layout (empty buckets) and counter-reset hints, which
// re-encoding may legitimately change.
type sample struct {
	t    int64
	kind chunkenc.ValueType
	f    uint64 // float bits
	h    string // canonical histogram
}

func compareSample(a, b sample) int {
	if c := cmp.Compare(a.t, b.t); c != 0 {
		return c
	}
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.f, b.f); c != 0 {
		return c
	}
	return strings.Compare(a.h, b.h)
}

func (s sample) String() string {
	switch s.kind {
	case chunkenc.ValFloat:
		return fmt.Sprintf("t=%d v=%g", s.t, math.Float64frombits(s.f))
	case chunkenc.ValHistogram:
		return fmt.Sprintf("t=%d histogram", s.t)
	default:
		return fmt.Sprintf("t=%d float histogram", s.t)
	}
}

// dedup sorts s and removes repeats, returning the unique samples and how
// many repeats there were.
func dedup(s []sample) ([]sample, uint64) {
	slices.SortFunc(s, compareSample)
	if len(s) == 0 {
		return s, 0
	}
	out := s[:1]
	for _, x := range s[1:] {
		if compareSample(x, out[len(out)-1]) != 0 {
			out = append(out, x)
		}
	}
	return out, uint64(len(s) - len(out))
}

func compareSorted(rep *Report, lset labels.Labels, a, b []sample) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var c int
		switch {
		case i == len(a):
			c = 1
		case j == len(b):
			c = -1
		default:
			c = compareSample(a[i], b[j])
		}
		switch {
		case c < 0:
			rep.Missing++
			rep.example("missing %s %s", lset, a[i])
			i++
		case c > 0:
			rep.Extra++
			rep.example("extra %s %s", lset, b[j])
			j++
		default:
			i++
			j++
		}
	}
}

// side merges the series of several blocks by labels.
type side struct {
	closers []func() error
	heads   []*head
	lset    labels.Labels
	samples []sample
	err     error
}

type head struct {
	set  storage.ChunkSeriesSet
	ok   bool
	name string
}

func openSide(dirs []string) (*side, error) {
	s := &side{}
	for _, dir := range dirs {
		b, err := tsdb.OpenBlock(nil, dir, nil, nil)
		if err != nil {
			_ = s.close()
			return nil, fmt.Errorf("open block %s: %w", dir, err)
		}
		s.closers = append(s.closers, b.Close)
		ir, err := b.Index()
		if err != nil {
			_ = s.close()
			return nil, fmt.Errorf("block %s: %w", dir, err)
		}
		s.closers = append(s.closers, ir.Close)
		cr, err := b.Chunks()
		if err != nil {
			_ = s.close()
			return nil, fmt.Errorf("block %s: %w", dir, err)
		}
		s.closers = append(s.closers, cr.Close)
		tr, err := b.Tombstones()
		if err != nil {
			_ = s.close()
			return nil, fmt.Errorf("block %s: %w", dir, err)
		}
		s.closers = append(s.closers, tr.Close)
		m := b.Meta()
		set := tsdb.NewBlockChunkSeriesSet(m.ULID, ir, cr, tr, tsdb.AllSortedPostings(context.Background(), ir), m.MinTime, m.MaxTime-1, false)
		h := &head{set: set, name: dir}
		h.ok = set.Next()
		s.heads = append(s.heads, h)
	}
	return s, nil
}

func (s *side) close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// next loads the smallest label set across blocks with all its samples.
func (s *side) next() bool {
	if s.err != nil {
		return false
	}
	var min labels.Labels
	found := false
	for _, h := range s.heads {
		if !h.ok {
			if err := h.set.Err(); err != nil {
				s.err = fmt.Errorf("block %s: %w", h.name, err)
				return false
			}
			continue
		}
		if l := h.set.At().Labels(); !found || labels.Compare(l, min) < 0 {
			min, found = l, true
		}
	}
	if !found {
		return false
	}
	s.lset = min.Copy()
	s.samples = s.samples[:0]
	var it chunks.Iterator
	var sit chunkenc.Iterator
	for _, h := range s.heads {
		for h.ok && labels.Equal(h.set.At().Labels(), s.lset) {
			it = h.set.At().Iterator(it)
			for it.Next() {
				sit = it.At().Chunk.Iterator(sit)
				var err error
				if s.samples, err = appendSamples(s.samples, sit); err != nil {
					s.err = fmt.Errorf("block %s: series %s: %w", h.name, s.lset, err)
					return false
				}
			}
			if err := it.Err(); err != nil {
				s.err = fmt.Errorf("block %s: series %s: %w", h.name, s.lset, err)
				return false
			}
			h.ok = h.set.Next()
		}
	}
	return true
}

func appendSamples(dst []sample, it chunkenc.Iterator) ([]sample, error) {
	var (
		hb  *histogram.Histogram
		fhb *histogram.FloatHistogram
	)
	for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
		switch vt {
		case chunkenc.ValFloat:
			t, v := it.At()
			dst = append(dst, sample{t: t, kind: vt, f: math.Float64bits(v)})
		case chunkenc.ValHistogram:
			var t int64
			t, hb = it.AtHistogram(hb)
			dst = append(dst, sample{t: t, kind: vt, h: histogramKey(hb.ToFloat(nil), hb.CounterResetHint == histogram.GaugeType)})
		case chunkenc.ValFloatHistogram:
			var t int64
			t, fhb = it.AtFloatHistogram(fhb)
			dst = append(dst, sample{t: t, kind: vt, h: histogramKey(fhb, fhb.CounterResetHint == histogram.GaugeType)})
		}
	}
	return dst, it.Err()
}

// histogramKey encodes what a histogram means: schema, thresholds, counts,
// sum, custom bounds, and every non-empty bucket by index. Span layout and
// counter-reset hints (other than gauge) are left out.
func histogramKey(h *histogram.FloatHistogram, gauge bool) string {
	var b []byte
	u := func(x uint64) { b = binary.BigEndian.AppendUint64(b, x) }
	f := func(x float64) { u(math.Float64bits(x)) }
	if gauge {
		b = append(b, 'g')
	} else {
		b = append(b, 'c')
	}
	u(uint64(int64(h.Schema)))
	f(h.ZeroThreshold)
	f(h.ZeroCount)
	f(h.Count)
	f(h.Sum)
	u(uint64(len(h.CustomValues)))
	for _, v := range h.CustomValues {
		f(v)
	}
	for _, it := range []histogram.BucketIterator[float64]{h.PositiveBucketIterator(), h.NegativeBucketIterator()} {
		b = append(b, '|')
		for it.Next() {
			bk := it.At()
			if bk.Count == 0 {
				continue
			}
			u(uint64(int64(bk.Index)))
			f(bk.Count)
		}
	}
	return string(b)
}
