package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// putMark writes a mark for block id as another tool writes it (`thanos
// tools bucket mark`, a Cortex or Mimir compactor) and returns its version.
func putMark(t *testing.T, w *testworld.World, tenant, id, file string, at time.Time) string {
	t.Helper()
	var body string
	switch file {
	case blockkey.DeletionMarkFile:
		body = fmt.Sprintf(`{"id":%q,"deletion_time":%d,"version":1}`, id, at.Unix())
	case blockkey.NoCompactMarkFile:
		body = fmt.Sprintf(`{"id":%q,"version":1,"details":"by hand","no_compact_time":%d,"reason":"manual"}`, id, at.Unix())
	}
	res, err := w.Env.Clients.S3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(w.Config.Bucket),
		Key: aws.String(objectKey(t, w, tenant, id, file)), Body: stringsReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(res.VersionId)
}

// dropUpload takes a block out of what I1 expects to find live: its
// deletion was asked for.
func dropUpload(w *testworld.World, tenant string, b blockgen.Block) {
	w.Uploaded[tenant] = slices.DeleteFunc(w.Uploaded[tenant], func(d string) bool { return d == b.Dir })
}

// Marks that another tool writes after Sluice registered the blocks are
// honoured: a block marked for deletion is never a source and is deleted
// (with its mark) when the deletion delay from its mark ends; a block
// marked no-compact stays live as it is while its range is compacted
// around it. (Before, a mark added after registration was never seen: the
// bucket notified meta.json only.)
func TestMarksOfOtherToolsAreHonoured(t *testing.T) {
	t.Parallel()
	clock := &testworld.Clock{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Now: clock.Now},
		Configure: func(c *config.Config) { c.Policy.CloseDelay = time.Hour }})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 41, ThanosFiles: true})
	for _, b := range blocks[:5] {
		w.Upload(ctx, "acme", b.Dir)
	}
	deleted, kept := blocks[1].Meta.ULID.String(), blocks[2].Meta.ULID.String()
	// The range is not covered (its last 2h are missing) and its close
	// delay is an hour: the five blocks wait, LIVE, and the marks come.
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		bs, err := w.Store.TenantBlocks(ctx, "acme")
		return len(bs) == 5, err
	}, "acme")
	markVid := putMark(t, w, "acme", deleted, blockkey.DeletionMarkFile, time.Now())
	ncVid := putMark(t, w, "acme", kept, blockkey.NoCompactMarkFile, time.Now())
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", kept)
		return b.NoCompact, err
	}, "acme")
	// The range closes (its last 2h never came): it is compacted without
	// either marked block.
	clock.Advance(2 * time.Hour)
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		a, _, err := w.Store.GetBlock(ctx, "acme", blocks[0].Meta.ULID.String())
		if err != nil {
			return false, err
		}
		d, _, err := w.Store.GetBlock(ctx, "acme", deleted)
		return a.State == protocol.BlockDeleted && d.State == protocol.BlockDeleted, err
	}, "acme")

	// A retry request that finds the no-compact block LIVE (as a late
	// duplicate of one would) re-plans its range and leaves the other
	// tool's mark to it: only Sluice's own is removed.
	if err := w.Pipeline.Deps.Send.Retry(ctx, messages.RetryRequest{Tenant: "acme", Block: kept, Nonce: "late"}); err != nil {
		t.Fatal(err)
	}
	settle(t, w, "acme")

	all := byID(w.Blocks(ctx, "acme"))
	d := all[deleted]
	if d.ClaimedBy != "" || d.MarkVersionID != markVid {
		t.Errorf("deleted block: claimedBy %q, mark %q; want never claimed, deleted with the other tool's mark %q", d.ClaimedBy, d.MarkVersionID, markVid)
	}
	if vs := listVersions(t, w, "acme", deleted); len(vs) != 0 {
		t.Errorf("objects of the deleted block are left: %v", vs)
	}
	k := all[kept]
	if k.State != protocol.BlockLive || !k.NoCompact || k.NoCompactMarkVersionID != ncVid || k.NoCompactMarkOurs || k.Gen != 1 {
		t.Errorf("no-compact block = %s gen %d noCompact %v mark %q (ours %v); want untouched LIVE naming the other tool's mark %q",
			k.State, k.Gen, k.NoCompact, k.NoCompactMarkVersionID, k.NoCompactMarkOurs, ncVid)
	}
	for i, b := range blocks[:5] {
		if i == 1 || i == 2 {
			continue
		}
		if s := all[b.Meta.ULID.String()].State; s != protocol.BlockDeleted {
			t.Errorf("source %s is %s, want compacted and DELETED", b.Meta.ULID, s)
		}
	}
	dropUpload(w, "acme", blocks[1])
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// A deletion mark written while a version compacts the block takes that
// version down: its jobs can no longer commit, the group is planned again
// without the block, and the block is deleted. Its samples are in no
// output (a `thanos tools bucket rewrite` that deleted series and marked
// the original would otherwise be undone by the compaction under way).
func TestDeletionMarkOnASourceSupersedesItsVersion(t *testing.T) {
	t.Parallel()
	steps, clock := &testworld.Steps{}, &testworld.Clock{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: steps.Hook, Now: clock.Now}})
	ctx := context.Background()
	at := steps.At("compact.before-commit", "@v1/")
	blocks := halfDay(ctx, w, "acme", 43)
	marked := blocks[3].Meta.ULID.String()
	settled := make(chan error, 1)
	go func() {
		settled <- w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
			a, _, err := w.Store.GetBlock(ctx, "acme", blocks[0].Meta.ULID.String())
			if err != nil {
				return false, err
			}
			m, _, err := w.Store.GetBlock(ctx, "acme", marked)
			if err != nil || a.State != protocol.BlockDeleted || m.State != protocol.BlockDeleted {
				return false, err
			}
			return w.Quiescent(ctx, "acme")
		})
	}()
	at.Wait(t, settleTimeout)
	src, _, err := w.Store.GetBlock(ctx, "acme", marked)
	if err != nil {
		t.Fatal(err)
	}
	if src.State != protocol.BlockClaimed {
		t.Fatalf("source %s is %s while its version compacts; want CLAIMED", marked, src.State)
	}
	claimedBy := src.ClaimedBy
	putMark(t, w, "acme", marked, blockkey.DeletionMarkFile, time.Now())
	ref, err := protocol.ParseVersionRef(claimedBy)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() (bool, error) {
		parts, err := w.Store.Partitions(ctx, "acme", ref.Group, ref.Version)
		if err != nil || len(parts) == 0 {
			return false, err
		}
		head, _, err := w.Store.GetGroup(ctx, "acme", ref.Group)
		return head.Version > ref.Version || head.State == protocol.GroupSuperseded, err
	})
	at.Release()
	// Without the marked block the range has a gap: it is compacted once
	// its close delay has passed.
	clock.Advance(w.Config.Policy.CloseDelay + time.Minute)
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	replannedWithout(ctx, t, w, "acme", ref, marked)
	dropUpload(w, "acme", blocks[3])
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// replannedWithout checks that the range of version ref was planned again
// without the marked block: either by a later version of ref's group or,
// when the planner took the next level's plan request first (the two are
// sent together, to a standard queue: ci47, ci on b536ef1), by another
// group, ref's staying at its superseded version. Either way no group's
// version other than ref names the block.
func replannedWithout(ctx context.Context, t *testing.T, w *testworld.World, tenant string, ref protocol.VersionRef, marked string) {
	t.Helper()
	groups, err := w.Store.TenantGroups(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups {
		if g.Key != ref.Group {
			if slices.Contains(g.Sources, marked) {
				t.Errorf("group %s v%d names %s as a source after the mark", g.Key, g.Version, marked)
			}
			continue
		}
		found = true
		switch {
		case g.Version > ref.Version && slices.Contains(g.Sources, marked):
			t.Errorf("group %s is at v%d with sources %v; a version after the mark names %s", g.Key, g.Version, g.Sources, marked)
		case g.Version == ref.Version && g.State != protocol.GroupSuperseded:
			t.Errorf("group %s is still at v%d, %s; want it superseded, or a later version", g.Key, g.Version, g.State)
		}
	}
	if !found {
		t.Errorf("group %s is gone from the records", ref.Group)
	}
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for time.Now().Before(deadline) {
		ok, err := cond()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("condition did not hold in time")
}

// listVersions lists the object versions under one block's prefix.
func listVersions(t *testing.T, w *testworld.World, tenant, id string) []records.ObjectVersion {
	t.Helper()
	prefix := objectKey(t, w, tenant, id, "")
	res, err := w.Env.Clients.S3.ListObjectVersions(context.Background(), &s3.ListObjectVersionsInput{
		Bucket: aws.String(w.Config.Bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	var out []records.ObjectVersion
	for _, v := range res.Versions {
		out = append(out, records.ObjectVersion{RelPath: aws.ToString(v.Key), VersionID: aws.ToString(v.VersionId)})
	}
	return out
}

// A planner that read a range's blocks, then is slowed before it claims
// them, while a no-compact mark is noted on one: its claim of that block
// fails (the claim requires no no-compact mark — noting one changes no
// state and so no gen, and the claim's gen alone would not see it), the
// version is abandoned, and the group is planned again around the marked
// block. Without the requirement the marked block would be compacted.
func TestNoCompactMarkBetweenReadAndClaim(t *testing.T) {
	t.Parallel()
	steps := &testworld.Steps{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: steps.Hook},
		Configure: func(c *config.Config) { c.Policy.CloseDelay = 3 * time.Second }})
	ctx := context.Background()
	claim := steps.At("planner.before-claim", "@v1")
	blocks := halfDay(ctx, w, "acme", 45)
	marked := blocks[4].Meta.ULID.String()
	settled := make(chan error, 1)
	go func() {
		settled <- w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
			b, _, err := w.Store.GetBlock(ctx, "acme", blocks[0].Meta.ULID.String())
			if err != nil || b.State != protocol.BlockDeleted {
				return false, err
			}
			return w.Quiescent(ctx, "acme")
		})
	}()
	ref, err := protocol.ParseVersionRef(claim.Wait(t, settleTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ncVid := putMark(t, w, "acme", marked, blockkey.NoCompactMarkFile, time.Now())
	waitFor(t, func() (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", marked)
		return b.NoCompact && b.State == protocol.BlockLive, err
	})
	claim.Release()
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	history := w.HeadHistory("acme", ref.Group)
	if v1 := history[ref.Version]; v1.State != protocol.GroupSuperseded {
		t.Errorf("v%d ended %s; want SUPERSEDED by its lost claim", ref.Version, v1.State)
	}
	replannedWithout(ctx, t, w, "acme", ref, marked)
	m, _, err := w.Store.GetBlock(ctx, "acme", marked)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != protocol.BlockLive || m.ClaimedBy != "" || m.Gen != 1 || m.NoCompactMarkVersionID != ncVid {
		t.Errorf("marked block = %s gen %d claimedBy %q mark %q; want untouched LIVE naming %q", m.State, m.Gen, m.ClaimedBy, m.NoCompactMarkVersionID, ncVid)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// A mark another tool writes on a block Sluice is done with — an
// operator's script working from a stale list, or a zombie of Sluice's
// own MARK landing after the block's DELETE — is deleted by its version:
// on a retiring block a no-compact mark, or a deletion mark beside the
// one its record names (its DELETE deletes only the versions its record
// names); any mark on a deleted block. Before, such a mark stayed in the
// bucket alone under a prefix with no meta.json: a partial block to every
// reader.
func TestMarksOnBlocksSluiceIsDoneWithAreDeleted(t *testing.T) {
	t.Parallel()
	clock := &testworld.Clock{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Now: clock.Now},
		Configure: func(c *config.Config) { c.DeletionDelay = time.Hour }})
	ctx := context.Background()
	blocks := halfDay(ctx, w, "acme", 47)
	retiring := blocks[0].Meta.ULID.String()
	// runUntil runs the pipeline until cond holds; the sources wait out
	// an hour's deletion delay, so it is never quiescent before that.
	runUntil := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := w.Pipeline.Settle(ctx, 2*time.Second, time.Minute, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	runUntil("the sources retire", func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", retiring)
		return b.State == protocol.BlockRetiring && b.MarkVersionID != "", err
	})
	ncKey := objectKey(t, w, "acme", retiring, blockkey.NoCompactMarkFile)
	putMark(t, w, "acme", retiring, blockkey.NoCompactMarkFile, time.Now())
	runUntil("the no-compact mark on the retiring block is deleted", func(ctx context.Context) (bool, error) {
		return !slices.ContainsFunc(listVersions(t, w, "acme", retiring), func(v records.ObjectVersion) bool {
			return v.RelPath == ncKey
		}), nil
	})
	rb, _, err := w.Store.GetBlock(ctx, "acme", retiring)
	if err != nil || rb.State != protocol.BlockRetiring || rb.NoCompact {
		t.Fatalf("retiring block = %s (no-compact %v, err %v); want RETIRING, the mark not taken for one to honour", rb.State, rb.NoCompact, err)
	}
	// A second deletion mark, written over Sluice's own (Thanos' tools
	// would not: they leave a block that has one alone), is deleted when
	// its event names its version, as AWS's do; Sluice's stays.
	dmKey := objectKey(t, w, "acme", retiring, blockkey.DeletionMarkFile)
	second := putMark(t, w, "acme", retiring, blockkey.DeletionMarkFile, time.Now())
	w.NotifyVersion(ctx, dmKey, second)
	runUntil("the second deletion mark on the retiring block is deleted", func(ctx context.Context) (bool, error) {
		return !slices.Contains(listVersions(t, w, "acme", retiring), records.ObjectVersion{RelPath: dmKey, VersionID: second}), nil
	})
	if !slices.Contains(listVersions(t, w, "acme", retiring), records.ObjectVersion{RelPath: dmKey, VersionID: rb.MarkVersionID}) {
		t.Fatalf("Sluice's own deletion mark %s of the retiring block is gone", rb.MarkVersionID)
	}

	clock.Advance(time.Hour + time.Minute)
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		for _, b := range blocks {
			r, _, err := w.Store.GetBlock(ctx, "acme", b.Meta.ULID.String())
			if err != nil || r.State != protocol.BlockDeleted {
				return false, err
			}
		}
		return true, nil
	}, "acme")
	for i, file := range []string{blockkey.NoCompactMarkFile, blockkey.DeletionMarkFile} {
		id := blocks[1+i].Meta.ULID.String()
		putMark(t, w, "acme", id, file, time.Now())
		runUntil(file+" on a deleted block is deleted", func(ctx context.Context) (bool, error) {
			return len(listVersions(t, w, "acme", id)) == 0, nil
		})
	}
	settle(t, w, "acme")
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}
