package equiv

import (
	"context"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/stream"
)

// CheckDownsampled holds downsampled blocks to raw blocks whose downsample
// is published: for every series of the raw blocks, and every window of the
// resolution of each downsampled stream of theirs, the count, sum, min and
// max the downsampled blocks give together must be what the raw blocks'
// float samples give, and for native histograms the number of histograms
// and their sum (replicas' duplicate samples counted once; staleness
// markers are no samples). A window missing from the downsampled blocks,
// one they hold twice (a replaced downsample still live beside its
// replacement), or an aggregate that differs is an error naming it. Raw
// blocks are read with the standard pool, downsampled ones with
// downsample.NewPool.
//
// Only the raw blocks given are compared: a raw block whose downsample is
// still to come (waiting for a block another version holds, or for the
// next level to merge a late block) is left out by the caller, and so are
// the windows only it would fill.
func CheckDownsampled(ctx context.Context, raw, down, replicaLabels []string) error {
	type key struct {
		stream string // the raw stream's ID
		series string
	}
	res := map[string]int64{} // raw stream ID → the resolution its downsampled blocks are at (one each)
	got := map[key]map[int64]downsample.Window{}
	for _, dir := range down {
		m, err := blockmeta.ReadDir(dir)
		if err != nil {
			return err
		}
		st := stream.Of(m, replicaLabels)
		rawID := stream.Stream{Labels: st.Labels}.ID() + fmt.Sprintf("@%d", st.Resolution)
		res[rawID] = st.Resolution
		err = eachSeries(ctx, dir, downsample.NewPool(), func(lset labels.Labels, chks []chunks.Meta) error {
			ws, err := downsample.Windows(chks, st.Resolution)
			if err != nil {
				return fmt.Errorf("%s: series %s: %w", dir, lset, err)
			}
			k := key{rawID, lset.String()}
			if got[k] == nil {
				got[k] = map[int64]downsample.Window{}
			}
			for _, w := range ws {
				if _, dup := got[k][w.End]; dup {
					return fmt.Errorf("stream %s: series %s: the window ending %d is in two downsampled blocks", st, lset, w.End)
				}
				got[k][w.End] = w
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	samples := map[key]map[int64]float64{}                      // raw samples by timestamp (replicas' once)
	histograms := map[key]map[int64]*histogram.FloatHistogram{} // likewise, native histograms
	for _, dir := range raw {
		m, err := blockmeta.ReadDir(dir)
		if err != nil {
			return err
		}
		st := stream.Of(m, replicaLabels)
		if st.Resolution != 0 {
			continue
		}
		err = eachSeries(ctx, dir, nil, func(lset labels.Labels, chks []chunks.Meta) error {
			var it chunkenc.Iterator
			for _, c := range chks {
				it = c.Chunk.Iterator(it)
				for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
					var (
						t  int64
						v  float64
						fh *histogram.FloatHistogram
					)
					if vt == chunkenc.ValFloat {
						t, v = it.At()
					} else {
						t, fh = it.AtFloatHistogram(nil)
						v = fh.Sum
					}
					if value.IsStaleNaN(v) {
						continue // a staleness marker is no sample to downsample
					}
					for r := range res {
						if r[:stream.IDLength] != st.ID() {
							continue
						}
						k := key{r, lset.String()}
						if fh != nil {
							if histograms[k] == nil {
								histograms[k] = map[int64]*histogram.FloatHistogram{}
							}
							histograms[k][t] = fh
							continue
						}
						if samples[k] == nil {
							samples[k] = map[int64]float64{}
						}
						samples[k][t] = v
					}
				}
				if err := it.Err(); err != nil {
					return fmt.Errorf("%s: series %s: %w", dir, lset, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	want := map[key]map[int64]downsample.Window{}
	// window folds the sample at t into its window of series k.
	window := func(k key, t int64, fold func(w *downsample.Window, first bool) error) error {
		if want[k] == nil {
			want[k] = map[int64]downsample.Window{}
		}
		r := res[k.stream]
		end := t - t%r + r - 1
		w, ok := want[k][end]
		w.End = end
		w.Count++
		if err := fold(&w, !ok); err != nil {
			return fmt.Errorf("stream %s: series %s: the raw histograms of the window ending %d do not add up: %w", k.stream, k.series, end, err)
		}
		want[k][end] = w
		return nil
	}
	for k, ss := range samples {
		for t, v := range ss {
			_ = window(k, t, func(w *downsample.Window, first bool) error {
				if first {
					w.Min, w.Max = v, v
				}
				w.Sum += v
				w.Min, w.Max = math.Min(w.Min, v), math.Max(w.Max, v)
				return nil
			})
		}
	}
	for k, hs := range histograms {
		for t, fh := range hs {
			err := window(k, t, func(w *downsample.Window, _ bool) error {
				if w.Histograms == nil {
					w.Histograms = fh.Copy()
					return nil
				}
				_, _, _, err := w.Histograms.Add(fh)
				return err
			})
			if err != nil {
				return err
			}
		}
	}
	for k, ws := range want {
		for end, w := range ws {
			g, ok := got[k][end]
			switch {
			case !ok:
				return fmt.Errorf("stream %s: series %s: the window ending %d (%v raw samples) is in no downsampled block", k.stream, k.series, end, w.Count)
			case w.Histograms != nil:
				if g.Count != w.Count || g.Histograms == nil || !near(g.Histograms.Count, w.Histograms.Count) || !near(g.Histograms.Sum, w.Histograms.Sum) {
					return fmt.Errorf("stream %s: series %s: the window ending %d holds %v histograms summing to %v; the raw histograms give %v summing to %v",
						k.stream, k.series, end, g.Count, g.Histograms, w.Count, w.Histograms)
				}
			case g.Count != w.Count || !near(g.Sum, w.Sum) || g.Min != w.Min || g.Max != w.Max:
				return fmt.Errorf("stream %s: series %s: the window ending %d holds count %v sum %v min %v max %v; the raw samples give %v, %v, %v, %v",
					k.stream, k.series, end, g.Count, g.Sum, g.Min, g.Max, w.Count, w.Sum, w.Min, w.Max)
			}
		}
	}
	return nil
}

func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b))
}

// eachSeries calls fn with every series of the block in dir and its
// chunks, read with pool (nil: Prometheus' own).
func eachSeries(ctx context.Context, dir string, pool chunkenc.Pool, fn func(labels.Labels, []chunks.Meta) error) error {
	b, err := tsdb.OpenBlock(nil, dir, pool, nil)
	if err != nil {
		return fmt.Errorf("open block %s: %w", dir, err)
	}
	defer b.Close()
	ir, err := b.Index()
	if err != nil {
		return err
	}
	defer ir.Close()
	cr, err := b.Chunks()
	if err != nil {
		return err
	}
	defer cr.Close()
	k, v := index.AllPostingsKey()
	p, err := ir.Postings(ctx, k, v)
	if err != nil {
		return err
	}
	var builder labels.ScratchBuilder
	var metas []chunks.Meta
	for p.Next() {
		if err := ir.Series(p.At(), &builder, &metas); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		lset := builder.Labels()
		chks := make([]chunks.Meta, 0, len(metas))
		for _, m := range metas {
			c, _, err := cr.ChunkOrIterable(m)
			if err != nil {
				return fmt.Errorf("%s: series %s: %w", dir, lset, err)
			}
			m.Chunk = c
			chks = append(chks, m)
		}
		if err := fn(lset, chks); err != nil {
			return err
		}
	}
	return p.Err()
}
