package compaction

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// SourceError is a failure that one source block is to blame for: its
// files are missing or of the wrong size, its index or chunks cannot be
// read. The pipeline quarantines that block (and compacts its neighbours
// without it) once the failure repeats.
type SourceError struct {
	Block ulid.ULID
	Err   error
}

func (e *SourceError) Error() string { return fmt.Sprintf("source block %s: %v", e.Block, e.Err) }

func (e *SourceError) Unwrap() error { return e.Err }

// BlamedSource returns the source block err blames, if any.
func BlamedSource(err error) (ulid.ULID, bool) {
	var se *SourceError
	if errors.As(err, &se) {
		return se.Block, true
	}
	return ulid.ULID{}, false
}

// Blame returns err as the *SourceError of the first of readers that
// cannot be read, when err blames no source already and one of them is
// to blame; otherwise err as it is. A job reading sources outside a merge
// (a downsample reads its one block series by series) learns from it
// whether a failure was its source's: an index that cannot be decoded
// fails the read with no block named. readers are streamed sources,
// whose chunks blame their block themselves, so only their indexes are
// read again.
func Blame(ctx context.Context, err error, readers ...tsdb.BlockReader) error {
	if _, blamed := BlamedSource(err); blamed || ctx.Err() != nil {
		return err
	}
	if blame := diagnose(ctx, readers, false); blame != nil {
		return fmt.Errorf("%w (failed: %v)", blame, err)
	}
	return err
}

// diagnose reads every series (and, withChunks, every chunk) of each
// opened source, one at a time, to find the one a failed merge could not
// read: the merge's error does not say which block a corrupt series or
// chunk came from. It returns a *SourceError for the first source that
// fails, or nil when every source reads (the failure was elsewhere: the
// output, the disk). It only runs after a failure, so reading everything
// again costs nothing on the happy path.
func diagnose(ctx context.Context, readers []tsdb.BlockReader, withChunks bool) error {
	for _, r := range readers {
		if err := readAll(ctx, r, withChunks); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return &SourceError{Block: r.Meta().ULID, Err: err}
		}
	}
	return nil
}

// readAll iterates every series of a block and, withChunks, every sample
// of its chunks.
func readAll(ctx context.Context, r tsdb.BlockReader, withChunks bool) error {
	ir, err := r.Index()
	if err != nil {
		return fmt.Errorf("open index: %w", err)
	}
	defer ir.Close()
	if !withChunks {
		return readSeries(ctx, ir)
	}
	cr, err := r.Chunks()
	if err != nil {
		return fmt.Errorf("open chunks: %w", err)
	}
	defer cr.Close()
	tr, err := r.Tombstones()
	if err != nil {
		return fmt.Errorf("open tombstones: %w", err)
	}
	defer tr.Close()
	m := r.Meta()
	set := tsdb.NewBlockChunkSeriesSet(m.ULID, ir, cr, tr, tsdb.AllSortedPostings(ctx, ir), m.MinTime, m.MaxTime-1, false)
	var it chunks.Iterator
	var sit chunkenc.Iterator
	for set.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		it = set.At().Iterator(it)
		for it.Next() {
			sit = it.At().Chunk.Iterator(sit)
			for sit.Next() != chunkenc.ValNone {
			}
			if err := sit.Err(); err != nil {
				return fmt.Errorf("series %s: %w", set.At().Labels(), err)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("series %s: %w", set.At().Labels(), err)
		}
	}
	return set.Err()
}

// readSeries reads every series entry of an index (labels and chunk
// metas, CRC-checked), not the chunks.
func readSeries(ctx context.Context, ir tsdb.IndexReader) error {
	p := tsdb.AllSortedPostings(ctx, ir)
	var (
		b    labels.ScratchBuilder
		chks []chunks.Meta
	)
	for p.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := ir.Series(p.At(), &b, &chks); err != nil {
			return fmt.Errorf("series %d: %w", p.At(), err)
		}
	}
	return p.Err()
}
