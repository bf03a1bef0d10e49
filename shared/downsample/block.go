// Package downsample writes Thanos' downsampled blocks: for every series
// and every window of the target resolution (5m from raw, 1h from 5m), the
// count, sum, min, max and counter of its samples, each aggregate an XOR
// chunk inside one aggregate chunk (encoding 0xff), and meta.json's
// thanos.downsample.resolution set. Thanos Store, Querier and compactor read
// these blocks as their own.
//
// Thanos' own package (pkg/compact/downsample) does not build beside the
// Prometheus version this module uses (docs/block-engine.md says why), so
// the encoding and the window rules are written here from its source and
// proven against it by make thanos-downsample-check, which builds Thanos
// in a module of its own.
//
// Native histogram series are downsampled as Thanos downsamples them (see
// histogram.go): count, sum and counter, the last two as float histogram
// chunks.
package downsample

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

// Result is what Block wrote.
type Result struct {
	Dir  string
	Meta *blockmeta.Meta
	// RawSamples is the number of input samples read.
	RawSamples uint64
}

// progressEvery is how many series pass between progress lines.
const progressEvery = 100_000

// Block downsamples the block src (whose meta.json is meta) to res and
// writes it to dir/<id>. src must have been opened with NewPool when it is
// itself downsampled. The output keeps the source's labels, range,
// compaction level and sources; only the resolution, the ULID and the
// stats change. On error nothing is left in dir.
func Block(ctx context.Context, logger *slog.Logger, src tsdb.BlockReader, meta *blockmeta.Meta, dir string, id ulid.ULID, res int64) (Result, error) {
	return BlockSeries(ctx, logger, src, meta, dir, id, res, nil)
}

// BlockSeries is Block for the series keep accepts (nil: every series):
// one partition of a block's downsample. A series left out is not read.
func BlockSeries(ctx context.Context, logger *slog.Logger, src tsdb.BlockReader, meta *blockmeta.Meta, dir string, id ulid.ULID, res int64, keep func(labels.Labels) bool) (out Result, err error) {
	from := int64(0)
	if meta.Thanos != nil {
		from = meta.Thanos.Downsample.Resolution
	}
	if res <= from {
		return out, fmt.Errorf("block %s is at resolution %d ms already; %d is not coarser", meta.ULID, from, res)
	}
	outMeta, err := copyMeta(meta)
	if err != nil {
		return out, err
	}
	outMeta.ULID, outMeta.Stats = id, blockmeta.Stats{}
	if outMeta.Thanos == nil {
		outMeta.Thanos = &blockmeta.Thanos{Labels: map[string]string{}}
	}
	outMeta.Thanos.Downsample.Resolution = res
	outMeta.Thanos.Files = nil

	final := filepath.Join(dir, id.String())
	tmp := final + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return out, err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return out, fmt.Errorf("downsample %s: %w", meta.ULID, err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	raw, err := writeSeries(ctx, logger, src, meta.ULID, tmp, from, res, keep, &outMeta.Stats)
	if err != nil {
		return out, fmt.Errorf("downsample %s to %d ms: %w", meta.ULID, res, err)
	}
	if err := outMeta.WriteDir(tmp); err != nil {
		return out, err
	}
	if err := os.RemoveAll(final); err != nil {
		return out, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return out, err
	}
	return Result{Dir: final, Meta: outMeta, RawSamples: raw}, nil
}

// writeSeries writes the downsampled chunks and index of src's series that
// keep accepts into dir, series by series in the source's order (label
// order), and counts them into stats. It returns the number of input samples.
func writeSeries(ctx context.Context, logger *slog.Logger, src tsdb.BlockReader, srcID ulid.ULID, dir string, from, res int64, keep func(labels.Labels) bool, stats *blockmeta.Stats) (raw uint64, err error) {
	ir, err := src.Index()
	if err != nil {
		return 0, fmt.Errorf("open index: %w", err)
	}
	defer ir.Close()
	cr, err := src.Chunks()
	if err != nil {
		return 0, fmt.Errorf("open chunks: %w", err)
	}
	defer cr.Close()
	cw, err := chunks.NewWriter(filepath.Join(dir, blockmeta.ChunksDirname))
	if err != nil {
		return 0, err
	}
	iw, err := index.NewWriter(ctx, filepath.Join(dir, blockmeta.IndexFilename))
	if err != nil {
		_ = cw.Close()
		return 0, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = cw.Close()
			_ = iw.Close()
		}
	}()
	syms := ir.Symbols()
	for syms.Next() {
		if err := iw.AddSymbol(syms.At()); err != nil {
			return 0, err
		}
	}
	if err := syms.Err(); err != nil {
		return 0, fmt.Errorf("symbols: %w", err)
	}
	k, v := index.AllPostingsKey()
	p, err := ir.Postings(ctx, k, v)
	if err != nil {
		return 0, fmt.Errorf("postings: %w", err)
	}
	var (
		lb       labels.ScratchBuilder
		in, out  []chunks.Meta
		samples  []sample
		hsamples []hsample
		ref      storage.SeriesRef
		n        int
		started  = time.Now()
	)
	for p.Next() {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return raw, err
			}
		}
		n++
		if err := ir.Series(p.At(), &lb, &in); err != nil {
			return raw, fmt.Errorf("series %d: %w", p.At(), err)
		}
		lset := lb.Labels()
		if keep != nil && !keep(lset) {
			continue
		}
		for i := range in {
			if i > 0 && in[i-1].MaxTime >= in[i].MinTime {
				return raw, fmt.Errorf("series %s: chunks %d and %d overlap", lset, i-1, i)
			}
			c, _, err := cr.ChunkOrIterable(in[i])
			if err != nil {
				return raw, fmt.Errorf("series %s: chunk %d: %w", lset, in[i].Ref, err)
			}
			in[i].Chunk = c
		}
		if from == 0 {
			var n int
			if out, n, err = fromRawChunks(in, res, &samples, &hsamples); err != nil {
				return raw, fmt.Errorf("series %s: %w", lset, err)
			}
			raw += uint64(n)
		} else {
			for _, c := range in {
				raw += uint64(c.Chunk.NumSamples())
			}
			if out, err = fromAggregates(in, from, res); err != nil {
				return raw, fmt.Errorf("series %s: %w", lset, err)
			}
		}
		if len(out) == 0 {
			continue // every sample was a stale marker
		}
		if err := cw.WriteChunks(out...); err != nil {
			return raw, err
		}
		if err := iw.AddSeries(ref, lset, out...); err != nil {
			return raw, fmt.Errorf("series %s: %w", lset, err)
		}
		ref++
		stats.NumSeries++
		stats.NumChunks += uint64(len(out))
		for _, c := range out {
			w := uint64(c.Chunk.NumSamples())
			stats.NumSamples += w
			if isHistogramAggr(*c.Chunk.(*AggrChunk)) {
				stats.NumHistogramSamples += w
			} else {
				stats.NumFloatSamples += w
			}
		}
		if n%progressEvery == 0 {
			logger.InfoContext(ctx, "downsampling", "block", srcID.String(), "series", n, "rawSamples", raw, "took", time.Since(started).String())
		}
	}
	if err := p.Err(); err != nil {
		return raw, fmt.Errorf("postings: %w", err)
	}
	closed = true
	if err := cw.Close(); err != nil {
		_ = iw.Close()
		return raw, err
	}
	return raw, iw.Close()
}

// fromRawChunks downsamples one raw series to res, each run of float
// chunks and each run of histogram chunks on its own (as Thanos cuts a
// series that changes kind). It returns the output chunks and the number of
// raw samples read (staleness markers too); fbuf and hbuf are scratch.
func fromRawChunks(in []chunks.Meta, res int64, fbuf *[]sample, hbuf *[]hsample) (out []chunks.Meta, n int, err error) {
	flush := func(hist bool) error {
		if hist {
			c, err := histogramsFromRaw(*hbuf, res)
			if err != nil {
				return err
			}
			out = append(out, c...)
			*hbuf = (*hbuf)[:0]
			return nil
		}
		out = append(out, fromRaw(*fbuf, res)...)
		*fbuf = (*fbuf)[:0]
		return nil
	}
	*fbuf, *hbuf = (*fbuf)[:0], (*hbuf)[:0]
	prev := false
	for i, c := range in {
		hist := isHistogramEncoding(c.Chunk.Encoding())
		if i > 0 && hist != prev {
			if err := flush(prev); err != nil {
				return nil, n, err
			}
		}
		prev = hist
		n += c.Chunk.NumSamples()
		if hist {
			*hbuf, err = histograms(c.Chunk, *hbuf)
		} else {
			*fbuf, err = floats(c.Chunk, *fbuf)
		}
		if err != nil {
			return nil, n, fmt.Errorf("chunk %d: %w", c.Ref, err)
		}
	}
	if err := flush(prev); err != nil {
		return nil, n, err
	}
	return out, n, nil
}

// floats appends the float samples of a raw chunk to dst, leaving out
// stale markers and any sample earlier than the one before it in the chunk
// (as Thanos reads them).
func floats(c chunkenc.Chunk, dst []sample) ([]sample, error) {
	it := c.Iterator(nil)
	var lastT int64
	for {
		switch it.Next() {
		case chunkenc.ValNone:
			return dst, it.Err()
		case chunkenc.ValFloat:
			t, v := it.At()
			if value.IsStaleNaN(v) || t < lastT {
				continue
			}
			dst = append(dst, sample{t, v})
			lastT = t
		default:
			return dst, fmt.Errorf("a histogram sample in a %s chunk", c.Encoding())
		}
	}
}

// copyMeta is a deep copy of m, unknown members included.
func copyMeta(m *blockmeta.Meta) (*blockmeta.Meta, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var c blockmeta.Meta
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}
