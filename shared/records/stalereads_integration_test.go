package records_test

import (
	"testing"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// TestWritesOnAStaleReadLose: a write whose writer read the block before a
// change that leaves its state and gen as they were (or, for retention,
// before a downsample that never came) is refused by the one requirement
// that names what is missing: nothing else in its condition can tell.
// `make mutants` removes each of those requirements (claim-marked,
// forget-any-mark, expire-before-downsample).
func TestWritesOnAStaleReadLose(t *testing.T) {
	tests := []struct {
		name string
		// retiring starts the block RETIRING (retention retired it), not
		// LIVE.
		retiring bool
		// change writes the block after write's writer read it, leaving
		// its state and gen.
		change func(w *world, b records.Block)
		write  func(w *world, b records.Block) error
	}{
		{
			name:     "recording a deletion mark over another one the record names",
			retiring: true,
			change: func(w *world, b records.Block) {
				if err := w.store.RecordMark(w.ctx, "acme", b.ID, b.Gen, "ours", "", w.now, w.now, w.now); err != nil {
					w.t.Fatal(err)
				}
			},
			write: func(w *world, b records.Block) error {
				return w.store.RecordMark(w.ctx, "acme", b.ID, b.Gen, "theirs", "", w.now, w.now, w.now)
			},
		},
		{
			name: "a claim after another tool's no-compact mark was noted",
			change: func(w *world, b records.Block) {
				if err := w.store.NoteForeignMark(w.ctx, b, protocol.BlockLive, blockkey.NoCompactMarkFile, "theirs", w.now, w.now); err != nil {
					w.t.Fatal(err)
				}
			},
			write: func(w *world, b records.Block) error {
				return w.store.Claim(w.ctx, w.claiming(g12), []records.Block{b}, w.now)
			},
		},
		{
			name: "forgetting a no-compact mark the record no longer names",
			change: func(w *world, b records.Block) {
				if err := w.store.NoteForeignMark(w.ctx, b, protocol.BlockLive, blockkey.NoCompactMarkFile, "theirs", w.now, w.now); err != nil {
					w.t.Fatal(err)
				}
			},
			write: func(w *world, b records.Block) error {
				return w.store.ForgetNoCompactMark(w.ctx, "acme", b.ID, protocol.BlockLive, b.Gen, "ours", w.now)
			},
		},
		{
			name:   "retention of a raw block whose downsample is not recorded",
			change: func(*world, records.Block) {},
			write: func(w *world, b records.Block) error {
				_, err := w.store.ExpireDownsampled(w.ctx, b, w.now, w.now)
				return err
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			b := w.block("B", protocol.BlockLive)
			if tc.retiring {
				if _, err := w.store.Expire(w.ctx, b, w.now, w.now); err != nil {
					t.Fatal(err)
				}
				b, _, _ = w.store.GetBlock(w.ctx, "acme", "B")
			}
			tc.change(w, b)
			after, _, err := w.store.GetBlock(w.ctx, "acme", "B")
			if err != nil || after.State != b.State || after.Gen != b.Gen {
				t.Fatalf("the change moved the block to %s at gen %d (%v): the case tests nothing", after.State, after.Gen, err)
			}
			if err := tc.write(w, b); !records.IsConditionLost(err) {
				t.Fatalf("the write on the stale read: %v, want a lost condition", err)
			}
		})
	}
}
