package e2e

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/bucketindex"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// TestReleasedBlockLosesItsMarkWhenClaimedFirst: `sluice retry` releases a
// quarantined block and sends the op that deletes Sluice's no-compact
// mark, then plans the block's range; the planning may claim the block
// (a new gen) before the uploader gets to the op. The op must still
// delete the mark and its global marker, and the record must name neither
// (held to the release's gen, the op was dropped as stale and the mark
// stayed in the bucket until the block was deleted). A claim landing
// between the op's deletion and its record write must not leave the
// record naming a deleted version. A block quarantined again before the
// op keeps its mark; one quarantined again after the deletion gets a new
// one (the quarantine's NO_COMPACT op, which its version's cleanup sends,
// finds the named mark gone), also when the op died there and its
// redelivery, finding the block quarantined, was dropped. Another tool's mark is the block's: the op neither
// deletes nor forgets it.
func TestReleasedBlockLosesItsMarkWhenClaimedFirst(t *testing.T) {
	const (
		removed   = "removed"   // the mark and its global marker are gone, and the record names neither
		kept      = "kept"      // the block, quarantined again, keeps its mark
		rewritten = "rewritten" // the block, quarantined again after the deletion, gets a new mark
	)
	tests := []struct {
		name string
		// beforeOp runs after the release, before the op is executed.
		beforeOp func(c *unmarkCase)
		// midOp runs between the op's S3 deletions and its record write.
		midOp func(c *unmarkCase)
		// diesThere: the op dies right after midOp; afterCrash runs next.
		diesThere  bool
		afterCrash func(c *unmarkCase, op messages.BlockOp)
		// foreign: another tool's no-compact mark was in the bucket
		// before the quarantine's; the block keeps it.
		foreign bool
		want    string
	}{
		{name: "claimed before the op", beforeOp: func(c *unmarkCase) { c.claim() }, want: removed},
		{name: "claimed between its deletion and its record", midOp: func(c *unmarkCase) { c.claim() }, want: removed},
		{name: "claim released before the op", beforeOp: func(c *unmarkCase) { c.claim(); c.releaseClaim() }, want: removed},
		{name: "quarantined again before the op", beforeOp: func(c *unmarkCase) { c.quarantine() }, want: kept},
		{name: "quarantined again between its deletion and its record", midOp: func(c *unmarkCase) { c.quarantine() }, want: rewritten},
		{name: "another tool's mark", foreign: true, want: kept},
		{name: "died between its deletion and its record, delivered again once quarantined again", diesThere: true,
			afterCrash: func(c *unmarkCase, op messages.BlockOp) {
				c.quarantine()
				c.execute(op, nil) // dropped: it does not act on a quarantined block
			}, want: rewritten},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newUnmarkCase(t)
			if tc.foreign {
				c.putForeignMark()
			}
			c.quarantine()
			c.execute(messages.BlockOp{Op: messages.OpNoCompact, Tenant: "acme", Block: c.id, Gen: c.block().Gen}, nil)
			q := c.block()
			if q.NoCompactMarkVersionID == "" || q.NoCompactMarkOurs == tc.foreign || (q.GlobalNoCompactVersionID == "") != tc.foreign {
				t.Fatalf("the quarantined block's mark is recorded as %q (ours %v, global marker %q); want ours %v",
					q.NoCompactMarkVersionID, q.NoCompactMarkOurs, q.GlobalNoCompactVersionID, !tc.foreign)
			}
			if !c.hasVersion(c.markKey, q.NoCompactMarkVersionID) || (!tc.foreign && !c.hasVersion(c.globalKey, q.GlobalNoCompactVersionID)) {
				t.Fatal("the no-compact mark or its global marker is not in the bucket")
			}
			releaseGen, err := c.w.Store.ReleaseBlock(c.ctx, q, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if tc.beforeOp != nil {
				tc.beforeOp(c)
			}
			mid, reached := tc.midOp, false
			errCrash := errors.New("injected: the op dies between its deletion and its record write")
			unmark := messages.BlockOp{Op: messages.OpUnmarkNoCompact, Tenant: "acme", Block: c.id, Gen: releaseGen}
			err = c.run(unmark, func(ctx context.Context, step pipeline.Step, _ string) error {
				if step != "uploader.no-compact-mark-deleted" || reached {
					return nil
				}
				reached = true
				if mid != nil {
					mid(c)
				}
				if tc.diesThere {
					return errCrash
				}
				return nil
			})
			if !reached && (mid != nil || tc.diesThere) {
				t.Fatal("the op never reached the step between its deletion and its record write: nothing was tested")
			}
			if tc.diesThere != errors.Is(err, errCrash) {
				t.Fatalf("%s: %v", unmark.Op, err)
			}
			if tc.afterCrash != nil {
				tc.afterCrash(c, unmark)
			}
			switch b := c.block(); tc.want {
			case kept:
				if b.NoCompactMarkVersionID != q.NoCompactMarkVersionID || !c.hasVersion(c.markKey, q.NoCompactMarkVersionID) ||
					(!tc.foreign && !c.hasVersion(c.globalKey, q.GlobalNoCompactVersionID)) {
					t.Errorf("the block (%s) lost its no-compact mark: record names %q, want %q kept in the bucket",
						b.State, b.NoCompactMarkVersionID, q.NoCompactMarkVersionID)
				}
			case removed:
				if b.NoCompactMarkVersionID != "" || b.GlobalNoCompactVersionID != "" {
					t.Errorf("the record (%s at gen %d) still names the mark %q / global marker %q", b.State, b.Gen, b.NoCompactMarkVersionID, b.GlobalNoCompactVersionID)
				}
				for _, key := range []string{c.markKey, c.globalKey} {
					if vids := c.versions(key); len(vids) != 0 {
						t.Errorf("%s: version(s) %v left in the bucket after the op, want none", key, vids)
					}
				}
			case rewritten:
				// The cleanup of the version that quarantined the block, as
				// the cleaner runs it right after the quarantine, sends the
				// NO_COMPACT op; the pipeline runs it.
				c.cleanup()
				if err := c.w.Pipeline.Settle(c.ctx, time.Second, time.Minute, func(ctx context.Context) (bool, error) {
					b, _, err := c.w.Store.GetBlock(ctx, "acme", c.id)
					return b.NoCompactMarkVersionID != "" && b.NoCompactMarkVersionID != q.NoCompactMarkVersionID, err
				}); err != nil {
					t.Fatalf("no new mark was recorded for the block quarantined again: %v", err)
				}
				b = c.block()
				if b.State != protocol.BlockQuarantined || b.NoCompactMarkVersionID == q.NoCompactMarkVersionID ||
					!c.hasVersion(c.markKey, b.NoCompactMarkVersionID) || c.hasVersion(c.markKey, q.NoCompactMarkVersionID) {
					t.Errorf("the block quarantined again (%s) names mark %q, want a new one in the bucket and the old %q gone",
						b.State, b.NoCompactMarkVersionID, q.NoCompactMarkVersionID)
				}
				if b.GlobalNoCompactVersionID == "" || !c.hasVersion(c.globalKey, b.GlobalNoCompactVersionID) || c.hasVersion(c.globalKey, q.GlobalNoCompactVersionID) {
					t.Errorf("global marker: the record names %q, want a new one in the bucket and the old %q gone",
						b.GlobalNoCompactVersionID, q.GlobalNoCompactVersionID)
				}
			}
		})
	}
}

// unmarkCase is one block of its own deployment, moved through its states
// by the store's writes as the planner and cleaner make them.
type unmarkCase struct {
	t                  *testing.T
	ctx                context.Context
	w                  *testworld.World
	id                 string
	key                planning.GroupKey
	head               records.Group
	markKey, globalKey string
}

func newUnmarkCase(t *testing.T) *unmarkCase {
	// No sweep: its cleanup of the versions the test supersedes would send
	// a quarantined block's NO_COMPACT op again, and only the ops under
	// test may send one.
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.BucketIndex = bucketindex.Cortex // and its global markers
		c.BucketIndexInterval = time.Hour
	}, Pipeline: localrun.Options{SweepInterval: time.Hour}})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 1, Series: 10, Seed: 8, ThanosFiles: true})
	id := blocks[0].Meta.ULID.String()
	w.Upload(ctx, "acme", blocks[0].Dir)
	if err := w.Pipeline.Settle(ctx, time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
		_, ok, err := w.Store.GetBlock(ctx, "acme", id)
		return ok, err
	}); err != nil {
		t.Fatal(err)
	}
	c := &unmarkCase{t: t, ctx: ctx, w: w, id: id,
		markKey:   objectKey(t, w, "acme", id, blockkey.NoCompactMarkFile),
		globalKey: w.Config.Layout.TenantPrefix("acme") + "markers/" + id + "-" + blockkey.NoCompactMarkFile}
	b := c.block()
	c.key = planning.GroupKey{Stream: b.Stream, Level: 1, RangeStart: b.MinT}
	return c
}

func (c *unmarkCase) block() records.Block {
	c.t.Helper()
	b, ok, err := c.w.Store.GetBlock(c.ctx, "acme", c.id)
	if err != nil || !ok {
		c.t.Fatalf("block %s: found %v, %v", c.id, ok, err)
	}
	return b
}

// claim creates the group's next version over the block and claims it.
func (c *unmarkCase) claim() {
	c.t.Helper()
	now := time.Now()
	next := records.Group{Tenant: "acme", Key: c.key, Version: c.head.Version + 1, State: protocol.GroupClaiming,
		CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli(), Partitions: 1, Sources: []string{c.id}}
	if err := c.w.Store.CreateVersion(c.ctx, c.head, next, now, now); err != nil {
		c.t.Fatal(err)
	}
	if err := c.w.Store.Claim(c.ctx, next, []records.Block{c.block()}, now); err != nil {
		c.t.Fatal(err)
	}
	c.head = next
}

// releaseClaim supersedes the version and releases its claim.
func (c *unmarkCase) releaseClaim() {
	c.t.Helper()
	now := time.Now()
	if err := c.w.Store.Supersede(c.ctx, c.head, protocol.GroupClaiming, "test", now); err != nil {
		c.t.Fatal(err)
	}
	c.head.State = protocol.GroupSuperseded
	if err := c.w.Store.ReleaseClaim(c.ctx, c.head.Ref(), c.block(), now); err != nil {
		c.t.Fatal(err)
	}
}

// quarantine claims the block (unless claimed), plans the version and
// quarantines the block as its blamed source.
func (c *unmarkCase) quarantine() {
	c.t.Helper()
	if c.block().State != protocol.BlockClaimed {
		c.claim()
	}
	now := time.Now()
	if err := c.w.Store.SetGroupState(c.ctx, c.head, protocol.GroupClaiming, protocol.GroupPlanned, now); err != nil {
		c.t.Fatal(err)
	}
	c.head.State = protocol.GroupPlanned
	if _, err := c.w.Store.QuarantineSource(c.ctx, c.head, c.block(), "test: corrupt", now); err != nil {
		c.t.Fatal(err)
	}
	c.head.State = protocol.GroupSuperseded
}

// cleanup runs the cleaner on the group's superseded version, as it does
// right after a quarantine.
func (c *unmarkCase) cleanup() {
	c.t.Helper()
	if err := (pipeline.Cleaner{Deps: c.w.Pipeline.Deps}).Advance(c.ctx, "acme", c.key, false); err != nil {
		c.t.Fatal(err)
	}
}

// putForeignMark writes a no-compact mark as another tool would, before
// Sluice's quarantine.
func (c *unmarkCase) putForeignMark() {
	c.t.Helper()
	body, err := blockmeta.NewNoCompactMark(ulid.MustParseStrict(c.id), time.Now().Add(-time.Hour), "an operator's").Marshal()
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.w.Env.Clients.S3.PutObject(c.ctx, &s3.PutObjectInput{Bucket: aws.String(c.w.Config.Bucket), Key: aws.String(c.markKey),
		Body: bytes.NewReader(body)}); err != nil {
		c.t.Fatal(err)
	}
}

// execute runs op through the uploader, as its handler does, with hook at
// its steps.
func (c *unmarkCase) execute(op messages.BlockOp, hook pipeline.Hook) {
	c.t.Helper()
	if err := c.run(op, hook); err != nil {
		c.t.Fatalf("%s: %v", op.Op, err)
	}
}

// run is execute returning the op's error.
func (c *unmarkCase) run(op messages.BlockOp, hook pipeline.Hook) error {
	deps := *c.w.Pipeline.Deps
	deps.Hook = hook
	return (pipeline.Uploader{Deps: &deps}).Execute(c.ctx, op)
}

// versions lists the versions of key in the bucket.
func (c *unmarkCase) versions(key string) []string {
	c.t.Helper()
	res, err := c.w.Env.Clients.S3.ListObjectVersions(c.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(c.w.Config.Bucket), Prefix: aws.String(key)})
	if err != nil {
		c.t.Fatal(err)
	}
	var vids []string
	for _, v := range res.Versions {
		if aws.ToString(v.Key) == key {
			vids = append(vids, aws.ToString(v.VersionId))
		}
	}
	return vids
}

func (c *unmarkCase) hasVersion(key, vid string) bool {
	c.t.Helper()
	return slices.Contains(c.versions(key), vid)
}
