package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

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
			blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 1, Series: 10, Seed: 4, ThanosFiles: true})
			w.Upload(ctx, "acme", blocks[0].Dir)
			if err := w.Pipeline.Settle(ctx, time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
				_, ok, err := w.Store.GetBlock(ctx, "acme", blocks[0].Meta.ULID.String())
				return ok, err
			}); err != nil {
				t.Fatal(err)
			}
			id := blocks[0].Meta.ULID.String()
			b, _, _ := w.Store.GetBlock(ctx, "acme", id)
			now := time.Now()
			g := records.Group{Tenant: "acme", Key: planning.GroupKey{Stream: b.Stream, Level: 1, RangeStart: b.MinT}, Version: 1,
				State: protocol.GroupClaiming, CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli(), Partitions: 1, Sources: []string{b.ID}}
			if err := w.Store.CreateVersion(ctx, records.Group{}, g, now, now); err != nil {
				t.Fatal(err)
			}
			ref := g.Ref()
			if err := w.Store.Claim(ctx, g, []records.Block{b}, now); err != nil {
				t.Fatal(err)
			}
			b, _, _ = w.Store.GetBlock(ctx, "acme", id)
			markGen, err := w.Store.Retire(ctx, ref, b, now, now)
			if err != nil {
				t.Fatal(err)
			}

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
			err = up.Execute(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen})
			if crash != errors.Is(err, errCrash) {
				t.Fatalf("mark: %v", err)
			}
			// SQS redelivers the MARK that died; it adopts its own write.
			deps.Hook = nil
			if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen}); err != nil {
				t.Fatalf("mark again: %v", err)
			}
			b, _, _ = w.Store.GetBlock(ctx, "acme", id)
			if b.MarkVersionID == "" {
				t.Fatal("the mark was never recorded")
			}
			delGen, err := w.Store.StartDelete(ctx, b, nil, time.Now())
			if err != nil {
				t.Fatalf("deletion after the mark is recorded: %v", err)
			}
			if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpDelete, Tenant: "acme", Block: id, Gen: delGen}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			k, _ := testworld.BlockKeyOf(w.Config.Layout, "acme", blocks[0].Dir)
			res, err := w.Env.Clients.S3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket), Prefix: aws.String(k.BlockPrefix())})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range res.Versions {
				t.Errorf("left behind: %s@%s", aws.ToString(v.Key), aws.ToString(v.VersionId))
			}
			if len(res.DeleteMarkers) > 0 {
				t.Errorf("%d delete markers: a delete without a VersionId", len(res.DeleteMarkers))
			}
		})
	}
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

// sentOps keeps what a planner sends instead of sending it, so a test can
// run the ops in the order the block's FIFO group would: after the op
// that is running.
type sentOps struct{ bodies []string }

func (s *sentOps) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.bodies = append(s.bodies, aws.ToString(in.MessageBody))
	return &sqs.SendMessageOutput{MessageId: aws.String(fmt.Sprintf("m%d", len(s.bodies)))}, nil
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
			blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 1, Series: 10, Seed: 5, ThanosFiles: true})
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
			markKey := objectKey(t, w, "acme", id, blockkey.DeletionMarkFile)

			deps := *w.Pipeline.Deps
			sent := &sentOps{}
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
			b, _, _ = w.Store.GetBlock(ctx, "acme", id)
			if b.MarkVersionID == "" || (foreign && b.MarkVersionID == evented) || (!foreign && b.MarkVersionID != evented) {
				t.Fatalf("the record names mark %q; the event named %q", b.MarkVersionID, evented)
			}
			// The block's op group runs what the planner sent after the MARK.
			var strays int
			for _, body := range sent.bodies {
				m, err := messages.Decode(body)
				if err != nil {
					t.Fatal(err)
				}
				op, ok := m.(messages.BlockOp)
				if !ok {
					continue
				}
				if op.Op == messages.OpDeleteStray {
					strays++
				}
				if err := up.Execute(ctx, op); err != nil {
					t.Fatalf("%s: %v", op.Op, err)
				}
			}
			if strays != 1 {
				t.Errorf("the planner sent %d DELETE_STRAY ops for the mark; want 1", strays)
			}
			var marks []string
			for _, v := range listVersions(t, w, "acme", id) {
				if v.RelPath == markKey {
					marks = append(marks, v.VersionID)
				}
			}
			if len(marks) != 1 || marks[0] != b.MarkVersionID {
				t.Fatalf("before the DELETE the deletion mark's versions are %v; want only the recorded %s", marks, b.MarkVersionID)
			}
			delGen, err := w.Store.StartDelete(ctx, b, nil, time.Now())
			if err != nil {
				t.Fatalf("deletion: %v", err)
			}
			if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpDelete, Tenant: "acme", Block: id, Gen: delGen}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			for _, v := range listVersions(t, w, "acme", id) {
				t.Errorf("left behind: %s@%s", v.RelPath, v.VersionID)
			}
		})
	}
}
