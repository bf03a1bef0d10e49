package compaction

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"
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

// diagnose reads every series and chunk of each opened source, one at a
// time, to find the one a failed merge could not read: the merge's error
// does not say which block a corrupt chunk came from. It returns a
// *SourceError for the first source that fails, or nil when every source
// reads (the failure was elsewhere: the output, the disk). It only runs
// after a failure, so reading everything again costs nothing on the
// happy path.
func diagnose(ctx context.Context, readers []tsdb.BlockReader) error {
	for _, r := range readers {
		if err := readAll(ctx, r); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return &SourceError{Block: r.Meta().ULID, Err: err}
		}
	}
	return nil
}

// readAll iterates every series of a block and every sample of its chunks.
func readAll(ctx context.Context, r tsdb.BlockReader) error {
	ir, err := r.Index()
	if err != nil {
		return fmt.Errorf("open index: %w", err)
	}
	defer ir.Close()
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
