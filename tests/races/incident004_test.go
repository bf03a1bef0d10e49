package races

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Neon's race (004_b0eb2b2dc6464648.txt): a DELETE of a layer file was
// delayed, the same key was uploaded again, and the delayed DELETE — by
// name — removed the new file. Sluice's DELETEs name VersionIds, its ops
// of one block key run in one FIFO group, and each op acts only at its
// gen; a newer object under the same key is never what a delayed DELETE
// removes.

type world004 struct {
	*replay
	g planning.GroupKey
}

func newWorld004(t *testing.T) *world004 {
	r := newReplay(t, seed004, "tenant", func(c *config.Config) {
		c.Policy.MaxSeriesPerPartition = 60 // 6 × 40 series → 4 partitions
		c.Policy.SeriesChurn = 1            // series summed over time, as when the seed was recorded
	})
	return &world004{replay: r, g: planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: day().UnixMilli()}}
}

func isOp(kind messages.OpKind, block string) func(testworld.Mail) bool {
	return func(m testworld.Mail) bool {
		op, ok := m.Msg.(messages.BlockOp)
		return ok && op.Op == kind && (block == "" || op.Block == block)
	}
}

// pumpKeeping delivers everything to main until nothing is left, as pump
// does, and returns a copy of each delivered message keep selects, for a
// test to deliver again late.
func (w *world004) pumpKeeping(keep func(testworld.Mail) bool) []testworld.Mail {
	w.t.Helper()
	var kept []testworld.Mail
	for round := 0; round < 20; round++ {
		w.drainEvents(w.main)
		mail := w.mb.Take(nil)
		if len(mail) == 0 {
			break
		}
		for _, m := range mail {
			if keep(m) {
				kept = append(kept, m)
			}
			if err := w.deliver(w.main, m); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	return kept
}

// blockID is the ULID of an uploaded block (its directory's name).
func blockID(b blockgen.Block) string { return b.Meta.ULID.String() }

// reupload uploads b again, as a shipper that retries does: new versions
// of every file, meta.json last.
func (w *world004) reupload(b blockgen.Block) {
	w.t.Helper()
	if err := testworld.UploadBlock(w.ctx, w.w.Env.Clients.S3, w.w.Config.Bucket, w.w.Config.Layout, w.tenant, b.Dir); err != nil {
		w.t.Fatal(err)
	}
}

// current returns the current version of every object under the block,
// "rel@vid".
func (w *world004) current(id string) []string {
	w.t.Helper()
	prefix := w.tenant + "/" + id + "/"
	out, err := w.w.Env.Clients.S3.ListObjectVersions(w.ctx, &s3.ListObjectVersionsInput{
		Bucket: aws.String(w.w.Config.Bucket), Prefix: aws.String(prefix)})
	if err != nil {
		w.t.Fatal(err)
	}
	var vs []string
	for _, v := range out.Versions {
		if aws.ToBool(v.IsLatest) {
			vs = append(vs, strings.TrimPrefix(aws.ToString(v.Key), prefix)+"@"+aws.ToString(v.VersionId))
		}
	}
	slices.Sort(vs)
	return vs
}

func recorded(b records.Block) []string {
	var vs []string
	for _, v := range b.AllVersions() {
		vs = append(vs, v.RelPath+"@"+v.VersionID)
	}
	slices.Sort(vs)
	return vs
}

// TestIncident004DelayedDeleteVsShipperReupload: a compacted source's
// DELETE op (gen g) is delayed; meanwhile its shipper uploads the block
// again — the same key, new objects. The delayed DELETE runs: it removes
// exactly the versions its record names, and the re-uploaded objects
// survive it (no delete marker, nothing newer touched). Sluice then deletes
// the re-upload on purpose — its data is already in the compacted output,
// so compacting it again would double it — with a DELETE_STRAY op that
// names the new versions and runs after the DELETE in the key's FIFO group.
func TestIncident004DelayedDeleteVsShipperReupload(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	x := blockID(corpus.v1[2])
	w.clock.Advance(deletionDelay + time.Second)
	w.sweep(w.main)
	del := w.takeOne(isOp(messages.OpDelete, x)) // delayed
	w.pump(w.main, nil)                          // the other sources go
	before := w.block(x)
	if before.State != protocol.BlockDeleted || del.Msg.(messages.BlockOp).Gen != before.Gen {
		t.Fatalf("source %s is %s at gen %d, its DELETE carries gen %d", x, before.State, before.Gen, del.Msg.(messages.BlockOp).Gen)
	}
	w.reupload(corpus.v1[2])
	w.drainEvents(w.main) // recognised: its new versions get a DELETE_STRAY
	stray := w.takeOne(isOp(messages.OpDeleteStray, x))
	var newer []string // the re-upload: current, and named by no record
	for _, v := range w.current(x) {
		if !slices.Contains(recorded(before), v) {
			newer = append(newer, v)
		}
	}
	if len(newer) != len(before.Files)+1 {
		t.Fatalf("re-upload: current %v, recorded %v", w.current(x), recorded(before))
	}
	w.readable("after the re-upload")
	// The delayed DELETE runs now.
	if err := w.deliver(w.main, del); err != nil {
		t.Fatal(err)
	}
	if got := w.objectVersions(x); !slices.Equal(got, newer) {
		t.Fatalf("after the delayed DELETE the key holds %v; want exactly the re-upload %v", got, newer)
	}
	w.readable("after the delayed DELETE")
	if err := w.deliver(w.main, stray); err != nil {
		t.Fatal(err)
	}
	if got := w.objectVersions(x); len(got) != 0 {
		t.Fatalf("after the stray delete the key holds %v", got)
	}
	w.finish()
}

// TestIncident004DelayedDeleteVsRetriedCompaction: the first attempt of
// partition 3 uploads its output and dies before committing. Its lease
// expires and a second attempt takes the partition over; then the version
// is superseded (stuck), and the orphan sweep at finality deletes the first
// attempt's objects by VersionId. That DELETE_STRAY is delivered twice (SQS
// is at least once); the second copy is delayed. Meanwhile the second
// attempt uploads under the same key — which is free now, so S3 takes new
// objects. The delayed copy then runs and names the old versions: the newer
// objects survive it. (They belong to no record — the second attempt's
// commit is fenced — so the version's second orphan sweep deletes them.)
func TestIncident004DelayedDeleteVsRetriedCompaction(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	w.wantState(w.g, 1, protocol.GroupPlanned)
	job3 := w.takeOne(isJob(1, 3))
	first := w.actor("attempt-1", nil)
	c1 := first.steps.At("compact.before-commit", "@v1/p3")
	d1 := w.goDeliver(first, job3)
	c1.Wait(t, stepTimeout)
	c1.Crash() // uploaded, never committed
	if err := wait(t, d1); err == nil {
		t.Fatal("the crashed attempt returned no error")
	}
	out := compaction.OutputULID(time.UnixMilli(w.partitions(w.g, 1)[3].CreatedAt), w.tenant, w.g.String(), 1, 3).String()
	firstObjects := w.objectVersions(out)
	if len(firstObjects) == 0 {
		t.Fatal("the first attempt uploaded nothing")
	}
	w.run(1, 0, 1, 2)
	w.clock.Advance(leaseDuration + time.Second)
	second := w.actor("attempt-2", nil)
	r2 := second.steps.At("compact.after-read", "@v1/p3")
	d2 := w.goDeliver(second, job3)
	r2.Wait(t, stepTimeout)
	// Stuck: the sweep supersedes v1; its orphan sweep deletes attempt 1's
	// objects (the first copy of the DELETE_STRAY runs, the second waits).
	w.clock.Advance(stuckAfter + time.Minute)
	w.sweep(w.main)
	w.wantState(w.g, 1, protocol.GroupSuperseded)
	stray := w.takeOne(isOp(messages.OpDeleteStray, out))
	if err := w.deliver(w.main, stray); err != nil {
		t.Fatal(err)
	}
	if got := w.objectVersions(out); len(got) != 0 {
		t.Fatalf("after the orphan sweep %s holds %v", out, got)
	}
	// Attempt 2 re-creates the key, then the delayed copy runs.
	r2.Release()
	if err := wait(t, d2); err != nil {
		t.Fatal(err)
	}
	newer := w.objectVersions(out)
	if len(newer) != len(firstObjects) || slices.Equal(newer, firstObjects) {
		t.Fatalf("attempt 2 wrote %v (attempt 1: %v)", newer, firstObjects)
	}
	if err := w.deliver(w.main, stray); err != nil {
		t.Fatal(err)
	}
	if got := w.objectVersions(out); !slices.Equal(got, newer) {
		t.Fatalf("the delayed DELETE_STRAY took newer objects: %v → %v", newer, got)
	}
	if acc, _ := w.commits("@v1/p3"); len(acc) != 0 {
		t.Fatalf("a commit of v1/p3 was accepted after v1 was superseded: %v", acc)
	}
	w.finish()
	if got := w.objectVersions(out); len(got) != 0 {
		t.Fatalf("attempt 2's orphans survived the second orphan sweep: %v", got)
	}
}

// TestIncident004ReuploadWhileMarkDelayed: the source is RETIRING and its
// MARK op is delayed when the shipper uploads it again. The re-upload's
// DELETE_STRAY queues behind the MARK in the key's FIFO group. The MARK
// writes deletion-mark.json (a new key, nothing to collide with), the
// DELETE_STRAY removes only the re-upload's versions — the recorded ones
// become current again — and after the deletion delay the DELETE removes
// the recorded ones, mark included. At every step a reader sees every
// sample.
func TestIncident004ReuploadWhileMarkDelayed(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	x := blockID(corpus.v1[4])
	w.pump(w.main, isOp(messages.OpMark, x))
	w.wantState(w.g, 1, protocol.GroupRetired)
	mark := w.takeOne(isOp(messages.OpMark, x))
	rec := w.block(x)
	w.reupload(corpus.v1[4])
	w.drainEvents(w.main)
	stray := w.takeOne(isOp(messages.OpDeleteStray, x))
	w.readable("re-uploaded while retiring")
	for _, m := range []testworld.Mail{mark, stray} { // FIFO order of the key
		if err := w.deliver(w.main, m); err != nil {
			t.Fatal(err)
		}
	}
	rec = w.block(x)
	if rec.MarkVersionID == "" {
		t.Fatalf("the delayed MARK was not recorded: %+v", rec)
	}
	if got := w.current(x); !slices.Equal(got, recorded(rec)) {
		t.Fatalf("after MARK and DELETE_STRAY the current objects are %v; want the recorded %v", got, recorded(rec))
	}
	w.readable("after the stray delete")
	w.finish()
	if got := w.objectVersions(x); len(got) != 0 {
		t.Fatalf("%s still holds %v", x, got)
	}
}

// TestIncident004StaleOpsDropped: every PUBLISH and MARK op is delivered a
// second time, late — after the blocks they were for have moved on
// (outputs compacted again by a second version, sources deleted). Each op
// carries the gen it was sent at; every late copy is dropped, and no object
// version appears or disappears.
func TestIncident004StaleOpsDropped(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	late := w.pumpKeeping(func(m testworld.Mail) bool {
		return isOp(messages.OpPublish, "")(m) || isOp(messages.OpMark, "")(m)
	})
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.upload(corpus.late)
	w.pump(w.main, nil)
	w.wantState(w.g, 2, protocol.GroupRetired)
	w.clock.Advance(deletionDelay + time.Second)
	w.sweep(w.main)
	w.pump(w.main, nil)
	all := func() []string {
		out, err := w.w.Env.Clients.S3.ListObjectVersions(w.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.w.Config.Bucket)})
		if err != nil {
			t.Fatal(err)
		}
		var vs []string
		for _, v := range out.Versions {
			vs = append(vs, aws.ToString(v.Key)+"@"+aws.ToString(v.VersionId))
		}
		slices.Sort(vs)
		return vs
	}
	before := all()
	if len(late) < 10 {
		t.Fatalf("only %d PUBLISH/MARK ops to replay", len(late))
	}
	for _, m := range late {
		if err := w.deliver(w.main, m); err != nil {
			t.Fatal(err)
		}
	}
	if after := all(); !slices.Equal(before, after) {
		t.Fatalf("late ops changed the bucket: %d versions before, %d after", len(before), len(after))
	}
	t.Logf("%d late PUBLISH/MARK ops dropped", len(late))
	w.finish()
}

// TestIncident004StaleOpsInBatches: the late PUBLISH copies of
// TestIncident004StaleOpSameStateNewerGen — each meets its output LIVE
// again, at a newer gen, so only the gen stops it — come back ten to an
// invocation, as Lambda batches a FIFO queue. The uploader must still
// drop each op at its gen, which it reads for each op right before acting
// (a read for the whole batch let a stale MARK through in chaos seed 53).
func TestIncident004StaleOpsInBatches(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	late := w.publishesOutlivingTheirGen()
	if len(late) < 2 {
		t.Fatalf("%d PUBLISH ops to replay; want a batch of several", len(late))
	}
	before := w.allVersions()
	d := *w.main.deps
	d.OpContext = testworld.WithOp
	uploader := pipeline.Uploader{Deps: &d}
	for start := 0; start < len(late); start += 10 {
		var ev events.SQSEvent
		for i, m := range late[start:min(start+10, len(late))] {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprintf("late-%d", start+i), Body: m.Body,
				Attributes: map[string]string{"MessageGroupId": m.Group, "ApproximateReceiveCount": "2"}})
		}
		resp, err := uploader.Handle(w.ctx, ev)
		if err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("batch of %d late ops: %v, %d failed", len(ev.Records), err, len(resp.BatchItemFailures))
		}
	}
	if after := w.allVersions(); !slices.Equal(before, after) {
		t.Fatalf("late ops changed the bucket: %d versions before, %d after", len(before), len(after))
	}
	t.Logf("%d late PUBLISH ops met their outputs LIVE at a newer gen and were dropped, ten to a batch", len(late))
	w.finish()
}

// allVersions lists every object version in the bucket, sorted.
func (w *world004) allVersions() []string {
	w.t.Helper()
	out, err := w.w.Env.Clients.S3.ListObjectVersions(w.ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.w.Config.Bucket)})
	if err != nil {
		w.t.Fatal(err)
	}
	var vs []string
	for _, v := range out.Versions {
		vs = append(vs, aws.ToString(v.Key)+"@"+aws.ToString(v.VersionId))
	}
	slices.Sort(vs)
	return vs
}

// publishesOutlivingTheirGen sets up the timeline only a gen can stop:
// version 1's outputs are published (a copy of each PUBLISH kept and
// returned); a late block makes version 2, which claims them; version 2
// stalls and is superseded, and its cleanup releases them, LIVE again at
// a newer gen.
func (w *world004) publishesOutlivingTheirGen() []testworld.Mail {
	w.t.Helper()
	w.upload(corpus.v1...)
	late := w.pumpKeeping(isOp(messages.OpPublish, ""))
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.upload(corpus.late)
	w.pump(w.main, func(m testworld.Mail) bool {
		j, ok := m.Msg.(messages.Job)
		return ok && j.Version == 2
	})
	w.wantState(w.g, 2, protocol.GroupPlanned)
	w.clock.Advance(stuckAfter + time.Minute)
	w.sweep(w.main)
	w.wantState(w.g, 2, protocol.GroupSuperseded)
	return late
}

// TestIncident004StaleOpSameStateNewerGen: the late op that only its gen
// can stop — one that finds its block in the very state it was sent for.
// Version 1's outputs are published (a copy of each PUBLISH kept); a late
// block makes version 2, which claims them; version 2 stalls and is
// superseded, and its cleanup releases them: LIVE again, at a newer gen.
// The late PUBLISH copies arrive then. Each must be dropped at its gen, not
// act (the Monitor judges the uploader's decision; the records and the
// bucket must not change).
func TestIncident004StaleOpSameStateNewerGen(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	late := w.publishesOutlivingTheirGen()
	if len(late) == 0 {
		t.Fatal("no PUBLISH op to replay")
	}
	before := map[string]records.Block{}
	for _, m := range late {
		op := m.Msg.(messages.BlockOp)
		b := w.block(op.Block)
		if b.State != protocol.BlockLive || b.Gen <= op.Gen {
			t.Fatalf("output %s is %s at gen %d; want LIVE again at a gen above the PUBLISH's %d", b.ID, b.State, b.Gen, op.Gen)
		}
		before[b.ID] = b
	}
	vs := w.objectVersions(late[0].Msg.(messages.BlockOp).Block)
	for _, m := range late {
		if err := w.deliver(w.main, m); err != nil {
			t.Fatal(err)
		}
	}
	for id, b := range before {
		if a := w.block(id); a.Gen != b.Gen || a.MetaVersionID != b.MetaVersionID || a.State != b.State {
			t.Errorf("a late PUBLISH changed %s: gen %d→%d, meta %s→%s, %s→%s", id, b.Gen, a.Gen, b.MetaVersionID, a.MetaVersionID, b.State, a.State)
		}
	}
	if after := w.objectVersions(late[0].Msg.(messages.BlockOp).Block); !slices.Equal(vs, after) {
		t.Errorf("a late PUBLISH changed the bucket: %v → %v", vs, after)
	}
	t.Logf("%d late PUBLISH ops met their outputs LIVE at a newer gen and were dropped", len(late))
	w.finish()
}

// TestIncident004PublishDelayedPastDeletionDelay: the ops of different keys
// have no order between them. Version 1 completes; one output's PUBLISH is
// delayed — longer than the deletion delay. The sources may be marked and
// deleted only once every output is published (the cleaner waits), so a
// reader keeps seeing every sample: through the sources while the output
// is unpublished, through the outputs afterwards.
func TestIncident004PublishDelayedPastDeletionDelay(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	held := func(m testworld.Mail) bool {
		op, ok := m.Msg.(messages.BlockOp)
		return ok && op.Op == messages.OpPublish && w.partitions(w.g, 1)[0].Output == op.Block
	}
	w.pump(w.main, held)
	if len(w.mb.Peek(held)) != 1 {
		t.Fatal("no PUBLISH of p0's output was held")
	}
	for round := 0; round < 3; round++ {
		w.clock.Advance(deletionDelay + time.Minute)
		w.sweep(w.main)
		w.pump(w.main, held)
		w.readable("while p0's output waits to be published")
	}
	w.finish()
}
