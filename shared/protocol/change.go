package protocol

import "context"

// Change is one item of one write as the writer means it: which
// transition, on which item, expecting what. shared/records attaches the
// changes of every write it sends to the write's context (WithChanges), so
// an observer between the store and DynamoDB — the tests' Monitor —
// judges what the write means without parsing its expressions.
type Change struct {
	Transition Name
	Item       Item
	Tenant     string
	// Group is the group key (planning.GroupKey.String()) of a version or
	// partition item.
	Group string
	// Version is the version a version or partition item's write acts on:
	// for a create, the version created.
	Version   int64
	Partition int
	Block     string
	// From is the state the writer expects the item in ("" for a create).
	From string
	// Gen is the block gen the writer read (block items).
	Gen int64
	// Owner is the lease holder acting (partition items), or the dead
	// holder a take-over replaces (Prev).
	Owner string
	Prev  string
	// By is the version (claims, retirements, quarantines) or partition
	// (activation, discard) the writer acts for.
	By string
	// Vid is the mark version the writer records (NoOtherMark).
	Vid string
	// Now is the writer's clock, unix ms.
	Now int64
}

type changesKey struct{}

// WithChanges is ctx carrying the changes of the write sent under it.
func WithChanges(ctx context.Context, cs []Change) context.Context {
	return context.WithValue(ctx, changesKey{}, cs)
}

// ChangesFrom is what WithChanges put in ctx (nil when nothing).
func ChangesFrom(ctx context.Context) []Change {
	cs, _ := ctx.Value(changesKey{}).([]Change)
	return cs
}
