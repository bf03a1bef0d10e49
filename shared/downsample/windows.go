package downsample

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// Window is one window of a downsampled series as a reader sees it.
type Window struct {
	// End is the window's last millisecond.
	End                  int64
	Count, Sum, Min, Max float64
	// Counter is the series' counter at the window's last sample: the
	// first value plus every increase since, a reset counting its new
	// value as increase.
	Counter float64
	// Histograms is the sum of the window's native histograms, for a
	// window of a histogram series (Count is then their number; Sum,
	// Min, Max and Counter are not set).
	Histograms *histogram.FloatHistogram
}

// Windows reads the aggregate chunks of one series back into windows of
// res, in order. A window split between two chunks (which happens one
// resolution up, where chunks follow the input's boundaries) is merged as
// a reader merges it: counts and sums add, min and max keep theirs.
func Windows(chks []chunks.Meta, res int64) ([]Window, error) {
	var aggrs, hists []AggrChunk
	for i, c := range chks {
		ac, ok := c.Chunk.(*AggrChunk)
		if !ok {
			return nil, fmt.Errorf("chunk %d is %s, not an aggregate chunk", i, c.Chunk.Encoding())
		}
		if isHistogramAggr(*ac) {
			hists = append(hists, *ac)
		} else {
			aggrs = append(aggrs, *ac)
		}
	}
	var ws []Window
	at := map[int64]int{}
	get := func(t int64) *Window {
		end := windowEnd(t, res)
		i, ok := at[end]
		if !ok {
			i = len(ws)
			at[end] = i
			ws = append(ws, Window{End: end})
		}
		return &ws[i]
	}
	type aggrAt struct {
		end int64
		a   Aggr
	}
	seen := map[aggrAt]bool{}
	for _, a := range []Aggr{Count, Sum, Min, Max} {
		s, err := expand(aggrs, a, nil)
		if err != nil {
			return nil, err
		}
		for _, x := range s {
			w := get(x.t)
			first := !seen[aggrAt{w.End, a}]
			seen[aggrAt{w.End, a}] = true
			switch a {
			case Count:
				w.Count += x.v
			case Sum:
				w.Sum += x.v
			case Min:
				if first || x.v < w.Min {
					w.Min = x.v
				}
			case Max:
				if first || x.v > w.Max {
					w.Max = x.v
				}
			}
		}
	}
	cs, _, err := counterSeries(aggrs, nil)
	if err != nil {
		return nil, err
	}
	for _, x := range cs {
		get(x.t).Counter = x.v
	}
	counts, err := expand(hists, Count, nil)
	if err != nil {
		return nil, err
	}
	for _, x := range counts {
		get(x.t).Count += x.v
	}
	sums, err := expandHistograms(hists, Sum)
	if err != nil {
		return nil, err
	}
	for _, x := range sums {
		w := get(x.t)
		if w.Histograms == nil {
			w.Histograms = x.fh.Copy()
		} else if _, _, _, err := w.Histograms.Add(x.fh); err != nil {
			return nil, fmt.Errorf("window ending %d: %w", w.End, err)
		}
	}
	slices.SortFunc(ws, func(a, b Window) int { return cmp.Compare(a.End, b.End) })
	return ws, nil
}
