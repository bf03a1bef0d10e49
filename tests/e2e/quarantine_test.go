package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/bucketindex"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// TestCorruptSourceIsQuarantined: a 2h block whose index is damaged in the
// middle (its table of contents intact, so registration accepts it) among
// five healthy neighbours. Compaction fails on it; after
// SLUICE_MAX_JOB_ATTEMPTS failed attempts it is quarantined — QUARANTINED
// with the reason, a no-compact-mark.json in Thanos' format beside it —
// and its neighbours are compacted without it. `sluice retry`, once the
// block's files are re-uploaded repaired, releases it and it is compacted
// into the range as well. (Before the quarantine, such a block made the
// planner create version after version and the sweep re-send its jobs
// forever, and its neighbours were never compacted.)
//
// The retry's first delivery dies right after the release, and the
// second's planning fails: each redelivered request finds the block
// released already and sends what follows the release again — the
// deletion of the versions the re-upload replaced (before, nothing sent
// it again and they stayed in the bucket) and the planning of its range
// (before, nothing asked, and the block stayed LIVE, never compacted).
func TestCorruptSourceIsQuarantined(t *testing.T) {
	t.Parallel()
	var failRelease, failRetryPlan atomic.Bool
	var retryGroup atomic.Pointer[string]
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.Policy.CloseDelay = 3 * time.Second
		c.MaxJobAttempts = 3
		c.BucketIndex = bucketindex.Cortex // and its global markers
		c.BucketIndexInterval = time.Hour
	}, Pipeline: localrun.Options{Hook: func(_ context.Context, step pipeline.Step, subject string) error {
		switch {
		case step == "planner.after-release" && failRelease.CompareAndSwap(true, false):
			return errors.New("injected: the retry dies right after releasing the block")
		case step == "planner.before-create" && retryGroup.Load() != nil && strings.HasPrefix(subject, *retryGroup.Load()) &&
			failRetryPlan.CompareAndSwap(true, false):
			return errors.New("injected: the retry's planning fails before creating the version")
		}
		return nil
	}}})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 40, Seed: 21, ThanosFiles: true})
	bad := blocks[1]
	badID := bad.Meta.ULID.String()
	repaired := filepath.Join(t.TempDir(), badID)
	if err := testworld.CopyDir(bad.Dir, repaired); err != nil {
		t.Fatal(err)
	}
	uploadOneDamaged(ctx, t, w, "acme", blocks, bad)
	// The range closes without the quarantined block: wait for that too.
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", blocks[0].Meta.ULID.String())
		return b.State == protocol.BlockDeleted, err
	}, "acme")

	all := byID(w.Blocks(ctx, "acme"))
	q := all[badID]
	if q.State != protocol.BlockQuarantined || !strings.Contains(q.Reason, badID) || !strings.Contains(q.Reason, "3 failed attempts") {
		t.Fatalf("damaged block is %s (%q); want QUARANTINED naming it after 3 failed attempts", q.State, q.Reason)
	}
	for _, b := range blocks {
		if b.Dir != bad.Dir && all[b.Meta.ULID.String()].State != protocol.BlockDeleted {
			t.Errorf("healthy neighbour %s is %s, want compacted and DELETED", b.Meta.ULID, all[b.Meta.ULID.String()].State)
		}
	}
	mark := readObject(t, w, "acme", badID, blockkey.NoCompactMarkFile)
	nc, err := blockmeta.ParseNoCompactMark(mark, badID)
	if err != nil || nc.ID.String() != badID || nc.Reason != blockmeta.ManualNoCompactReason || !strings.Contains(nc.Details, "quarantined by Sluice") {
		t.Fatalf("no-compact-mark.json %s: %+v, %v", mark, nc, err)
	}
	globalMarker := w.Config.Layout.TenantPrefix("acme") + "markers/" + badID + "-" + blockkey.NoCompactMarkFile
	if !bytes.Equal(readKey(t, w, globalMarker), mark) || q.GlobalNoCompactVersionID == "" {
		t.Errorf("the global marker %s does not hold the block's no-compact mark (recorded %q)", globalMarker, q.GlobalNoCompactVersionID)
	}
	g := planning.GroupKey{Stream: q.Stream, Level: 1, RangeStart: day().UnixMilli()}
	versions := groupVersions(t, w, "acme", g)
	if v1 := versions[1]; v1.Failures != 3 || v1.LastErrorBlock != badID || v1.State != protocol.GroupSuperseded {
		t.Errorf("v1 = %s, %d failures blaming %q; want SUPERSEDED after 3 failures blaming %s", v1.State, v1.Failures, v1.LastErrorBlock, badID)
	}
	rep, err := cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if qs := rep.Tenants[0].Quarantined; len(qs) != 1 || qs[0].Block != badID {
		t.Errorf("status shows quarantined %+v, want the damaged block", qs)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}

	// The operator re-uploads the repaired files under the same ULID, then
	// retries: the block is read again and compacted into its range.
	if err := testworld.UploadBlock(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, "acme", repaired); err != nil {
		t.Fatal(err)
	}
	w.Repaired("acme", repaired)
	// The re-upload's own event is handled first: in a batch with the
	// retry, it would ask for the range's planning itself.
	settle(t, w, "acme")
	// The retry plans a group of the block's stream: its 12h range, or the
	// 24h one when the neighbours' output has gone on to it already.
	stream := "acme/" + q.Stream + "#"
	retryGroup.Store(&stream)
	failRelease.Store(true)
	failRetryPlan.Store(true)
	if _, err := cli.Retry(ctx, w.Store, w.Pipeline.Deps.Send, messages.RetryRequest{Tenant: "acme", Block: badID, Nonce: "t"}); err != nil {
		t.Fatal(err)
	}
	settle(t, w, "acme")
	if failRelease.Load() || failRetryPlan.Load() {
		t.Errorf("injected failures left unused: after the release %v, the range's planning %v", failRelease.Load(), failRetryPlan.Load())
	}
	if b := byID(w.Blocks(ctx, "acme"))[badID]; b.State != protocol.BlockDeleted {
		t.Errorf("retried block is %s (%s), want compacted and DELETED", b.State, b.Reason)
	}
	if vs, err := w.Env.Clients.S3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket),
		Prefix: aws.String(globalMarker)}); err != nil || len(vs.Versions) != 0 {
		t.Errorf("the global no-compact marker outlived the release: %v versions, %v", len(vs.Versions), err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestRetriedSourceIsNotBlamedAgain (chaos seed 10, with an operator's
// repair): a source is quarantined after the version's failures, and its
// range, not covered without it, waits for its close. An operator repairs
// the block and retries it before then: the next version has the same
// sources as the superseded one, and must not carry the failures that
// blamed the block (carried, they quarantined it again, with the old
// reason, before any job ran). The block is compacted into its range.
func TestRetriedSourceIsNotBlamedAgain(t *testing.T) {
	t.Parallel()
	w, badID, repaired, g := quarantinedInAWaitingRange(t, 22)
	ctx := context.Background()
	head, _, err := w.Store.GetGroup(ctx, "acme", g)
	if err != nil {
		t.Fatal(err)
	}
	if head.State != protocol.GroupSuperseded || head.Failures != 3 || head.QuarantinedSource != badID {
		t.Fatalf("the range's head is %s with %d failures, quarantined source %q; want SUPERSEDED after 3, having quarantined %s (nothing planned since: the range waits for its close)",
			head.State, head.Failures, head.QuarantinedSource, badID)
	}

	if err := repair(ctx, w, repaired); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Retry(ctx, w.Store, w.Pipeline.Deps.Send, messages.RetryRequest{Tenant: "acme", Block: badID, Nonce: "t"}); err != nil {
		t.Fatal(err)
	}
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", badID)
		return b.State != protocol.BlockLive && b.State != protocol.BlockClaimed, err
	}, "acme")
	if b := byID(w.Blocks(ctx, "acme"))[badID]; b.State != protocol.BlockRetiring && b.State != protocol.BlockDeleted {
		t.Fatalf("the retried block is %s (%s); want compacted, RETIRING or DELETED", b.State, b.Reason)
	}
	last, _, err := w.Store.GetGroup(ctx, "acme", g)
	if err != nil {
		t.Fatal(err)
	}
	if last.Version != head.Version+1 || last.Failures != 0 || !slices.Contains(last.Sources, badID) {
		t.Errorf("the range's next version is v%d with %d failures over %v; want v%d over the retried block, with none",
			last.Version, last.Failures, last.Sources, head.Version+1)
	}
	settle(t, w, "acme")
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// quarantinedInAWaitingRange uploads six 2h blocks of tenant acme, one of
// them (its ULID badID) with a damaged index, and settles once that one is
// quarantined after 3 failed attempts. Its 12h range g is not covered
// without it and closes only in an hour, so nothing plans it meanwhile.
// repaired is a sound copy of the damaged block.
func quarantinedInAWaitingRange(t *testing.T, seed int64) (w *testworld.World, badID, repaired string, g planning.GroupKey) {
	t.Helper()
	w, badID, repaired = damagedInAWaitingRange(t, seed, nil)
	ctx := context.Background()
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", badID)
		return b.State == protocol.BlockQuarantined, err
	}, "acme")
	q := byID(w.Blocks(ctx, "acme"))[badID]
	return w, badID, repaired, planning.GroupKey{Stream: q.Stream, Level: 1, RangeStart: day().UnixMilli()}
}

// damagedInAWaitingRange makes the world of quarantinedInAWaitingRange
// and uploads its blocks, without settling. hook, when set, is made once
// the world and the blocks are, and sees every protocol step from the
// uploads on.
func damagedInAWaitingRange(t *testing.T, seed int64, hook func(w *testworld.World, badID, repaired string) pipeline.Hook) (w *testworld.World, badID, repaired string) {
	t.Helper()
	var made atomic.Pointer[pipeline.Hook]
	w = testworld.New(t, testworld.Options{
		Configure: func(c *config.Config) {
			c.Policy.CloseDelay = time.Hour
			c.MaxJobAttempts = 3
		},
		Pipeline: localrun.Options{Hook: func(ctx context.Context, step pipeline.Step, subject string) error {
			if h := made.Load(); h != nil {
				return (*h)(ctx, step, subject)
			}
			return nil
		}},
	})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 40, Seed: seed, ThanosFiles: true})
	bad := blocks[2]
	badID = bad.Meta.ULID.String()
	repaired = filepath.Join(t.TempDir(), badID)
	if err := testworld.CopyDir(bad.Dir, repaired); err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		h := hook(w, badID, repaired)
		made.Store(&h)
	}
	uploadOneDamaged(ctx, t, w, "acme", blocks, bad)
	return w, badID, repaired
}

// TestNoCompactMarkOfALeftQuarantine (chaos seed 17, CI on 56ed430): the
// quarantine's NO_COMPACT op has written the block's no-compact mark, and
// before it records it, the operator repairs the block and `sluice retry`
// releases it. The release reads a record that names no mark, so it sends
// no removal. The op's record write then loses (the block moved on), or
// the op dies there and its redelivery no longer acts on the block. Either
// way the op deletes the mark it wrote: it used to stop, and the mark,
// named by no record, outlived the block's DELETE (I4). The mark's own
// notification may reach the planner first, the block LIVE: Sluice's own
// mark is not another tool's, and is not noted as one (noted, it would
// keep the repaired block from compaction for good).
func TestNoCompactMarkOfALeftQuarantine(t *testing.T) {
	for _, tc := range []struct {
		name         string
		crash, event bool
	}{
		{"the op's record write loses", false, false},
		{"the op dies and its redelivery no longer acts", true, false},
		{"the mark's notification comes after the release", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var fired, noted atomic.Bool
			w, badID, _ := damagedInAWaitingRange(t, 26, func(w *testworld.World, badID, repaired string) pipeline.Hook {
				markKey := objectKey(t, w, "acme", badID, blockkey.NoCompactMarkFile)
				return func(ctx context.Context, step pipeline.Step, subject string) error {
					if step != "uploader.no-compact-written" || !fired.CompareAndSwap(false, true) {
						return nil
					}
					if err := repair(ctx, w, repaired); err != nil {
						return err
					}
					retry, err := retryEvent(badID)
					if err != nil {
						return err
					}
					if resp, err := (pipeline.Planner{Deps: w.Pipeline.Deps}).Handle(ctx, retry); err != nil || len(resp.BatchItemFailures) > 0 {
						return fmt.Errorf("the retry: %v, failures %v", err, resp.BatchItemFailures)
					}
					if tc.event {
						head, err := w.Env.Clients.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(markKey)})
						if err != nil {
							return err
						}
						ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "mark-event",
							Body: testworld.ObjectCreatedBody(w.Config.Bucket, markKey, aws.ToString(head.VersionId), true, time.Now())}}}
						if resp, err := (pipeline.Planner{Deps: w.Pipeline.Deps}).Handle(ctx, ev); err != nil || len(resp.BatchItemFailures) > 0 {
							return fmt.Errorf("the mark's event: %v, failures %v", err, resp.BatchItemFailures)
						}
						b, _, err := w.Store.GetBlock(ctx, "acme", badID)
						if err != nil {
							return err
						}
						noted.Store(b.NoCompact)
					}
					if tc.crash {
						return testworld.ErrCrash
					}
					return nil
				}
			})
			ctx := context.Background()
			settleUntil(t, w, func(ctx context.Context) (bool, error) {
				b, _, err := w.Store.GetBlock(ctx, "acme", badID)
				return noted.Load() || (fired.Load() && (b.State == protocol.BlockRetiring || b.State == protocol.BlockDeleted)), err
			}, "acme")
			if noted.Load() {
				t.Fatal("the planner took Sluice's own no-compact mark of the released block for another tool's")
			}
			if marks := markVersions(t, w, badID, blockkey.NoCompactMarkFile); len(marks) > 0 {
				t.Errorf("the released block's no-compact mark is still in the bucket (versions %v)", marks)
			}
			settle(t, w, "acme")
			if err := w.CheckQuiescent(ctx, "acme"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRetryRedeliveredAfterItsBlockMovedOn (chaos seed 1490): the retry
// of a repaired block dies right after releasing it, before it sends the
// deletion of the versions the repair replaced. Before SQS delivers it
// again, the range is planned and the block claimed. The redelivery finds
// the block CLAIMED, not quarantined; it used to do nothing, and the
// replaced index and chunks outlived the block (its DELETE deletes only
// what its record names). It now sends the release's ops again.
func TestRetryRedeliveredAfterItsBlockMovedOn(t *testing.T) {
	t.Parallel()
	w, badID, repaired, g := quarantinedInAWaitingRange(t, 24)
	ctx := context.Background()
	if err := repair(ctx, w, repaired); err != nil {
		t.Fatal(err)
	}
	retry, err := retryEvent(badID)
	if err != nil {
		t.Fatal(err)
	}
	dying := *w.Pipeline.Deps
	dying.Hook = func(_ context.Context, step pipeline.Step, _ string) error {
		if step == "planner.after-release" {
			return errors.New("injected: the retry dies right after releasing the block")
		}
		return nil
	}
	if resp, err := (pipeline.Planner{Deps: &dying}).Handle(ctx, retry); err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("the dying retry: %v, failures %v; want its message failed", err, resp.BatchItemFailures)
	}
	if err := (pipeline.Planner{Deps: w.Pipeline.Deps}).PlanGroup(ctx, "acme", g); err != nil {
		t.Fatal(err)
	}
	if b, _, err := w.Store.GetBlock(ctx, "acme", badID); err != nil || b.State != protocol.BlockClaimed || len(b.Superseded) != 2 {
		t.Fatalf("the released block is %s with %d replaced versions (%v); want CLAIMED by the range's version, 2 replaced", b.State, len(b.Superseded), err)
	}
	if resp, err := (pipeline.Planner{Deps: w.Pipeline.Deps}).Handle(ctx, retry); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("the retry's redelivery: %v, failures %v", err, resp.BatchItemFailures)
	}
	settle(t, w, "acme")
	if b := byID(w.Blocks(ctx, "acme"))[badID]; b.State != protocol.BlockRetiring && b.State != protocol.BlockDeleted {
		t.Errorf("the retried block is %s; want compacted", b.State)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptUploadDownsampledWholeIsQuarantined (chaos seed 1493): an
// upload downsampled whole (raw span 2h) whose index cannot be decoded.
// The downsample reads it outside any merge, series by series, and its
// error names no block: counted as the group's own, the failures
// quarantined the downsample group, and the corrupt upload stayed LIVE.
// The job now asks which source is to blame (compaction.Blame), and the
// block is quarantined.
func TestCorruptUploadDownsampledWholeIsQuarantined(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.MaxJobAttempts = 3
		c.Policy.Downsample = true
		c.Policy.DownsampleRawSpan, c.Policy.DownsampleFiveMinuteSpan = 2*time.Hour, 3*time.Hour
	}})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 1, Series: 40, Seed: 23, ThanosFiles: true})
	bad := blocks[0]
	badID := bad.Meta.ULID.String()
	uploadOneDamaged(ctx, t, w, "acme", blocks, bad)
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", badID)
		if err != nil || b.State == protocol.BlockQuarantined {
			return err == nil, err
		}
		groups, err := w.Store.TenantGroups(ctx, "acme")
		return slices.ContainsFunc(groups, func(g records.Group) bool { return g.State == protocol.GroupQuarantined }), err
	}, "acme")
	b := byID(w.Blocks(ctx, "acme"))[badID]
	if b.State != protocol.BlockQuarantined || !strings.Contains(b.Reason, "blaming source "+badID) {
		t.Errorf("the block is %s (%q); want it QUARANTINED, its downsample's failures blaming it", b.State, b.Reason)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestQuarantineMarkSurvivesACrash (chaos seed 106): the cleaner that
// quarantines a blamed source — one transaction supersedes the version
// and makes the block QUARANTINED — dies before it sends the op that
// writes the block's no-compact mark. Its note comes back and finds the
// version superseded; the superseded version's cleanup sends the op
// again, so the mark is written. (Before, the redelivery only cleaned up
// the version: the block stayed QUARANTINED without a mark for good.)
func TestQuarantineMarkSurvivesACrash(t *testing.T) {
	t.Parallel()
	var crashed atomic.Bool
	w := testworld.New(t, testworld.Options{
		Configure: func(c *config.Config) {
			c.Policy.CloseDelay = 3 * time.Second
			c.MaxJobAttempts = 2
		},
		Pipeline: localrun.Options{Hook: func(ctx context.Context, step pipeline.Step, subject string) error {
			if step == "cleaner.after-quarantine-source" && crashed.CompareAndSwap(false, true) {
				return errors.New("crashed after the quarantine's transaction")
			}
			return nil
		}},
	})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 40, Seed: 23, ThanosFiles: true})
	bad := blocks[2]
	badID := bad.Meta.ULID.String()
	uploadOneDamaged(ctx, t, w, "acme", blocks, bad)
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", badID)
		return b.State == protocol.BlockQuarantined && b.NoCompactMarkVersionID != "", err
	}, "acme")
	if !crashed.Load() {
		t.Fatal("the cleaner never reached the step after the quarantine: nothing was tested")
	}
	mark := readObject(t, w, "acme", badID, blockkey.NoCompactMarkFile)
	if nc, err := blockmeta.ParseNoCompactMark(mark, badID); err != nil || !strings.Contains(nc.Details, "quarantined by Sluice") {
		t.Fatalf("no-compact-mark.json %s: %+v, %v", mark, nc, err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestJobPastItsDeadlineIsQuarantinedGroup: compaction jobs whose function
// deadline is closer than SLUICE_DEADLINE_MARGIN stop without committing
// and record a failed attempt each; after three the group — no block is
// to blame — is quarantined: its sources stay claimed and readable, its
// jobs are not sent again. `sluice retry` (with jobs that have time again)
// releases it and it completes.
func TestJobPastItsDeadlineIsQuarantinedGroup(t *testing.T) {
	t.Parallel()
	var short atomic.Bool
	short.Store(true)
	var jobs atomic.Int32
	w := testworld.New(t, testworld.Options{
		Configure: func(c *config.Config) { c.DeadlineMargin = time.Minute },
		Pipeline: localrun.Options{Wrap: func(name string, h eventsource.Handler) eventsource.Handler {
			if name != "compact" {
				return h
			}
			return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				jobs.Add(int32(len(ev.Records)))
				if short.Load() {
					// A function with 30 s left: less than the margin.
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
				}
				return h(ctx, ev)
			}
		}},
	})
	w.QuarantinedGroupsExpected = true
	ctx := context.Background()
	for _, b := range w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 22, ThanosFiles: true}) {
		w.Upload(ctx, "acme", b.Dir)
	}
	settle(t, w, "acme")

	groups, err := w.Store.TenantGroups(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var q records.Group
	for _, g := range groups {
		if g.Key.Level == 1 {
			q = g
		}
	}
	if q.State != protocol.GroupQuarantined || q.Failures != 3 || q.LastErrorKind != records.FailureDeadline || !strings.Contains(q.Reason, "ran out of time") {
		t.Fatalf("group %s is %s with %d failures (%s): %q; want QUARANTINED after 3 deadline failures", q.Ref(), q.State, q.Failures, q.LastErrorKind, q.Reason)
	}
	if n := jobs.Load(); n != 3 {
		t.Errorf("%d job deliveries, want exactly 3 (one per attempt, none after the quarantine)", n)
	}
	for _, b := range w.Blocks(ctx, "acme") {
		if b.State != protocol.BlockClaimed || b.ClaimedBy != q.Ref() {
			t.Errorf("block %s is %s claimed by %q; want every source kept CLAIMED by %s", b.ID, b.State, b.ClaimedBy, q.Ref())
		}
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}

	short.Store(false)
	w.QuarantinedGroupsExpected = false
	if _, err := cli.Retry(ctx, w.Store, w.Pipeline.Deps.Send, messages.RetryRequest{Tenant: "acme", Group: q.Key.String(), Nonce: "t"}); err != nil {
		t.Fatal(err)
	}
	settle(t, w, "acme")
	head, _, err := w.Store.GetGroup(ctx, "acme", q.Key)
	if err != nil || head.State != protocol.GroupRetired || head.Version != q.Version+1 || head.Failures != 0 {
		t.Fatalf("after retry: %s v%d with %d failures (%v); want v%d RETIRED afresh", head.State, head.Version, head.Failures, err, q.Version+1)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestNotDeterministicSupersedes: an attempt that finds its output key
// already holding other bytes (two attempts of one job wrote different
// bytes) fails; the version is superseded so the next one writes under new
// output ULIDs, and the stray object is swept.
func TestNotDeterministicSupersedes(t *testing.T) {
	t.Parallel()
	var planted atomic.Bool
	var w *testworld.World
	w = testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: func(ctx context.Context, step pipeline.Step, subject string) error {
		if step != "compact.after-read" || !strings.HasSuffix(subject, "@v1/p0") || planted.Swap(true) {
			return nil
		}
		// Another attempt's bytes under this attempt's output index key.
		tenant, rest, _ := strings.Cut(subject, "/")
		gs, _, _ := strings.Cut(rest, "@")
		g, err := planning.ParseGroupKey(gs)
		if err != nil {
			return err
		}
		head, _, err := w.Store.GetGroup(ctx, tenant, g)
		if err != nil {
			return err
		}
		out := compaction.OutputULID(time.UnixMilli(head.CreatedAt), tenant, g.String(), 1, 0)
		_, err = w.Env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(w.Config.Bucket),
			Key: aws.String(objectKey(t, w, tenant, out.String(), blockkey.IndexFile)), Body: strings.NewReader("other bytes")})
		return err
	}}})
	ctx := context.Background()
	for _, b := range w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 23, ThanosFiles: true}) {
		w.Upload(ctx, "acme", b.Dir)
	}
	settle(t, w, "acme")
	if !planted.Load() {
		t.Fatal("the test never planted its object: no job of v1/p0 ran")
	}
	g := planning.GroupKey{Stream: byID(w.Blocks(ctx, "acme"))[testworld.Live(w.Blocks(ctx, "acme"))[0].ID].Stream, Level: 1, RangeStart: day().UnixMilli()}
	versions := groupVersions(t, w, "acme", g)
	if v1 := versions[1]; v1.State != protocol.GroupSuperseded || v1.LastErrorKind != records.FailureNotDeterministic {
		t.Errorf("v1 is %s after a %q failure; want SUPERSEDED for not-deterministic", v1.State, v1.LastErrorKind)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// groupVersions is how each version of a group ended.
func groupVersions(t *testing.T, w *testworld.World, tenant string, g planning.GroupKey) map[int64]records.Group {
	t.Helper()
	return w.HeadHistory(tenant, g)
}

// flipBytes inverts n bytes of a file starting at the fraction at of its
// length.
func flipBytes(t *testing.T, path string, at float64, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start := int(float64(len(b)) * at)
	for i := start; i < start+n && i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func objectKey(t *testing.T, w *testworld.World, tenant, id, rel string) string {
	t.Helper()
	u, err := ulid.ParseStrict(id)
	if err != nil {
		t.Fatal(err)
	}
	k, err := w.Config.Layout.Block(tenant, u)
	if err != nil {
		t.Fatal(err)
	}
	return k.Object(rel)
}

func readObject(t *testing.T, w *testworld.World, tenant, id, rel string) []byte {
	t.Helper()
	return readKey(t, w, objectKey(t, w, tenant, id, rel))
}

func readKey(t *testing.T, w *testworld.World, key string) []byte {
	t.Helper()
	res, err := w.Env.Clients.S3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(w.Config.Bucket),
		Key: aws.String(key)})
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// repair uploads the sound files of a damaged block of tenant acme
// (dir) under its ULID, as an operator does before `sluice retry`, and
// tells the world its samples are to be kept.
func repair(ctx context.Context, w *testworld.World, dir string) error {
	if err := testworld.UploadFiles(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, "acme", dir); err != nil {
		return err
	}
	w.Repaired("acme", dir)
	return nil
}

// retryEvent is the planner's SQS message of `sluice retry` for block
// id of tenant acme.
func retryEvent(id string) (events.SQSEvent, error) {
	body, err := messages.Encode(messages.RetryRequest{Tenant: "acme", Block: id, Nonce: "t"})
	if err != nil {
		return events.SQSEvent{}, err
	}
	return events.SQSEvent{Records: []events.SQSMessage{{MessageId: "retry", Body: body, EventSource: "aws:sqs"}}}, nil
}

// uploadOneDamaged damages bad's index in the middle (its table of
// contents intact, so registration accepts it) and uploads it among the
// healthy blocks.
func uploadOneDamaged(ctx context.Context, t *testing.T, w *testworld.World, tenant string, blocks []blockgen.Block, bad blockgen.Block) {
	t.Helper()
	flipBytes(t, filepath.Join(bad.Dir, blockkey.IndexFile), 0.4, 64)
	for _, b := range blocks {
		if b.Dir == bad.Dir {
			w.UploadDamaged(ctx, tenant, b.Dir)
			continue
		}
		w.Upload(ctx, tenant, b.Dir)
	}
}
