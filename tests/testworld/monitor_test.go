package testworld

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
)

// The Monitor fed hand-built writes: for each check, a write it must pass
// and one that breaks exactly that check. Nothing here talks to AWS: the
// images before and after are built by hand, as judged() would read them.

var (
	testGroup = planning.GroupKey{Stream: stream.Stream{Labels: map[string]string{"job": "a"}}.ID(), Level: 1, RangeStart: 0}
	headKey   = map[string]types.AttributeValue{"PK": sv("T#acme"), "SK": sv("G#" + testGroup.String())}
	blockID   = "01JAAAAAAAAAAAAAAAAAAAAAAA"
	blockKey  = map[string]types.AttributeValue{"PK": sv("T#acme"), "SK": sv("B#" + blockID)}
)

func sv(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func partKey(v int64, p int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": sv("T#acme"), "SK": sv(fmt.Sprintf("G#%s#V#%d#P#%d", testGroup, v, p))}
}

// image builds the items of a pre- or post-image from records.
func image(t *testing.T, items ...any) preimage {
	t.Helper()
	img := newImage()
	for _, it := range items {
		var k map[string]types.AttributeValue
		switch v := it.(type) {
		case records.Group:
			k = headKey
		case records.Partition:
			k = partKey(v.Version, v.Index)
		case records.Block:
			k = blockKey
		default:
			t.Fatalf("no key for %T", it)
		}
		m, err := attributevalue.MarshalMap(it)
		if err != nil {
			t.Fatal(err)
		}
		m["PK"], m["SK"] = k["PK"], k["SK"]
		img.items[k["PK"].(*types.AttributeValueMemberS).Value+"/"+k["SK"].(*types.AttributeValueMemberS).Value] = m
	}
	return img
}

func update(key map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{Key: key}}
}

func check(key map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{Key: key}}
}

func put(key map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{Item: key}}
}

func item(w types.TransactWriteItem, c *protocol.Change) judgedItem {
	return judgedItem{ref: refOf(writeKey(w)), write: w, change: c}
}

func change(n protocol.Name, mod func(*protocol.Change)) *protocol.Change {
	t := protocol.MustLookup(n)
	c := &protocol.Change{Transition: n, Item: t.Item, Tenant: "acme", Group: testGroup.String(), Version: 1, Now: 1000}
	if t.Item == protocol.ItemBlock {
		c.Group, c.Version, c.Block = "", 0, blockID
	}
	if len(t.From) == 1 {
		c.From = t.From[0]
	}
	if mod != nil {
		mod(c)
	}
	return c
}

var (
	planned   = records.Group{Tenant: "acme", KeyString: testGroup.String(), Version: 1, State: protocol.GroupPlanned, Partitions: 1, Sources: []string{"x"}}
	running   = records.Partition{Tenant: "acme", Group: testGroup.String(), Version: 1, Index: 0, State: protocol.PartitionRunning, LeaseOwner: "w1", LeaseUntil: 5000}
	done      = records.Partition{Tenant: "acme", Group: testGroup.String(), Version: 1, Index: 0, State: protocol.PartitionDone, LeaseOwner: "w1"}
	liveBlock = records.Block{Tenant: "acme", ID: blockID, State: protocol.BlockLive, Gen: 3, Published: true}
)

func with[T any](v T, mod func(*T)) T {
	mod(&v)
	return v
}

func TestMonitorCatchesHandBuiltViolations(t *testing.T) {
	commitTx := func(c *protocol.Change) []judgedItem {
		return []judgedItem{item(check(headKey), change(protocol.JobFence, nil)), item(update(partKey(1, 0)), c)}
	}
	claimed := with(liveBlock, func(b *records.Block) { b.State, b.Gen, b.ClaimedBy = protocol.BlockClaimed, 4, "acme/g@v1" })
	cases := []struct {
		name      string
		tx        []judgedItem
		pre, post []any
		failed    bool   // the write was refused
		violates  string // "" for a write that breaks nothing
	}{
		{name: "commit by the holder of the current version", tx: commitTx(change(protocol.Commit, func(c *protocol.Change) { c.Owner = "w1" })),
			pre: []any{planned, running}, post: []any{planned, done}},
		{name: "commit on a superseded version", violates: CheckCommitFenced,
			tx:  commitTx(change(protocol.Commit, func(c *protocol.Change) { c.Owner = "w1" })),
			pre: []any{with(planned, func(g *records.Group) { g.State = protocol.GroupSuperseded }), running}, post: []any{planned, done}},
		{name: "commit on a newer version", violates: CheckCommitFenced,
			tx:  commitTx(change(protocol.Commit, func(c *protocol.Change) { c.Owner = "w1" })),
			pre: []any{with(planned, func(g *records.Group) { g.Version = 2 }), running}, post: []any{planned, done}},
		{name: "commit by a worker that lost its lease", violates: CheckCommitByHolder,
			tx:  commitTx(change(protocol.Commit, func(c *protocol.Change) { c.Owner = "w2" })),
			pre: []any{planned, running}, post: []any{planned, done}},
		{name: "commit without the job fence", violates: CheckFenced,
			tx:  []judgedItem{item(update(partKey(1, 0)), change(protocol.Commit, func(c *protocol.Change) { c.Owner = "w1" }))},
			pre: []any{planned, running}, post: []any{planned, done}},
		{name: "commit that leaves the partition RUNNING", violates: CheckEffect,
			tx:  commitTx(change(protocol.Commit, func(c *protocol.Change) { c.Owner = "w1" })),
			pre: []any{planned, running}, post: []any{planned, running}},
		{name: "a refused commit is only recorded", failed: true,
			tx:  commitTx(change(protocol.Commit, func(c *protocol.Change) { c.Owner = "w2" })),
			pre: []any{planned, running}},
		{name: "a write that names no transition", violates: CheckTypedWrite,
			tx:  []judgedItem{item(update(partKey(1, 0)), nil)},
			pre: []any{planned, running}, post: []any{planned, done}},
		{name: "lease of a running partition", violates: CheckLeaseExclusive,
			tx: []judgedItem{item(check(headKey), change(protocol.LeaseFence, nil)),
				item(update(partKey(1, 0)), change(protocol.Lease, func(c *protocol.Change) { c.Owner, c.From = "w2", string(protocol.PartitionRunning) }))},
			pre: []any{planned, running}, post: []any{planned, running}},
		{name: "lease on a completed version", violates: CheckLeaseFenced,
			tx: []judgedItem{item(check(headKey), change(protocol.LeaseFence, nil)),
				item(update(partKey(1, 0)), change(protocol.Lease, func(c *protocol.Change) { c.Owner = "w2" }))},
			pre:  []any{with(planned, func(g *records.Group) { g.State = protocol.GroupComplete }), with(running, func(p *records.Partition) { p.State = protocol.PartitionPending })},
			post: []any{planned, running}},
		{name: "take over a lease that has not expired", violates: CheckLeaseExclusive,
			tx: []judgedItem{item(update(headKey), change(protocol.CountDeadAttempt, nil)),
				item(update(partKey(1, 0)), change(protocol.TakeOver, func(c *protocol.Change) { c.Owner, c.Prev, c.Now = "w2", "w1", 4000 }))},
			pre: []any{planned, running}, post: []any{planned, running}},
		{name: "completion with a partition not done", violates: CheckCompletionAfterParts,
			tx: []judgedItem{item(update(headKey), change(protocol.Complete, nil)),
				item(check(partKey(1, 0)), change(protocol.DoneCheck, nil))},
			pre: []any{planned, running}, post: []any{with(planned, func(g *records.Group) { g.State = protocol.GroupComplete }), running}},
		{name: "completion without the done checks", violates: CheckFenced,
			tx:  []judgedItem{item(update(headKey), change(protocol.Complete, nil))},
			pre: []any{planned, done}, post: []any{with(planned, func(g *records.Group) { g.State = protocol.GroupComplete }), done}},
		{name: "a version over an unfinished one", violates: CheckOneUnfinished,
			tx: []judgedItem{item(put(headKey), change(protocol.CreateNext, func(c *protocol.Change) {
				c.Version, c.From = 2, string(protocol.GroupRetired)
			}))},
			pre: []any{planned}, post: []any{with(planned, func(g *records.Group) { g.Version, g.State = 2, protocol.GroupClaiming })}},
		{name: "retire a version that is not complete", violates: CheckTransition,
			tx:  []judgedItem{item(update(headKey), change(protocol.RetireVersion, nil))},
			pre: []any{planned}, post: []any{with(planned, func(g *records.Group) { g.State = protocol.GroupRetired })}},
		{name: "claim of a block another version claims", violates: CheckTransition,
			tx: []judgedItem{item(check(headKey), change(protocol.ClaimFence, nil)),
				item(update(blockKey), change(protocol.Claim, func(c *protocol.Change) { c.Gen, c.By = 4, "acme/g@v2" }))},
			pre: []any{claimed}, post: []any{with(claimed, func(b *records.Block) { b.Gen = 5 })}},
		{name: "claim at a gen the writer did not read", violates: CheckRequires,
			tx: []judgedItem{item(check(headKey), change(protocol.ClaimFence, nil)),
				item(update(blockKey), change(protocol.Claim, func(c *protocol.Change) { c.Gen, c.By = 2, "acme/g@v1" }))},
			pre: []any{liveBlock}, post: []any{claimed}},
		{name: "claim of an unpublished block", violates: CheckRequires,
			tx: []judgedItem{item(check(headKey), change(protocol.ClaimFence, nil)),
				item(update(blockKey), change(protocol.Claim, func(c *protocol.Change) { c.Gen, c.By = 3, "acme/g@v1" }))},
			pre: []any{with(liveBlock, func(b *records.Block) { b.Published = false })}, post: []any{claimed}},
		{name: "a claim", tx: []judgedItem{item(check(headKey), change(protocol.ClaimFence, nil)),
			item(update(blockKey), change(protocol.Claim, func(c *protocol.Change) { c.Gen, c.By = 3, "acme/g@v1" }))},
			pre: []any{liveBlock}, post: []any{claimed}},
		{name: "a state change that keeps the gen", violates: CheckEffect,
			tx: []judgedItem{item(check(headKey), change(protocol.ClaimFence, nil)),
				item(update(blockKey), change(protocol.Claim, func(c *protocol.Change) { c.Gen, c.By = 3, "acme/g@v1" }))},
			pre: []any{liveBlock}, post: []any{with(claimed, func(b *records.Block) { b.Gen = 3 })}},
		{name: "retire a source another version claims", violates: CheckRequires,
			tx:  []judgedItem{item(update(blockKey), change(protocol.Retire, func(c *protocol.Change) { c.Gen, c.By = 4, "acme/g@v9" }))},
			pre: []any{claimed}, post: []any{with(claimed, func(b *records.Block) { b.State, b.Gen = protocol.BlockRetiring, 5 })}},
		{name: "delete before the mark is recorded", violates: CheckRequires,
			tx:   []judgedItem{item(update(blockKey), change(protocol.StartDelete, func(c *protocol.Change) { c.Gen = 5 }))},
			pre:  []any{with(claimed, func(b *records.Block) { b.State, b.Gen = protocol.BlockRetiring, 5 })},
			post: []any{with(claimed, func(b *records.Block) { b.State, b.Gen = protocol.BlockDeleted, 6 })}},
		{name: "a block put over an existing record", violates: CheckBlockCreatedOnce,
			tx:  []judgedItem{item(put(blockKey), change(protocol.RegisterBlock, nil))},
			pre: []any{liveBlock}, post: []any{liveBlock}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &Monitor{checks: map[string]int{}, final: map[string]records.Block{}}
			var err error
			post := image(t, c.post...)
			if c.failed {
				err = records.ErrAttemptsExhausted // any error: the write was refused
				post.items = nil
			}
			m.judgeTransaction(c.tx, image(t, c.pre...), post, err)
			v := m.Violations()
			if c.violates == "" {
				if len(v) > 0 {
					t.Fatalf("a correct write flagged: %v", v)
				}
				if len(m.Checks()) == 0 {
					t.Fatal("no check was made")
				}
				return
			}
			found := false
			for _, s := range v {
				found = found || strings.HasPrefix(s, c.violates+": ")
			}
			if !found {
				t.Fatalf("want a %q violation, got %v", c.violates, v)
			}
		})
	}
}
