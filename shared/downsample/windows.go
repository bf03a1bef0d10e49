package downsample

import (
	"fmt"

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
}

// Windows reads the aggregate chunks of one series back into windows of
// res, in order. A window split between two chunks (which happens one
// resolution up, where chunks follow the input's boundaries) is merged as
// a reader merges it: counts and sums add, min and max keep theirs.
func Windows(chks []chunks.Meta, res int64) ([]Window, error) {
	aggrs := make([]AggrChunk, len(chks))
	for i, c := range chks {
		ac, ok := c.Chunk.(*AggrChunk)
		if !ok {
			return nil, fmt.Errorf("chunk %d is %s, not an aggregate chunk", i, c.Chunk.Encoding())
		}
		aggrs[i] = *ac
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
	return ws, nil
}
