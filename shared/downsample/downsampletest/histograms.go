package downsampletest

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
)

// histogramSeries returns native histogram series of every shape a
// Prometheus 3 block holds: a counter histogram whose buckets spread over
// time (the chunk appender recodes) with restarts and stale markers; one
// whose schema drops mid-series (a batch mixing schemas is brought to the
// lowest); a gauge histogram; float histograms; a series that turns from
// floats to histograms and back; and a histogram with custom buckets.
func histogramSeries(start, span int64, rng *rand.Rand) []Series {
	var out []Series
	add := func(name string, extra ...string) *Series {
		out = append(out, Series{Labels: labels.FromStrings(append([]string{"__name__", name}, extra...)...)})
		return &out[len(out)-1]
	}
	stale := &histogram.Histogram{Sum: math.Float64frombits(value.StaleNaN)}

	lat := add("rpc_latency_seconds")
	counts, sum, hi := map[int32]uint64{}, 0.0, int32(2)
	for t, k := start, 0; t < start+span; t, k = t+15_000, k+1 {
		switch {
		case k%200 == 199:
			lat.add(t, stale, nil)
			continue
		case rng.IntN(900) == 0:
			clear(counts) // a restart
			sum = 0
		case k%300 == 0 && hi < 12:
			hi++ // a slower request than any before: a new bucket
		}
		for range rng.IntN(6) {
			i := int32(rng.IntN(int(hi)+3)) - 2
			counts[i]++
			sum += math.Pow(2, float64(i)/8)
		}
		lat.add(t, intHistogram(3, counts, sum, histogram.UnknownCounterReset), nil)
	}

	size := add("rpc_size_bytes")
	counts, sum = map[int32]uint64{}, 0
	for t := start; t < start+span; t += 30_000 {
		for range 1 + rng.IntN(4) {
			i := int32(rng.IntN(20))
			counts[i]++
			sum += math.Pow(2, float64(i)/16)
		}
		fh := intHistogram(4, counts, sum, histogram.UnknownCounterReset).ToFloat(nil)
		if t >= start+span*5/8 { // too many buckets: the client lowers the resolution
			var err error
			if fh, err = fh.CopyToSchema(2); err != nil {
				panic(err) // a histogram built here always reduces
			}
		}
		size.add(t, nil, fh)
	}

	queue := add("queue_depth")
	for t := start; t < start+span; t += 20_000 {
		g := map[int32]uint64{}
		for range rng.IntN(10) {
			g[int32(rng.IntN(8))]++
		}
		queue.add(t, intHistogram(1, g, float64(rng.IntN(100)), histogram.GaugeType), nil)
	}

	job := add("job_duration_seconds")
	fcounts := map[int32]float64{}
	fsum := 0.0
	for t := start; t < start+span; t += 60_000 {
		i := int32(rng.IntN(6))
		fcounts[i] += 0.5 + rng.Float64()
		fsum += rng.Float64() * 10
		job.add(t, nil, floatHistogram(0, fcounts, fsum))
	}

	mixed := add("payload_size")
	counts, sum = map[int32]uint64{}, 0
	for t := start; t < start+span; t += 15_000 {
		if t < start+span/3 || t >= start+span*2/3 {
			mixed.Ts, mixed.Vs = append(mixed.Ts, t), append(mixed.Vs, float64(t-start)/1000)
			mixed.H, mixed.FH = append(mixed.H, nil), append(mixed.FH, nil)
			continue
		}
		counts[int32(rng.IntN(5))]++
		sum += 3
		mixed.add(t, intHistogram(0, counts, sum, histogram.UnknownCounterReset), nil)
	}

	custom := add("http_request_duration_seconds", "buckets", "custom")
	bounds := []float64{0.1, 0.5, 1, 5}
	counts, sum = map[int32]uint64{}, 0
	for t := start; t < start+span; t += 15_000 {
		counts[int32(rng.IntN(len(bounds)+1))]++
		sum += rng.Float64() * 6
		h := intHistogram(histogram.CustomBucketsSchema, counts, sum, histogram.UnknownCounterReset)
		h.CustomValues = bounds
		custom.add(t, h, nil)
	}
	return out
}

// add appends one histogram sample (h, or the float histogram fh).
func (s *Series) add(t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) {
	s.Ts, s.Vs = append(s.Ts, t), append(s.Vs, 0)
	s.H, s.FH = append(s.H, h), append(s.FH, fh)
}

// intHistogram is the histogram of schema with the given positive bucket
// counts (by bucket index; for custom buckets, the index into the
// bounds) and no zero bucket observations.
func intHistogram(schema int32, counts map[int32]uint64, sum float64, hint histogram.CounterResetHint) *histogram.Histogram {
	h := &histogram.Histogram{CounterResetHint: hint, Schema: schema, Sum: sum}
	if !histogram.IsCustomBucketsSchema(schema) {
		h.ZeroThreshold = 1e-128
	}
	var idx []int32
	h.PositiveSpans, idx = spans(counts)
	prev := int64(0)
	for _, i := range idx {
		h.Count += counts[i]
		h.PositiveBuckets = append(h.PositiveBuckets, int64(counts[i])-prev) // deltas
		prev = int64(counts[i])
	}
	return h
}

// floatHistogram is the float histogram of schema with the given positive
// bucket counts.
func floatHistogram(schema int32, counts map[int32]float64, sum float64) *histogram.FloatHistogram {
	h := &histogram.FloatHistogram{Schema: schema, Sum: sum, ZeroThreshold: 1e-128}
	var idx []int32
	h.PositiveSpans, idx = spans(counts)
	for _, i := range idx {
		h.Count += counts[i]
		h.PositiveBuckets = append(h.PositiveBuckets, counts[i])
	}
	return h
}

// spans lays out the buckets of counts: the spans covering their indexes,
// and the indexes in order.
func spans[V any](counts map[int32]V) ([]histogram.Span, []int32) {
	idx := slices.Sorted(maps.Keys(counts))
	var out []histogram.Span
	for i, x := range idx {
		switch {
		case i == 0:
			out = append(out, histogram.Span{Offset: x, Length: 1})
		case x == idx[i-1]+1:
			out[len(out)-1].Length++
		default:
			out = append(out, histogram.Span{Offset: x - idx[i-1] - 1, Length: 1})
		}
	}
	return out, idx
}
