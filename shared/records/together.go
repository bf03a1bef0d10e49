package records

import (
	"context"
	"reflect"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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
// twice: an unconditional put of the same item with the same attributes
// is made once), and returns one error per transaction (nil: committed). It
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
		// puts are the batch's unconditional puts, by item: another
		// transaction's identical put (the tenant and stream records every
		// registration of a tenant's stream writes) rides on the first.
		puts = map[string]types.TransactWriteItem{}
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
		batch, x, size, keys, puts = nil, tx{}, 0, map[string]bool{}, map[string]types.TransactWriteItem{}
	}
	// own is what t adds to the batch: its items but those put already.
	own := func(t named) (items []types.TransactWriteItem, n int, clash bool) {
		for _, it := range t.x.items {
			k := itemName(transactKey(it))
			if prev, ok := puts[k]; ok && samePut(prev, it) {
				continue
			}
			items = append(items, it)
			n += transactItemSize(it)
			clash = clash || keys[k]
		}
		return items, n, clash
	}
	for i, t := range txs {
		items, n, clash := own(t)
		if len(batch) > 0 && (clash || len(x.items)+len(items) > awslimits.MaxTransactItems || size+n > awslimits.MaxTransactBytes*3/4) {
			flush()
			items, n, _ = own(t)
		}
		batch = append(batch, i)
		x.items = append(x.items, items...)
		x.changes = append(x.changes, t.x.changes...)
		size += n
		for _, it := range items {
			k := itemName(transactKey(it))
			keys[k] = true
			if it.Put != nil && it.Put.ConditionExpression == nil {
				puts[k] = it
			}
		}
	}
	flush()
	return errs
}

// notSent is the errors of n transactions none of which was sent, since
// one of them could not be built (err).
func notSent(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// samePut reports whether a and b are the same unconditional put of the
// same item: the second changes nothing the first does not.
func samePut(a, b types.TransactWriteItem) bool {
	return a.Put != nil && b.Put != nil && a.Put.ConditionExpression == nil && b.Put.ConditionExpression == nil &&
		reflect.DeepEqual(a.Put.Item, b.Put.Item)
}
