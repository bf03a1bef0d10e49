package races

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Protocol bugs the chaos run found, each replayed here deterministically:
// a handler dies (or an AWS call fails) at one point, and the pipeline
// must still converge with I1–I4 intact. The first seven failed until
// c9cb5f1 and stay as regression tests; TestBugLateEventForDeletedVersion
// and TestBugUploadedTwiceBeforeRegistration fail until their fixes land.
// docs/proofs.md names the seed that found each and the fix.

var errDied = errors.New("races: the handler died here")

// dyingSQS fails the first send whose body contains match: the handler
// dies after the write before it and before its message goes out.
type dyingSQS struct {
	messages.SQS
	match string
	after bool // die right after the send went out
	done  atomic.Bool
}

func (d *dyingSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if strings.Contains(aws.ToString(in.MessageBody), d.match) && d.done.CompareAndSwap(false, true) {
		if d.after {
			if _, err := d.SQS.SendMessage(ctx, in, o...); err != nil {
				return nil, err
			}
		}
		return nil, errDied
	}
	return d.SQS.SendMessage(ctx, in, o...)
}

// dyingOn gives actor a a sender that dies on the first message containing
// match.
func (r *replay) dyingOn(a *actor, match string) *dyingSQS {
	d := &dyingSQS{SQS: r.mb, match: match}
	a.deps.Send = messages.Sender{SQS: d, Queues: r.w.Config.Queues}
	return d
}

// throttledList fails the first LIST with S3's 503 SlowDown: how the
// planner looks for a re-upload's versions (a HEAD per file until 3790d42,
// one LIST of the block's prefix since).
type throttledList struct {
	pipeline.S3
	done atomic.Bool
}

func (t *throttledList) ListObjectVersions(ctx context.Context, in *s3.ListObjectVersionsInput, o ...func(*s3.Options)) (*s3.ListObjectVersionsOutput, error) {
	if t.done.CompareAndSwap(false, true) {
		return nil, &smithy.GenericAPIError{Code: "SlowDown", Message: "Please reduce your request rate.", Fault: smithy.FaultServer}
	}
	return t.S3.ListObjectVersions(ctx, in, o...)
}

// TestBugDeleteLostWhenSweepDiesAfterStartDelete (chaos seeds 1, 3): the
// sweep moves a retired source RETIRING → DELETED and, in the same
// transaction, takes its DEL entry off the agenda; then it sends the DELETE
// op. A sweep that dies in between (Lambda timeout, crash, a failed
// SendMessage) leaves the block DELETED in the table with every object
// still in the bucket, and nothing ever sends the DELETE again: I4.
func TestBugDeleteLostWhenSweepDiesAfterStartDelete(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.clock.Advance(deletionDelay + time.Second)
	sweeper := w.actor("sweeper", nil)
	w.dyingOn(sweeper, `"op":"DELETE"`)
	if err := (pipeline.Cleaner{Deps: sweeper.deps}).Sweep(w.ctx); !errors.Is(err, errDied) {
		t.Fatalf("the sweep did not die sending a DELETE: %v", err)
	}
	w.finish()
}

// TestBugDeleteLostWhenCleanupDiesAfterDiscard (chaos): the same for a
// superseded version's outputs: PENDING → DISCARDED, then the DELETE op.
// A cleanup that dies in between leaves the output DISCARDED with its
// objects; the retried cleanup skips it (no longer PENDING) and the orphan
// sweeps skip every version a record names.
func TestBugDeleteLostWhenCleanupDiesAfterDiscard(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	w.run(1, 0, 1, 2) // p3's job is lost: the version gets stuck
	w.mb.Take(isNote)
	w.clock.Advance(stuckAfter + time.Minute)
	sweeper := w.actor("sweeper", nil)
	w.dyingOn(sweeper, `"op":"DELETE"`)
	if err := (pipeline.Cleaner{Deps: sweeper.deps}).Sweep(w.ctx); !errors.Is(err, errDied) {
		t.Fatalf("the cleanup did not die sending a DELETE: %v", err)
	}
	w.wantState(w.g, 1, protocol.GroupSuperseded)
	w.mb.Take(isJob(1, 3))
	w.finish()
}

// TestBugDeleteLostWhenNextVersionComesFirst (chaos seed 11, CI run 13):
// the cleanup of a superseded version dies after discarding an output and
// before sending its DELETE, and a plan request (a late or duplicated
// event) creates the next version before any sweep re-drives the cleanup.
// The group's one active agenda entry now stands for the next version, so
// the old one is visited again only by its second orphan sweep, which
// spared every version a record names — the DISCARDED record names its
// output's files, so they stayed in the bucket for good (I4). The second
// orphan sweep now also re-sends the DELETE ops of the version's
// discarded outputs (and discards any still PENDING).
func TestBugDeleteLostWhenNextVersionComesFirst(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	w.run(1, 0) // the other jobs are lost: the version gets stuck with one output
	w.mb.Take(isNote)
	w.clock.Advance(stuckAfter + time.Minute)
	sweeper := w.actor("sweeper", nil)
	w.dyingOn(sweeper, `"op":"DELETE"`)
	if err := (pipeline.Cleaner{Deps: sweeper.deps}).Sweep(w.ctx); !errors.Is(err, errDied) {
		t.Fatalf("the cleanup did not die sending a DELETE: %v", err)
	}
	w.wantState(w.g, 1, protocol.GroupSuperseded)
	for p := 1; p < 4; p++ {
		w.mb.Take(isJob(1, p))
	}
	late := testworld.Mail{Queue: "plan", Group: w.g.String(), Msg: messages.PlanRequest{Tenant: w.tenant, Group: w.g.String(), Why: "a late event"}}
	if err := w.deliver(w.main, late); err != nil {
		t.Fatal(err)
	}
	if h := w.head(w.g); h.Version != 2 {
		t.Fatalf("the plan request did not create v2 first: the head is v%d %s", h.Version, h.State)
	}
	w.finish()
}

// topLevelOnly makes the 12h groups the top level and keeps ranges from
// closing by time during the test: nothing but the cleaner's re-plan can
// bring the group back (docs/design.md: "completion re-plans"). One level up, a
// range closing by time would compact the forgotten blocks at that level,
// CloseDelay later; at the top level nothing ever does.
func topLevelOnly(c *config.Config) {
	c.Policy.Ranges = []time.Duration{12 * time.Hour}
	c.Policy.CloseDelay = 24 * time.Hour
}

// lateAfterRetired runs version 1 to RETIRED, uploads the late block and
// returns its S3 notification, for the test to deliver itself.
func (w *world003) lateAfterRetired() events.SQSMessage {
	w.t.Helper()
	w.plan()
	w.run(1, 0, 1, 2, 3)
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.upload(corpus.late)
	evs := w.takeEvents()
	if len(evs) != 1 {
		w.t.Fatalf("%d S3 notifications after the late upload, want its one", len(evs))
	}
	return evs[0]
}

// plannerDiesClaiming runs lateAfterRetired, delivers the late block's
// notification to a planner that dies after claiming version 2's sources
// and before moving it to PLANNED, and returns version 2, left CLAIMING.
func (w *world003) plannerDiesClaiming() records.Group {
	w.t.Helper()
	late := w.lateAfterRetired()
	planner := w.actor("planner", nil)
	planned := planner.steps.At("planner.before-planned", "@v2")
	done := w.goEvent(planner, late)
	planned.Wait(w.t, stepTimeout)
	planned.Crash()
	if err := wait(w.t, done); err == nil {
		w.t.Fatal("the planner did not die")
	}
	return w.wantState(w.g, 2, protocol.GroupClaiming)
}

// TestBugReplanLostWhenCleanupDiesAfterFinish (chaos seed 8): a planner
// died after claiming (version 2 stays CLAIMING); the sweep supersedes it
// after StuckAfter, releases the claims, takes the version off the agenda
// (FinishVersion) and only then sends the re-plan. A cleanup that dies
// before that send leaves the released blocks unplanned for good: the late
// block and the outputs it overlaps stay live side by side (I2), nothing
// will look at the group again.
func TestBugReplanLostWhenCleanupDiesAfterFinish(t *testing.T) {
	t.Parallel()
	w := newWorld003With(t, topLevelOnly)
	w.plannerDiesClaiming()
	w.clock.Advance(stuckAfter + time.Minute)
	sweeper := w.actor("sweeper", nil)
	w.dyingOn(sweeper, `"sluice":"plan"`)
	if err := (pipeline.Cleaner{Deps: sweeper.deps}).Sweep(w.ctx); !errors.Is(err, errDied) {
		t.Fatalf("the cleanup did not die sending the re-plan: %v", err)
	}
	w.wantState(w.g, 2, protocol.GroupSuperseded)
	w.finish()
}

// TestBugReplanLostWhenRetireDiesAfterFinish: the same in finishRetired. A
// late block arrives while version 1 runs; the planner backs off ("group
// busy: completion re-plans"). The cleaner retires version 1, takes it off
// the agenda, and dies before sending that re-plan: the late block is never
// compacted and overlaps version 1's outputs for good (I2).
func TestBugReplanLostWhenRetireDiesAfterFinish(t *testing.T) {
	t.Parallel()
	w := newWorld003With(t, topLevelOnly)
	w.plan()
	w.upload(corpus.late)
	w.drainEvents(w.main) // registered; the group is busy
	w.run(1, 0, 1, 2, 3)
	cleaner := w.actor("cleaner", nil)
	w.dyingOn(cleaner, `"sluice":"plan"`)
	var died bool
	for round := 0; round < 10 && !died; round++ {
		w.drainEvents(w.main)
		for _, m := range w.mb.Take(nil) {
			a := w.main
			if isNote(m) && !died {
				a = cleaner
			}
			if err := w.deliver(a, m); errors.Is(err, errDied) {
				died = true
			} else if err != nil {
				t.Fatal(err)
			}
		}
	}
	if !died {
		t.Fatal("the cleaner never sent a re-plan")
	}
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.finish()
}

// TestBugMarkLostWhenRivalCleanerRetires (chaos seed 1): two deliveries of
// a cleaner note run at once. Cleaner A retires source X (CLAIMED →
// RETIRING) and dies before sending X's MARK op; cleaner B's retire of X
// loses its condition — B takes that as "someone else did it" — and B
// moves the version to RETIRED. A's redelivery then finds the version
// RETIRED and does nothing: X never gets its deletion mark, and is deleted
// without one after the delay (the e2e test's "deleted without a deletion
// mark first").
func TestBugMarkLostWhenRivalCleanerRetires(t *testing.T) {
	t.Parallel()
	w := newWorld003(t)
	w.plan()
	w.run(1, 0, 1, 2, 3)
	published := func(m testworld.Mail) bool {
		n, ok := m.Msg.(messages.CleanerNote)
		return ok && n.Why == "published"
	}
	w.pump(w.main, published) // complete, publish; the cleaner's next look is held
	w.mb.Take(published)
	a, b := w.actor("cleaner-a", nil), w.actor("cleaner-b", nil)
	w.dyingOn(a, `"op":"MARK"`)
	ra, rb := a.steps.At("cleaner.before-retire", ""), b.steps.At("cleaner.before-retire", "")
	da, db := w.goDeliver(a, w.note("published")), w.goDeliver(b, w.note("published"))
	x := ra.Wait(t, stepTimeout)
	rb.Wait(t, stepTimeout)
	ra.Release()
	if err := wait(t, da); !errors.Is(err, errDied) {
		t.Fatalf("cleaner A did not die sending the MARK of %s: %v", x, err)
	}
	rb.Release()
	if err := wait(t, db); err != nil {
		t.Fatal(err)
	}
	// A's note comes back; then everything runs its course.
	if err := w.deliver(a, w.note("published")); err != nil {
		t.Fatal(err)
	}
	w.finish()
	for _, s := range corpus.v1 {
		if b := w.block(blockID(s)); b.State == protocol.BlockDeleted && b.MarkVersionID == "" {
			t.Errorf("source %s was deleted without a deletion mark first", b.Key())
		}
	}
}

// TestBugRecogniseIgnoresFailedLookup (chaos seed 3, first run): a
// shipper uploads a block again; the planner recognises the re-upload and
// looks up each file's new version — but at the time took any failed
// lookup (then a HEAD per file) for "this file was not re-uploaded". One
// throttled request (S3's 503 SlowDown) and that file's new version was
// left out of the DELETE_STRAY: it stayed in the bucket, named by no
// record, for good (I4). The planner now finds the versions with one LIST;
// the same must hold of it: the throttled LIST fails the message (it is
// checked here that it did, and that the LIST was throttled), and the
// redelivery finishes the job.
func TestBugRecogniseIgnoresFailedLookup(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	planner := w.actor("planner", nil)
	throttled := &throttledList{S3: planner.deps.S3}
	planner.deps.S3 = throttled
	w.reupload(corpus.v1[1])
	failed := 0
	for _, ev := range w.takeEvents() {
		if err := wait(t, w.goEvent(planner, ev)); err != nil {
			failed++
			t.Logf("planner failed on the event (SQS would redeliver it): %v", err)
			if err := wait(t, w.goEvent(w.main, ev)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !throttled.done.Load() {
		t.Fatal("the planner never listed the re-uploaded block's versions: the throttle was not exercised")
	}
	if failed == 0 {
		t.Fatal("the planner's throttled LIST did not fail the message: the re-upload's versions may have been dropped")
	}
	w.finish()
}

// TestBugReuploadOrphanedWhenDeleteRunsFirst (chaos seed 4 at 8ccebc6;
// 004's timeline with the other order): a retired source's DELETE op is
// delayed; its shipper uploads the block again; the DELETE runs before the
// planner has seen the re-upload's notification. At 8ccebc6 the DELETE
// removed every unrecorded version of meta.json too — the re-upload's —
// but not the re-upload's index and chunks; the notification then found
// meta.json gone ("gone before it was registered; skipping") and nothing
// ever deleted the re-uploaded index and chunks (I4). Since c9cb5f1 the
// DELETE names only recorded versions again, and the re-upload is
// recognised and deleted as strays.
func TestBugReuploadOrphanedWhenDeleteRunsFirst(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	x := blockID(corpus.v1[3])
	w.clock.Advance(deletionDelay + time.Second)
	w.sweep(w.main)
	del := w.takeOne(isOp(messages.OpDelete, x))
	w.pump(w.main, nil)
	w.reupload(corpus.v1[3])
	evs := w.takeEvents() // the re-upload's notification, not yet delivered
	if err := w.deliver(w.main, del); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if err := wait(t, w.goEvent(w.main, ev)); err != nil {
			t.Fatal(err)
		}
	}
	w.finish()
}

// TestBugLateEventForDeletedVersion (chaos seed 30): S3 notifications are
// at least once and may come late; AWS's carry the object's versionId. A
// late copy of a meta.json notification whose version has since been
// deleted (the block was compacted, retired and deleted — or it was a
// re-upload deleted as strays) makes the planner GET a version that is
// gone: S3 answers 404 NoSuchVersion, which the planner takes for a real
// failure (it skips only NoSuchKey). The message fails on every receive
// and ends in the DLQ.
func TestBugLateEventForDeletedVersion(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.finish() // compacted, retired, deleted
	src := w.block(blockID(corpus.v1[0]))
	if src.State != protocol.BlockDeleted {
		t.Fatalf("source is %s", src.State)
	}
	key := w.tenant + "/" + src.ID + "/meta.json"
	body := `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",` +
		`"eventTime":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","eventName":"ObjectCreated:Put",` +
		`"s3":{"s3SchemaVersion":"1.0","bucket":{"name":"` + w.w.Config.Bucket + `","arn":"arn:aws:s3:::` + w.w.Config.Bucket + `"},` +
		`"object":{"key":"` + key + `","size":1,"versionId":"` + src.MetaVersionID + `","sequencer":"0062E99A88DC407460"}}}]}`
	late := events.SQSMessage{MessageId: "late-copy", Body: body, Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
	if err := wait(t, w.goEvent(w.main, late)); err != nil {
		t.Fatalf("a late notification of a deleted version fails the planner (SQS retries it into the DLQ): %v", err)
	}
}

// TestBugUploadedTwiceBeforeRegistration (chaos seed 25): a shipper
// uploads a block, then — its upload retried, before the planner has seen
// the first notification — uploads it again. Registration reads meta.json
// and each file at their current versions: the second upload's. Its
// notification is then "a duplicate event", and the first upload's
// versions — meta.json, index, chunks — belong to no record; nothing ever
// deletes them (I4), not even when the block is deleted after compaction.
func TestBugUploadedTwiceBeforeRegistration(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	w.upload(corpus.v1...)
	w.reupload(corpus.v1[5]) // before any notification is handled
	w.finish()
}

// TestBugSecondOrphanSweepLostWhenCleanupDiesAfterReplan (chaos seed 18,
// after c9cb5f1): a version is superseded while one of its jobs still runs
// (it has leased and read, not yet uploaded). The cleanup's orphan sweep
// finds nothing of it yet; the cleanup sends the re-plan and dies before
// FinishVersion, which is what schedules the version's second orphan sweep
// ("once more after the longest a job can run"). The re-plan creates the
// next version, the group's agenda entry now stands for that one, and the
// old version is never finished: when the slow job uploads and loses its
// commit, nothing ever deletes its objects (I4).
func TestBugSecondOrphanSweepLostWhenCleanupDiesAfterReplan(t *testing.T) {
	t.Parallel()
	w := newWorld003(t)
	w.plan()
	slow := w.actor("slow-job-p3", nil)
	read := slow.steps.At("compact.after-read", "@v1/p3")
	done := w.goDeliver(slow, w.takeOne(isJob(1, 3)))
	read.Wait(t, stepTimeout)
	w.run(1, 0, 1, 2)
	w.mb.Take(isNote)
	w.clock.Advance(stuckAfter + time.Minute)
	sweeper := w.actor("sweeper", nil)
	d := w.dyingOn(sweeper, `"sluice":"plan"`)
	d.after = true
	if err := (pipeline.Cleaner{Deps: sweeper.deps}).Sweep(w.ctx); !errors.Is(err, errDied) {
		t.Fatalf("the cleanup did not die after sending the re-plan: %v", err)
	}
	w.wantState(w.g, 1, protocol.GroupSuperseded)
	w.pump(w.main, nil) // the re-plan: version 2 over the released blocks
	read.Release()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	w.finish()
}

// TestRegistrationRacingReupload: registration lists the block and then
// puts its record; between the two, the shipper uploads the block again
// and a second planner registers it from the new versions, recording the
// first upload's as superseded. The first planner's record loses; it must
// not delete what the winner recorded, and the first upload's versions
// must go (I1–I4 at quiescence, the Monitor's I1 online: no delete of a
// recorded version).
func TestRegistrationRacingReupload(t *testing.T) {
	t.Parallel()
	w := newWorld004(t)
	b := corpus.v1[0]
	w.upload(b)
	first := w.takeEvents()
	if len(first) == 0 {
		t.Fatal("no notification of the first upload")
	}
	slow := w.actor("planner-a", nil)
	at := slow.steps.At("planner.before-register", blockID(b))
	done := w.goEvent(slow, first[0])
	at.Wait(t, stepTimeout)
	w.reupload(b)
	for _, ev := range w.takeEvents() {
		if err := wait(t, w.goEvent(w.main, ev)); err != nil {
			t.Fatal(err)
		}
	}
	won := w.block(blockID(b))
	if len(won.Superseded) == 0 {
		t.Fatalf("the second registration recorded no superseded versions: %+v", won)
	}
	at.Release()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	if after := w.block(blockID(b)); after.MetaVersionID != won.MetaVersionID || after.Gen != won.Gen {
		t.Fatalf("the losing registration changed the record: meta %s→%s, gen %d→%d", won.MetaVersionID, after.MetaVersionID, won.Gen, after.Gen)
	}
	w.upload(corpus.v1[1:]...)
	w.finish()
}

// TestAbandonedClaimIsSupersededByTheNextPlanner (the demo under make
// test's load, 2026-12-05): planners timed out between creating a version
// and planning it, and every later planner backed off from a group busy
// with a version nobody would move on: the sweep superseded it only after
// StuckAfter (3 h by default). A version now records when its planner's
// invocation ends (ClaimUntil). The event delivered again before then
// backs off, since that planner may still be working; delivered after,
// it supersedes the version, which releases its claims, and plans the
// next one at once, with no sweep. A planner that was only slow meets the
// fence: its claims of the superseded version are refused.
func TestAbandonedClaimIsSupersededByTheNextPlanner(t *testing.T) {
	for _, c := range []struct {
		name  string
		step  pipeline.Step
		crash bool // the first planner dies there; else it goes on once v3 is planned
	}{
		{"dead after claiming", "planner.before-planned", true},
		{"slow before claiming", "planner.before-claim", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld003With(t, topLevelOnly)
			late := w.lateAfterRetired()
			first := w.actor("first-planner", nil)
			paused := first.steps.At(c.step, "@v2")
			done := w.goEvent(first, late)
			paused.Wait(t, stepTimeout)
			if c.crash {
				paused.Crash()
				if err := wait(t, done); err == nil {
					t.Fatal("the first planner did not die")
				}
			}
			v2 := w.wantState(w.g, 2, protocol.GroupClaiming)
			if v2.ClaimUntil <= v2.CreatedAt {
				t.Fatalf("version 2 records no claim deadline after its creation: %+v", v2)
			}

			// Redelivered while the first planner's invocation may still run.
			if err := wait(t, w.goEvent(w.main, late)); err != nil {
				t.Fatal(err)
			}
			w.wantState(w.g, 2, protocol.GroupClaiming)

			w.clock.Advance(records.MaxInvocation + time.Second)
			if err := wait(t, w.goEvent(w.main, late)); err != nil {
				t.Fatal(err)
			}
			h := w.head(w.g)
			if h.Version != 3 || h.State != protocol.GroupPlanned {
				t.Fatalf("after the first planner's invocation the head is v%d %s, want v3 PLANNED", h.Version, h.State)
			}
			if last := h.History[len(h.History)-1]; last.Version != 2 || last.State != protocol.GroupSuperseded ||
				!strings.Contains(last.Reason, "invocation ended") {
				t.Fatalf("version 2 ended %+v, want SUPERSEDED because its planner's invocation ended", last)
			}
			if !slices.Contains(h.Sources, corpus.late.Meta.ULID.String()) {
				t.Fatalf("version 3's sources %v lack the late block %s", h.Sources, corpus.late.Meta.ULID)
			}
			if !c.crash {
				paused.Release()
				if err := wait(t, done); err != nil {
					t.Fatalf("the slow planner: %v", err)
				}
				for _, id := range h.Sources {
					if b := w.block(id); b.ClaimedBy != h.Ref() {
						t.Errorf("source %s is claimed by %q after the slow planner went on, want %s", id, b.ClaimedBy, h.Ref())
					}
				}
				w.wantState(w.g, 3, protocol.GroupPlanned)
			}
			w.finish()
		})
	}
}

// TestAbandonedClaimIsSweptAfterStuckAfter: the sweep supersedes a version
// CLAIMING for longer than StuckAfter when that comes before its planner's
// invocation ends (a deployment setting StuckAfter below 15 minutes, as
// the chaos run does: without it, each version a chaos crash left CLAIMING
// waited 15 minutes of the run's clock, and seed 2 outgrew its settle bound
// in CI). Before StuckAfter, the sweep leaves it to its planner.
func TestAbandonedClaimIsSweptAfterStuckAfter(t *testing.T) {
	t.Parallel()
	const stuck = 2 * time.Minute
	w := newWorld003With(t, func(c *config.Config) {
		topLevelOnly(c)
		c.StuckAfter = stuck
	})
	v2 := w.plannerDiesClaiming()
	if time.Duration(v2.ClaimUntil-v2.CreatedAt)*time.Millisecond <= stuck {
		t.Fatalf("version 2's claim deadline %v after its creation is not past StuckAfter (%v): the case tests nothing",
			time.Duration(v2.ClaimUntil-v2.CreatedAt)*time.Millisecond, stuck)
	}

	w.clock.Advance(stuck / 2)
	w.sweep(w.main)
	w.wantState(w.g, 2, protocol.GroupClaiming)

	w.clock.Advance(stuck)
	w.sweep(w.main)
	if v2 := w.wantState(w.g, 2, protocol.GroupSuperseded); !strings.Contains(v2.Reason, "no progress") {
		t.Fatalf("version 2 superseded because %q, want the sweep's StuckAfter (no progress)", v2.Reason)
	}
	w.pump(w.main, nil)
	if h := w.head(w.g); h.Version != 3 || !slices.Contains(h.Sources, corpus.late.Meta.ULID.String()) {
		t.Fatalf("after the sweep the head is v%d %s with sources %v, want v3 with the late block %s",
			h.Version, h.State, h.Sources, corpus.late.Meta.ULID)
	}
	w.finish()
}
