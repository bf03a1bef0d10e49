package records_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// countingDB counts the transactions a store sends.
type countingDB struct {
	records.DynamoDB
	transactions atomic.Int64
}

func (c *countingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.transactions.Add(1)
	return c.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// TestWritesTogetherCommitWhatHolds: the cleaner retires a version's
// sources, and the sweep starts the deletion of every due block, in one
// request where they took one per block. Each block's write keeps its own
// condition: when a rival moved one block after the writer read it, that
// block's write is refused and every other block's commits, as if each had
// been sent alone; and more blocks than one DynamoDB transaction holds
// (100 items) take as many requests as they need.
func TestWritesTogetherCommitWhatHolds(t *testing.T) {
	writes := []struct {
		name string
		// prepare brings the blocks to where the write expects them, and
		// returns them as read.
		prepare func(w *world, ids []string) []records.Block
		// rival moves one block after the writer read it.
		rival func(w *world, b records.Block)
		write func(w *world, store *records.Store, bs []records.Block) ([]int64, []error)
		want  protocol.BlockState
	}{
		{
			name: "retire a version's sources",
			prepare: func(w *world, ids []string) []records.Block {
				return w.claimedBlocks(ids)
			},
			rival: func(w *world, b records.Block) {
				if _, err := w.store.Retire(w.ctx, b.ClaimedBy, b, w.now, w.now); err != nil {
					w.t.Fatal(err)
				}
			},
			write: func(w *world, store *records.Store, bs []records.Block) ([]int64, []error) {
				return store.RetireAll(w.ctx, bs[0].ClaimedBy, bs, w.now, w.now)
			},
			want: protocol.BlockRetiring,
		},
		{
			name: "start the deletion of marked blocks",
			prepare: func(w *world, ids []string) []records.Block {
				var out []records.Block
				for _, b := range w.claimedBlocks(ids) {
					gen, err := w.store.Retire(w.ctx, b.ClaimedBy, b, w.now, w.now)
					if err != nil {
						w.t.Fatal(err)
					}
					if err := w.store.RecordMark(w.ctx, "acme", b.ID, gen, "mark-"+b.ID, "", w.now, w.now, w.now); err != nil {
						w.t.Fatal(err)
					}
					cur, _, err := w.store.GetBlock(w.ctx, "acme", b.ID)
					if err != nil {
						w.t.Fatal(err)
					}
					out = append(out, cur)
				}
				return out
			},
			rival: func(w *world, b records.Block) {
				if _, err := w.store.StartDelete(w.ctx, b, []planning.GroupKey{g12}, w.now); err != nil {
					w.t.Fatal(err)
				}
			},
			write: func(w *world, store *records.Store, bs []records.Block) ([]int64, []error) {
				ds := make([]records.DeletionStart, len(bs))
				for i, b := range bs {
					ds[i] = records.DeletionStart{Block: b, Ranges: []planning.GroupKey{g12}}
				}
				return store.StartDeleteAll(w.ctx, ds, w.now)
			},
			want: protocol.BlockDeleted,
		},
	}
	cases := []struct {
		name   string
		blocks int
		rival  int // index of the block a rival moves; -1: none
		// twice is the index of a block the write is given a second time
		// (the sweep's two agenda entries of one block, which a crash
		// between their put and delete leaves); -1: none. DynamoDB refuses
		// a transaction that names an item twice: the second goes alone,
		// after the first, and loses its condition.
		twice int
		// requests is how many transactions the write takes.
		requests int64
	}{
		{name: "every condition holds", blocks: 5, rival: -1, twice: -1, requests: 1},
		{name: "a rival moved one block", blocks: 5, rival: 2, twice: -1, requests: 1 + 5},
		{name: "one block twice", blocks: 3, rival: -1, twice: 1, requests: 2},
		{name: "more than one transaction holds", blocks: 60, rival: -1, twice: -1, requests: 2},
	}
	for _, wr := range writes {
		for _, tc := range cases {
			t.Run(wr.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				ids := make([]string, tc.blocks)
				for i := range ids {
					ids[i] = fmt.Sprintf("B%02d", i)
				}
				read := wr.prepare(w, ids)
				if tc.rival >= 0 {
					wr.rival(w, read[tc.rival])
				}
				given := read
				if tc.twice >= 0 {
					given = append(given[:len(given):len(given)], read[tc.twice])
				}
				refused := &awslimits.Refusals{}
				db := &countingDB{DynamoDB: awslimits.DynamoDB{DynamoDBAPI: w.db, Refused: refused}}
				store := records.NewStore(db, w.table, nil)
				gens, errs := wr.write(w, store, given)
				if n := refused.N(); n > 0 {
					t.Errorf("the write made %d request(s) AWS would refuse", n)
				}
				if n := db.transactions.Load(); n != tc.requests {
					t.Errorf("%d transactions for %d blocks, want %d", n, len(given), tc.requests)
				}
				for i, b := range given {
					cur, _, err := w.store.GetBlock(w.ctx, "acme", b.ID)
					if err != nil {
						t.Fatal(err)
					}
					if i == tc.rival || i == len(read) {
						if !records.IsConditionLost(errs[i]) {
							t.Errorf("%s (#%d), moved since it was read: %v, want a lost condition", b.ID, i, errs[i])
						}
						continue
					}
					if errs[i] != nil {
						t.Errorf("%s: %v", b.ID, errs[i])
						continue
					}
					if cur.State != wr.want || cur.Gen != gens[i] {
						t.Errorf("%s is %s at gen %d, want %s at gen %d", b.ID, cur.State, cur.Gen, wr.want, gens[i])
					}
				}
			})
		}
	}
}

// claimedBlocks registers blocks ids LIVE, claims them for a planned
// version of g12, and returns them as read after the claim.
func (w *world) claimedBlocks(ids []string) []records.Block {
	w.t.Helper()
	var live []records.Block
	for _, id := range ids {
		live = append(live, w.block(id, protocol.BlockLive))
	}
	w.planned(records.Group{}, live, 1)
	bs, err := w.store.GetBlocks(w.ctx, "acme", ids)
	if err != nil {
		w.t.Fatal(err)
	}
	return bs
}
