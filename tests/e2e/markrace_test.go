package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// A MARK op writes deletion-mark.json and then records its version; the
// sweep's deletion of the block races that gap (or the op dies in it). The
// deletion must lose until the mark is recorded — otherwise the mark's
// version is named by no record and its DELETE op leaves it behind for good
// (I4), as the demo once did under load — and after the DELETE nothing of
// the block may remain.
func TestDeletionWaitsForTheRecordedMark(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "record lost", true: "crash after write"}[crash]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := testworld.New(t, testworld.Options{})
			ctx := context.Background()
			id, markGen := retiredBlock(t, w, 4)

			deps := *w.Pipeline.Deps
			errCrash := errors.New("crash")
			deps.Hook = func(ctx context.Context, step pipeline.Step, _ string) error {
				if step != "uploader.mark-written" {
					return nil
				}
				// The sweep's deletion comes between the write and its record.
				b, _, _ := w.Store.GetBlock(ctx, "acme", id)
				if _, err := w.Store.StartDelete(ctx, b, nil, time.Now()); !records.IsConditionLost(err) {
					t.Errorf("deletion before the mark is recorded: %v, want a lost condition", err)
				}
				if crash {
					return errCrash
				}
				return nil
			}
			up := pipeline.Uploader{Deps: &deps}
			err := up.Execute(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen})
			if crash != errors.Is(err, errCrash) {
				t.Fatalf("mark: %v", err)
			}
			// SQS redelivers the MARK that died; it adopts its own write.
			deps.Hook = nil
			if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen}); err != nil {
				t.Fatalf("mark again: %v", err)
			}
			b, _, _ := w.Store.GetBlock(ctx, "acme", id)
			if b.MarkVersionID == "" {
				t.Fatal("the mark was never recorded")
			}
			deleteBlock(ctx, t, w, up, b)
		})
	}
}

// retiredBlock uploads one block, registers it and retires it by hand as
// a version's only source, and returns its id and the gen its MARK op
// carries: the MARK is the test's to run.
func retiredBlock(t *testing.T, w *testworld.World, seed int64) (string, int64) {
	t.Helper()
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 1, Series: 10, Seed: seed, ThanosFiles: true})
	w.Upload(ctx, "acme", blocks[0].Dir)
	id := blocks[0].Meta.ULID.String()
	if err := w.Pipeline.Settle(ctx, time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
		_, ok, err := w.Store.GetBlock(ctx, "acme", id)
		return ok, err
	}); err != nil {
		t.Fatal(err)
	}
	b, _, _ := w.Store.GetBlock(ctx, "acme", id)
	now := time.Now()
	g := records.Group{Tenant: "acme", Key: planning.GroupKey{Stream: b.Stream, Level: 1, RangeStart: b.MinT}, Version: 1,
		State: protocol.GroupClaiming, CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli(), Partitions: 1, Sources: []string{b.ID}}
	if err := w.Store.CreateVersion(ctx, records.Group{}, g, now, now); err != nil {
		t.Fatal(err)
	}
	if err := w.Store.Claim(ctx, g, []records.Block{b}, now); err != nil {
		t.Fatal(err)
	}
	b, _, _ = w.Store.GetBlock(ctx, "acme", id)
	markGen, err := w.Store.Retire(ctx, g.Ref(), b, now, now)
	if err != nil {
		t.Fatal(err)
	}
	return id, markGen
}

// A MARK op slower than the deletion delay is not sent twice: the sweep
// first looks at a retired block RedriveAfter after its retirement (the
// delay being shorter), so while the op is on its way the block's DEL entry
// is not due; once the mark is recorded the entry moves to the mark's time
// plus the delay, and the block is deleted then. (With the entry at the
// retirement plus the delay, the demo's sweep sent 60 MARKs again for 58
// blocks.)
func TestSlowMarkIsNotSentAgain(t *testing.T) {
	t.Parallel()
	steps := &testworld.Steps{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: steps.Hook}})
	ctx := context.Background()
	if w.Config.RedriveAfter <= 2*w.Config.DeletionDelay {
		t.Fatalf("the test needs RedriveAfter (%v) well over the deletion delay (%v)", w.Config.RedriveAfter, w.Config.DeletionDelay)
	}
	mark := steps.At("uploader.before-mark", "")
	blocks := halfDay(ctx, w, "acme", 46)
	settled := make(chan error, 1)
	go func() {
		settled <- w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
			for _, b := range blocks {
				r, _, err := w.Store.GetBlock(ctx, "acme", b.Meta.ULID.String())
				if err != nil || r.State != protocol.BlockDeleted {
					return false, err
				}
			}
			return w.Quiescent(ctx, "acme")
		})
	}()
	subject := mark.Wait(t, settleTimeout)
	var held records.Block
	for _, b := range blocks {
		if id := b.Meta.ULID.String(); strings.Contains(subject, id) {
			held, _, _ = w.Store.GetBlock(ctx, "acme", id)
		}
	}
	if held.State != protocol.BlockRetiring || held.MarkVersionID != "" {
		t.Fatalf("the block whose MARK is held is %s with mark %q; want RETIRING, unmarked", held.State, held.MarkVersionID)
	}
	if got := time.Duration(held.RetireAt-held.UpdatedAt) * time.Millisecond; got != w.Config.RedriveAfter {
		t.Errorf("the sweep first looks at the retired block %v after its retirement; want RedriveAfter (%v), not the %v delay", got, w.Config.RedriveAfter, w.Config.DeletionDelay)
	}
	// Hold the MARK past the deletion delay, sweeps running.
	time.Sleep(w.Config.DeletionDelay + 2*time.Second)
	mark.Release()
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// deleteBlock starts the deletion of block b, whose mark is recorded,
// runs its DELETE op, and fails on anything left under its prefix.
func deleteBlock(ctx context.Context, t *testing.T, w *testworld.World, up pipeline.Uploader, b records.Block) {
	t.Helper()
	delGen, err := w.Store.StartDelete(ctx, b, nil, time.Now())
	if err != nil {
		t.Fatalf("deletion after the mark is recorded: %v", err)
	}
	if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpDelete, Tenant: b.Tenant, Block: b.ID, Gen: delGen}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	res, err := w.Env.Clients.S3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket),
		Prefix: aws.String(objectKey(t, w, b.Tenant, b.ID, ""))})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Versions {
		t.Errorf("left behind: %s@%s", aws.ToString(v.Key), aws.ToString(v.VersionId))
	}
	if len(res.DeleteMarkers) > 0 {
		t.Errorf("%d delete markers: a delete without a VersionId", len(res.DeleteMarkers))
	}
}

// markVersions lists the versions of mark file (a deletion or no-compact
// mark) of block id of tenant acme.
func markVersions(t *testing.T, w *testworld.World, id, file string) []string {
	t.Helper()
	key := objectKey(t, w, "acme", id, file)
	var out []string
	for _, v := range listVersions(t, w, "acme", id) {
		if v.RelPath == key {
			out = append(out, v.VersionID)
		}
	}
	return out
}

// runOps runs the block ops a planner sent to mb, in order, as the
// block's FIFO group would once the op before them is done, and counts
// the DELETE_STRAY ops among them.
func runOps(ctx context.Context, t *testing.T, up pipeline.Uploader, mb *testworld.Mailbox) (strays int) {
	t.Helper()
	for _, m := range mb.Take(func(m testworld.Mail) bool { return m.Queue == "ops" }) {
		op := m.Msg.(messages.BlockOp)
		if op.Op == messages.OpDeleteStray {
			strays++
		}
		if err := up.Execute(ctx, op); err != nil {
			t.Fatalf("%s: %v", op.Op, err)
		}
	}
	return strays
}

// A deletion mark's event can reach the planner while the retirement's
// MARK op is between writing its mark and recording it: the event is of
// that very mark (Sluice's own), or of another tool's mark written beside
// it in that gap (an operator's `thanos tools bucket mark` from a stale
// list). The record names no mark yet, so the planner cannot tell them
// apart. Before, it left both alone, and another tool's mark outlived the
// block's DELETE, which deletes only the versions the record names: a
// partial block to every reader. Now its DELETE_STRAY runs behind the MARK
// in the block's op order and deletes the version only if the record does
// not name it then: another tool's goes, Sluice's own stays until the
// DELETE.
func TestDeletionMarkInTheMarksRecordGap(t *testing.T) {
	for _, foreign := range []bool{false, true} {
		name := map[bool]string{false: "Sluice's own mark", true: "another tool's mark"}[foreign]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := testworld.New(t, testworld.Options{})
			ctx := context.Background()
			id, markGen := retiredBlock(t, w, 5)
			markKey := objectKey(t, w, "acme", id, blockkey.DeletionMarkFile)

			deps := *w.Pipeline.Deps
			// The planner's sends are kept, to run in the op group's order.
			sent := testworld.NewMailbox(deps.Send.Queues)
			plannerDeps := deps
			plannerDeps.Send = messages.Sender{SQS: sent, Queues: deps.Send.Queues}
			var evented string
			deps.Hook = func(ctx context.Context, step pipeline.Step, _ string) error {
				if step != "uploader.mark-written" {
					return nil
				}
				if foreign {
					evented = putMark(t, w, "acme", id, blockkey.DeletionMarkFile, time.Now())
				} else {
					head, err := w.Env.Clients.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(markKey)})
					if err != nil {
						t.Fatalf("the MARK's own mark: %v", err)
					}
					evented = aws.ToString(head.VersionId)
				}
				// The mark's event, as AWS sends it, reaches the planner now.
				ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "event-1",
					Body: testworld.ObjectCreatedBody(w.Config.Bucket, markKey, evented, true, time.Now())}}}
				resp, err := pipeline.Planner{Deps: &plannerDeps}.Handle(ctx, ev)
				if err != nil || len(resp.BatchItemFailures) > 0 {
					t.Fatalf("planner: %v, failures %v", err, resp.BatchItemFailures)
				}
				return nil
			}
			up := pipeline.Uploader{Deps: &deps}
			if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen}); err != nil {
				t.Fatalf("mark: %v", err)
			}
			deps.Hook = nil
			b, _, _ := w.Store.GetBlock(ctx, "acme", id)
			if b.MarkVersionID == "" || (foreign && b.MarkVersionID == evented) || (!foreign && b.MarkVersionID != evented) {
				t.Fatalf("the record names mark %q; the event named %q", b.MarkVersionID, evented)
			}
			// The block's op group runs what the planner sent after the MARK.
			if strays := runOps(ctx, t, up, sent); strays != 1 {
				t.Errorf("the planner sent %d DELETE_STRAY ops for the mark; want 1", strays)
			}
			if marks := markVersions(t, w, id, blockkey.DeletionMarkFile); len(marks) != 1 || marks[0] != b.MarkVersionID {
				t.Fatalf("before the DELETE the deletion mark's versions are %v; want only the recorded %s", marks, b.MarkVersionID)
			}
			deleteBlock(ctx, t, w, up, b)
		})
	}
}

// A duplicate delivery of a MARK op reads the record before its twin
// records Sluice's mark, and reaches S3 after another tool's mark was
// written beside it: its If-None-Match PUT finds a mark in place, and the
// version it finds is the other tool's. Meanwhile the twin has recorded
// Sluice's, the block's op group has moved on, and the DELETE_STRAY that
// the other tool's mark asked for has deleted it. The duplicate's record
// write must lose (it requires the record to name no other mark): had it
// landed, the record would name a deleted version and Sluice's own mark
// would be named by nothing, left behind by the block's DELETE.
func TestDuplicateMarkDoesNotReplaceTheRecordedMark(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{})
	ctx := context.Background()
	id, markGen := retiredBlock(t, w, 6)
	markKey := objectKey(t, w, "acme", id, blockkey.DeletionMarkFile)
	op := messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen}
	plannerDeps := *w.Pipeline.Deps
	sent := testworld.NewMailbox(plannerDeps.Send.Queues)
	plannerDeps.Send = messages.Sender{SQS: sent, Queues: plannerDeps.Send.Queues}
	plain := pipeline.Uploader{Deps: w.Pipeline.Deps}

	var foreign, ours string
	twinDeps := *w.Pipeline.Deps
	twinDeps.Hook = func(ctx context.Context, step pipeline.Step, _ string) error {
		if step == "uploader.mark-written" {
			foreign = putMark(t, w, "acme", id, blockkey.DeletionMarkFile, time.Now())
		}
		return nil
	}
	dupDeps := *w.Pipeline.Deps
	dupDeps.Hook = func(ctx context.Context, step pipeline.Step, _ string) error {
		switch step {
		case "uploader.before-mark":
			// The duplicate has read the record (no mark yet). Its twin
			// runs whole: writes Sluice's mark, another tool writes its
			// own beside it, the twin records Sluice's.
			if err := (pipeline.Uploader{Deps: &twinDeps}).Execute(ctx, op); err != nil {
				t.Fatalf("the twin MARK: %v", err)
			}
			b, _, _ := w.Store.GetBlock(ctx, "acme", id)
			if ours = b.MarkVersionID; ours == "" || ours == foreign {
				t.Fatalf("the twin recorded %q (the other tool's is %q)", ours, foreign)
			}
			// The other tool's mark event, as AWS sends it.
			ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "event-1",
				Body: testworld.ObjectCreatedBody(w.Config.Bucket, markKey, foreign, true, time.Now())}}}
			if resp, err := (pipeline.Planner{Deps: &plannerDeps}).Handle(ctx, ev); err != nil || len(resp.BatchItemFailures) > 0 {
				t.Fatalf("planner: %v, failures %v", err, resp.BatchItemFailures)
			}
		case "uploader.mark-written":
			// The duplicate found the other tool's mark in place. The
			// twin's message is done, so the group runs the op the
			// event asked for.
			if strays := runOps(ctx, t, plain, sent); strays != 1 {
				t.Errorf("the planner sent %d DELETE_STRAY ops for the other tool's mark; want 1", strays)
			}
		}
		return nil
	}
	if err := (pipeline.Uploader{Deps: &dupDeps}).Execute(ctx, op); err != nil {
		t.Fatalf("the duplicate MARK: %v", err)
	}
	b, _, _ := w.Store.GetBlock(ctx, "acme", id)
	if b.MarkVersionID != ours {
		t.Fatalf("the record names mark %q, want Sluice's %q (the other tool's, deleted, is %q)", b.MarkVersionID, ours, foreign)
	}
	if marks := markVersions(t, w, id, blockkey.DeletionMarkFile); len(marks) != 1 || marks[0] != ours {
		t.Fatalf("the deletion mark's versions are %v; want only Sluice's %s", marks, ours)
	}
	deleteBlock(ctx, t, w, plain, b)
}
