package compaction

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"
)

// PartitionPopulator is a tsdb.BlockPopulator that writes partition
// Partition of PartitionCount of the union of its source blocks: only the
// series with labels.StableHash(lset) % PartitionCount == Partition, and —
// unless KeepAllSymbols — only the symbols those series use (the default
// populator copies every source's whole symbol table into every output).
//
// Overlapping sources are merged by the compactor's merge function (the
// compacting chunk merger by default: identical samples collapse to one).
// It plugs into tsdb.LeveledCompactor.CompactWithBlockPopulator, and Compact
// drives it with a deterministic writer. It holds no state; one value may
// serve concurrent compactions.
type PartitionPopulator struct {
	Partition, PartitionCount int
	// KeepAllSymbols writes the merged symbol tables of all sources, as
	// tsdb.DefaultBlockPopulator does. False (the default) prunes.
	KeepAllSymbols bool
}

// PopulateBlock implements tsdb.BlockPopulator. blocks must be sorted by
// MinTime (ties in a fixed order) for the output to be deterministic. It
// fills meta.Stats.
func (p PartitionPopulator) PopulateBlock(ctx context.Context, metrics *tsdb.CompactorMetrics, logger *slog.Logger, chunkPool chunkenc.Pool, mergeFunc storage.VerticalChunkSeriesMergeFunc, blocks []tsdb.BlockReader, meta *tsdb.BlockMeta, indexw tsdb.IndexWriter, chunkw tsdb.ChunkWriter, postingsFunc tsdb.IndexReaderPostingsFunc) (err error) {
	n := max(p.PartitionCount, 1)
	if p.Partition < 0 || p.Partition >= n {
		return fmt.Errorf("partition %d out of range [0, %d)", p.Partition, n)
	}
	if len(blocks) == 0 {
		return errors.New("cannot populate block from no readers")
	}
	if postingsFunc == nil {
		postingsFunc = tsdb.AllSortedPostings
	}
	if mergeFunc == nil {
		mergeFunc = storage.NewCompactingChunkSeriesMerger(storage.ChainedSeriesMerge)
	}
	if chunkPool == nil {
		chunkPool = chunkenc.NewPool()
	}
	if metrics != nil {
		metrics.PopulatingBlocks.Set(1)
		defer metrics.PopulatingBlocks.Set(0)
	}
	var closers []io.Closer
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i].Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close: %w", cerr))
			}
		}
	}()

	var (
		sets []storage.ChunkSeriesSet
		syms index.StringIter
	)
	for i, b := range blocks {
		if err := ctx.Err(); err != nil {
			return err
		}
		id := b.Meta().ULID
		indexr, err := b.Index()
		if err != nil {
			return fmt.Errorf("source block %s: open index: %w", id, err)
		}
		closers = append(closers, indexr)
		chunkr, err := b.Chunks()
		if err != nil {
			return fmt.Errorf("source block %s: open chunks: %w", id, err)
		}
		closers = append(closers, chunkr)
		tombsr, err := b.Tombstones()
		if err != nil {
			return fmt.Errorf("source block %s: open tombstones: %w", id, err)
		}
		closers = append(closers, tombsr)
		lr, err := newLabelReader(b, indexr)
		if err != nil {
			return fmt.Errorf("source block %s: %w", id, err)
		}
		closers = append(closers, lr)

		postings := postingsFunc(ctx, indexr)
		if n > 1 || !p.KeepAllSymbols {
			kept, err := lr.filter(ctx, postings, uint64(p.Partition), uint64(n), !p.KeepAllSymbols)
			if err != nil {
				return fmt.Errorf("source block %s: %w", id, err)
			}
			if n > 1 {
				postings = index.NewListPostings(kept)
			} else {
				// The pass only collected symbols: read the
				// postings again rather than hold every ref.
				postings = postingsFunc(ctx, indexr)
			}
		}
		// Blocks are half-open [min, max): exclude samples at meta.MaxTime.
		sets = append(sets, tsdb.NewBlockChunkSeriesSet(id, lr.IndexReader(), chunkr, tombsr, postings, meta.MinTime, meta.MaxTime-1, false))
		bs := lr.usedSymbols()
		if p.KeepAllSymbols {
			bs = indexr.Symbols()
		}
		if i == 0 {
			syms = bs
		} else {
			syms = tsdb.NewMergedStringIter(syms, bs)
		}
	}

	// Sorted and deduplicated across sources by the merge.
	for syms.Next() {
		if err := indexw.AddSymbol(syms.At()); err != nil {
			return fmt.Errorf("add symbol: %w", err)
		}
	}
	if err := syms.Err(); err != nil {
		return fmt.Errorf("read symbols: %w", err)
	}

	set := sets[0]
	if len(sets) > 1 {
		set = storage.NewMergeChunkSeriesSet(sets, 0, mergeFunc)
	}
	var (
		ref  storage.SeriesRef
		chks []chunks.Meta
		it   chunks.Iterator
	)
	for set.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := set.At()
		it = s.Iterator(it)
		chks = chks[:0]
		for it.Next() {
			chks = append(chks, it.At())
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read chunks of %s: %w", s.Labels(), err)
		}
		if len(chks) == 0 { // every chunk deleted by tombstones
			continue
		}
		if err := chunkw.WriteChunks(chks...); err != nil {
			return fmt.Errorf("write chunks: %w", err)
		}
		if err := indexw.AddSeries(ref, s.Labels(), chks...); err != nil {
			return fmt.Errorf("add series: %w", err)
		}
		meta.Stats.NumSeries++
		meta.Stats.NumChunks += uint64(len(chks))
		for _, c := range chks {
			ns := uint64(c.Chunk.NumSamples())
			meta.Stats.NumSamples += ns
			switch c.Chunk.Encoding() {
			case chunkenc.EncHistogram, chunkenc.EncFloatHistogram, chunkenc.EncHistogramST, chunkenc.EncFloatHistogramST:
				meta.Stats.NumHistogramSamples += ns
			default:
				meta.Stats.NumFloatSamples += ns
			}
			if err := chunkPool.Put(c.Chunk); err != nil {
				return fmt.Errorf("put chunk: %w", err)
			}
		}
		ref++
	}
	if err := set.Err(); err != nil {
		return fmt.Errorf("merge sources: %w", err)
	}
	if logger != nil {
		logger.Debug("populated partition", "partition", p.Partition, "partitions", n, "series", meta.Stats.NumSeries)
	}
	return nil
}
