package records

import (
	"context"
	"strings"

	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/protocol"
)

// named is one transaction of several committed together, and the name
// its errors carry.
type named struct {
	op string
	x  tx
}

// commitTogether commits independent transactions, each whole, in as few
// DynamoDB transactions as its limits allow (100 items, 4 MB, no item
// twice), and returns one error per transaction (nil: committed). It
// changes how many requests they take, never what each one asks: every
// item keeps its condition, and a combined transaction commits only if
// every condition in it holds. When one does not, the combined
// transaction changes nothing, and each of its transactions is committed
// alone, as if it had never been combined: the ones whose conditions hold
// commit, the others get their own *ConditionLostError. A write that
// loses a condition is the rare case (a rival got there first), so most
// calls cost one request where they cost one per transaction.
func (st *Store) commitTogether(ctx context.Context, txs []named) []error {
	errs := make([]error, len(txs))
	var (
		batch []int
		x     tx
		size  int
		keys  = map[string]bool{}
	)
	flush := func() {
		switch len(batch) {
		case 0:
		case 1:
			errs[batch[0]] = st.commit(ctx, txs[batch[0]].op, txs[batch[0]].x)
		default:
			ops := make([]string, len(batch))
			for i, j := range batch {
				ops[i] = txs[j].op
			}
			// Not st.commit: a combined transaction's lost condition is
			// counted once, by the transaction that loses it alone.
			err := st.transact(protocol.WithChanges(ctx, x.changes), strings.Join(ops, "; "), x.items)
			for _, j := range batch {
				switch {
				case err == nil:
				case IsConditionLost(err):
					errs[j] = st.commit(ctx, txs[j].op, txs[j].x)
				default:
					errs[j] = err
				}
			}
		}
		batch, x, size, keys = nil, tx{}, 0, map[string]bool{}
	}
	for i, t := range txs {
		n := 0
		clash := false
		for _, it := range t.x.items {
			n += transactItemSize(it)
			clash = clash || keys[itemName(transactKey(it))]
		}
		if len(batch) > 0 && (clash || len(x.items)+len(t.x.items) > awslimits.MaxTransactItems || size+n > awslimits.MaxTransactBytes*3/4) {
			flush()
		}
		batch = append(batch, i)
		x.items = append(x.items, t.x.items...)
		x.changes = append(x.changes, t.x.changes...)
		size += n
		for _, it := range t.x.items {
			keys[itemName(transactKey(it))] = true
		}
	}
	flush()
	return errs
}

// blocksTogether commits one write of each of blocks bs (build(i): the
// write of bs[i], a transition that moves the block to its next gen)
// together, and returns per block the gen the write moves it to and its
// error. A write that cannot be built fails them all, none sent.
func (st *Store) blocksTogether(ctx context.Context, bs []Block, build func(i int) (named, error)) ([]int64, []error) {
	gens := make([]int64, len(bs))
	txs := make([]named, len(bs))
	for i, b := range bs {
		t, err := build(i)
		if err != nil {
			errs := make([]error, len(bs))
			for j := range errs {
				errs[j] = err
			}
			return gens, errs
		}
		gens[i], txs[i] = b.Gen+1, t
	}
	return gens, st.commitTogether(ctx, txs)
}
