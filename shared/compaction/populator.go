package compaction

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/prometheus/model/labels"
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
	if metrics != nil {
		metrics.PopulatingBlocks.Set(1)
		defer metrics.PopulatingBlocks.Set(0)
	}
	out := &partitionWriter{Partition: p.Partition, Meta: meta, Index: indexw, Chunks: chunkw}
	return populate(ctx, logger, chunkPool, mergeFunc, blocks, meta.MinTime, meta.MaxTime, n, p.KeepAllSymbols, []*partitionWriter{out}, postingsFunc)
}

// partitionWriter is one partition populate writes: its writers, and the
// meta whose Stats it fills.
type partitionWriter struct {
	Partition int
	Meta      *tsdb.BlockMeta
	Index     tsdb.IndexWriter
	Chunks    tsdb.ChunkWriter
	ref       storage.SeriesRef
}

// populate writes partitions outs[i].Partition of n of the union of
// blocks over [minT, maxT), each to its own writers, in one pass over the
// sources: each source's series entries are read once to find which of
// the wanted partitions each series falls in (and which symbols each
// partition uses), and each chunk is read once and written to its
// partition. With one partition that is PartitionPopulator's job; with
// all n, a split of the sources into n blocks at the cost of reading them
// once.
func populate(ctx context.Context, logger *slog.Logger, chunkPool chunkenc.Pool, mergeFunc storage.VerticalChunkSeriesMergeFunc, blocks []tsdb.BlockReader, minT, maxT int64, n int, keepAll bool, outs []*partitionWriter, postingsFunc tsdb.IndexReaderPostingsFunc) (err error) {
	if len(blocks) == 0 {
		return errors.New("cannot populate block from no readers")
	}
	if len(outs) == 0 {
		return errors.New("no partition to populate")
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
	var (
		wanted uint64
		byPart = make([]*partitionWriter, n)
	)
	for _, o := range outs {
		if o.Partition < 0 || o.Partition >= n || byPart[o.Partition] != nil {
			return fmt.Errorf("partition %d out of range [0, %d) or given twice", o.Partition, n)
		}
		byPart[o.Partition] = o
		wanted |= 1 << o.Partition
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
		syms = make([]index.StringIter, len(outs))
	)
	for _, b := range blocks {
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
		if n > 1 || !keepAll {
			kept, err := lr.filter(ctx, postings, wanted, uint64(n), !keepAll)
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
		// Blocks are half-open [min, max): exclude samples at maxT.
		sets = append(sets, tsdb.NewBlockChunkSeriesSet(id, lr.IndexReader(), chunkr, tombsr, postings, minT, maxT-1, false))
		for i, o := range outs {
			bs := lr.usedSymbols(o.Partition)
			if keepAll {
				bs = indexr.Symbols()
			}
			if syms[i] == nil {
				syms[i] = bs
			} else {
				syms[i] = tsdb.NewMergedStringIter(syms[i], bs)
			}
		}
	}

	// Sorted and deduplicated across sources by the merge.
	for i, o := range outs {
		for syms[i].Next() {
			if err := o.Index.AddSymbol(syms[i].At()); err != nil {
				return fmt.Errorf("add symbol: %w", err)
			}
		}
		if err := syms[i].Err(); err != nil {
			return fmt.Errorf("read symbols: %w", err)
		}
	}

	set := sets[0]
	if len(sets) > 1 {
		set = storage.NewMergeChunkSeriesSet(sets, 0, mergeFunc)
	}
	var (
		chks []chunks.Meta
		it   chunks.Iterator
	)
	for set.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := set.At()
		o := outs[0]
		if len(outs) > 1 {
			// Every series kept hashes into a wanted partition.
			o = byPart[labels.StableHash(s.Labels())%uint64(n)]
		}
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
		if err := o.Chunks.WriteChunks(chks...); err != nil {
			return fmt.Errorf("write chunks: %w", err)
		}
		if err := o.Index.AddSeries(o.ref, s.Labels(), chks...); err != nil {
			return fmt.Errorf("add series: %w", err)
		}
		st := &o.Meta.Stats
		st.NumSeries++
		st.NumChunks += uint64(len(chks))
		for _, c := range chks {
			ns := uint64(c.Chunk.NumSamples())
			st.NumSamples += ns
			switch c.Chunk.Encoding() {
			case chunkenc.EncHistogram, chunkenc.EncFloatHistogram, chunkenc.EncHistogramST, chunkenc.EncFloatHistogramST:
				st.NumHistogramSamples += ns
			default:
				st.NumFloatSamples += ns
			}
			if err := chunkPool.Put(c.Chunk); err != nil {
				return fmt.Errorf("put chunk: %w", err)
			}
		}
		o.ref++
	}
	if err := set.Err(); err != nil {
		return fmt.Errorf("merge sources: %w", err)
	}
	if logger != nil {
		for _, o := range outs {
			logger.Debug("populated partition", "partition", o.Partition, "partitions", n, "series", o.Meta.Stats.NumSeries)
		}
	}
	return nil
}
