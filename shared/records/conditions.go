package records

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/protocol"
)

// expect is what a writer read and acts with: the values a transition's
// condition names. The condition and the protocol.Change a write carries
// are both built from it, so they cannot disagree.
type expect struct {
	from    string // the state the item is expected in ("" for a create)
	version int64  // AtVersion
	gen     int64  // AtGen
	owner   string // LeaseHolder
	prev    string // LeaseExpired: the holder whose lease ran out
	by      string // ClaimedByWriter, ProducedByWriter
	vid     string // NoCompactMarkNamed, NoOtherMark
	max     int    // BelowMaxFailures
	now     int64  // unix ms
}

// subject names the item a change is about.
type subject struct {
	tenant    string
	group     string
	version   int64
	partition int
	block     string
}

func (on subject) String() string {
	if on.block != "" {
		return on.tenant + "/" + on.block
	}
	return fmt.Sprintf("%s/%s@v%d", on.tenant, on.group, on.version)
}

// guarded is one item of a transaction, made by one protocol transition:
// its condition rendered from the transition's table entry, and the Change
// it makes.
type guarded struct {
	t      protocol.Transition
	cond   string
	names  map[string]string
	vals   map[string]types.AttributeValue
	change protocol.Change
}

// guard renders transition name's condition on its own item, with e's values.
// A state the transition cannot leave is a lost condition, found before
// anything is sent.
func guard(name protocol.Name, on subject, e expect) (guarded, error) {
	t, err := protocol.Lookup(name)
	if err != nil {
		return guarded{}, err
	}
	if e.from == "" && len(t.From) == 1 {
		e.from = t.From[0]
	}
	if !t.Leaves(e.from) {
		// The writer read a state this transition cannot leave: DynamoDB
		// would refuse the condition, so it is lost before it is sent.
		return guarded{}, &ConditionLostError{Op: fmt.Sprintf("%s from %q (it leaves only %v)", name, e.from, t.From), Item: on.String()}
	}
	g := guarded{t: t, names: map[string]string{}, vals: map[string]types.AttributeValue{}, change: protocol.Change{
		Transition: name, Item: t.Item, Tenant: on.tenant, Group: on.group, Version: on.version, Partition: on.partition,
		Block: on.block, From: e.from, Gen: e.gen, Owner: e.owner, Prev: e.prev, By: e.by, Vid: e.vid, Now: e.now,
	}}
	var parts []string
	if e.from != "" {
		g.names["#st"] = "state"
		g.vals[":from"] = s(e.from)
		parts = append(parts, "#st = :from")
	}
	for _, r := range t.Requires {
		switch r {
		case protocol.Absent:
			parts = append(parts, "attribute_not_exists(PK)")
		case protocol.AtVersion:
			g.vals[":v"] = n(e.version)
			parts = append(parts, "version = :v")
		case protocol.AtGen:
			g.names["#gen"] = "gen"
			g.vals[":gen"] = n(e.gen)
			parts = append(parts, "#gen = :gen")
		case protocol.LeaseHolder:
			g.vals[":owner"] = s(e.owner)
			parts = append(parts, "leaseOwner = :owner")
		case protocol.LeaseExpired:
			g.vals[":prev"], g.vals[":now"] = s(e.prev), n(e.now)
			parts = append(parts, "leaseOwner = :prev AND leaseUntil < :now")
		case protocol.ClaimedByWriter:
			g.vals[":by"] = s(e.by)
			parts = append(parts, "claimedBy = :by")
		case protocol.Unclaimed:
			parts = append(parts, "attribute_not_exists(claimedBy)")
		case protocol.Published:
			g.vals[":published"] = &types.AttributeValueMemberBOOL{Value: true}
			parts = append(parts, "published = :published")
		case protocol.ProducedByWriter:
			g.vals[":by"] = s(e.by)
			parts = append(parts, "producedBy = :by")
		case protocol.MarkRecorded:
			parts = append(parts, "attribute_exists(markVid)")
		case protocol.NoCompactMarkNamed:
			g.vals[":ncvid"] = s(e.vid)
			parts = append(parts, "ncVid = :ncvid")
		case protocol.NoOtherMark:
			g.vals[":markvid"] = s(e.vid)
			parts = append(parts, "(attribute_not_exists(markVid) OR markVid = :markvid)")
		case protocol.Compactable:
			g.vals[":nc"] = &types.AttributeValueMemberBOOL{Value: true}
			parts = append(parts, "(attribute_not_exists(noCompact) OR noCompact <> :nc)")
		case protocol.Downsampled:
			parts = append(parts, "attribute_exists(downsampled)")
		case protocol.BelowMaxFailures:
			g.vals[":max"] = n(int64(e.max))
			parts = append(parts, "(attribute_not_exists(failures) OR failures < :max)")
		default:
			return guarded{}, fmt.Errorf("records: %s requires %q, which has no condition", name, r)
		}
	}
	g.cond = strings.Join(parts, " AND ")
	return g, nil
}

// update is the guarded write as an Update of key: set (a comma-separated
// list, without SET) after the transition's own state change, then the
// optional remove clause. vals and names add to the guard's.
func (g guarded) update(k map[string]types.AttributeValue, set, remove string, vals map[string]types.AttributeValue) types.TransactWriteItem {
	var sets []string
	if g.t.Moves() {
		g.names["#st"] = "state"
		g.vals[":to"] = s(g.t.To)
		sets = append(sets, "#st = :to")
	}
	if g.t.Item == protocol.ItemBlock && g.t.Moves() {
		g.names["#gen"] = "gen"
		g.vals[":one"] = n(1)
		sets = append(sets, "#gen = #gen + :one")
	}
	if set != "" {
		sets = append(sets, set)
	}
	expr := "SET " + strings.Join(sets, ", ")
	if remove != "" {
		expr += " REMOVE " + remove
	}
	for k, v := range vals {
		g.vals[k] = v
	}
	return types.TransactWriteItem{Update: &types.Update{
		Key: k, ConditionExpression: aws.String(g.cond), UpdateExpression: aws.String(expr),
		ExpressionAttributeNames: nonEmpty(g.names), ExpressionAttributeValues: nonEmptyVals(g.vals),
	}}
}

// put is the guarded write as a Put of item (a create: its state is in
// the item).
func (g guarded) put(item map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		Item: item, ConditionExpression: aws.String(g.cond),
		ExpressionAttributeNames: nonEmpty(g.names), ExpressionAttributeValues: nonEmptyVals(g.vals),
	}}
}

// check is the guarded condition as a ConditionCheck of key.
func (g guarded) check(k map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		Key: k, ConditionExpression: aws.String(g.cond),
		ExpressionAttributeNames: nonEmpty(g.names), ExpressionAttributeValues: nonEmptyVals(g.vals),
	}}
}

func nonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func nonEmptyVals(m map[string]types.AttributeValue) map[string]types.AttributeValue {
	if len(m) == 0 {
		return nil
	}
	return m
}

// tx collects a transaction's items and the changes they make.
type tx struct {
	items   []types.TransactWriteItem
	changes []protocol.Change
}

// add appends a guarded item.
func (x *tx) add(g guarded, it types.TransactWriteItem) {
	x.items = append(x.items, it)
	x.changes = append(x.changes, g.change)
}

// plain appends an item that is no protocol transition (memberships,
// agenda entries, meta.json parts, the stream and tenant records).
func (x *tx) plain(it ...types.TransactWriteItem) { x.items = append(x.items, it...) }

// commit sends the transaction with its changes in the context. A lost
// condition is counted (metrics.ConditionLosses) under the transaction's
// first transition, the one it is named for: a handful of names, never an
// item's key.
func (st *Store) commit(ctx context.Context, op string, x tx) error {
	err := st.transact(protocol.WithChanges(ctx, x.changes), op, x.items)
	if IsConditionLost(err) && len(x.changes) > 0 {
		metrics.From(ctx).Add(metrics.ConditionLosses, 1, string(x.changes[0].Transition))
	}
	return err
}
