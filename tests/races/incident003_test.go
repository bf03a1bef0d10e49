package races

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Janus's race (003_bbf5ade7bbe7884f.txt): an aggregation wrote into a
// batch that a concurrent collection had already read out, and its
// contribution was lost. Sluice's collection is the cleaner's completion
// of a version; its aggregations are the partition commits. Completion is
// one transaction over the group and every partition item (all created at
// planning time, so none can be missing), and a commit is fenced on the
// group and the lease: whichever lands second conflicts.

// world003 is one 12h range of six 2h blocks planned as 4 partitions.
type world003 struct {
	*replay
	g planning.GroupKey
}

func newWorld003(t *testing.T) *world003 { return newWorld003With(t, nil) }

func newWorld003With(t *testing.T, configure func(*config.Config)) *world003 {
	r := newReplay(t, seed003, "tenant", func(c *config.Config) {
		c.Policy.MaxSeriesPerPartition = 60 // 6 × 40 series → 4 partitions
		c.Policy.SeriesChurn = 1            // series summed over time, as when the seed was recorded
		if configure != nil {
			configure(c)
		}
	})
	return &world003{replay: r, g: planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: day().UnixMilli()}}
}

// plan uploads the six blocks and plans version 1; jobs and cleaner notes
// stay in the mailbox.
func (w *world003) plan() records.Group {
	w.t.Helper()
	w.upload(corpus.v1...)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	h := w.wantState(w.g, 1, protocol.GroupPlanned)
	if h.Partitions != 4 {
		w.t.Fatalf("version 1 has %d partitions, want 4", h.Partitions)
	}
	return h
}

func isNote(m testworld.Mail) bool { _, ok := m.Msg.(messages.CleanerNote); return ok }

// note is a cleaner notification for the group.
func (w *world003) note(why string) testworld.Mail {
	return testworld.Mail{Msg: messages.CleanerNote{Tenant: w.tenant, Group: w.g.String(), Version: 1, Why: why}}
}

// TestIncident003CommitBetweenReadAndCompletion: the cleaner has read the
// group and its partitions (all DONE) and is about to write the
// completion; a commit of partition 3 lands in between — from the job
// that held p3 before its lease expired and the partition was taken over.
// The commit is rejected (the partition is DONE, held by the takeover);
// the completion wins. The rejected job's objects are the ones the takeover
// adopted (same key, same bytes), so nothing is orphaned.
func TestIncident003CommitBetweenReadAndCompletion(t *testing.T) {
	t.Parallel()
	w := newWorld003(t)
	w.plan()
	zombie := w.actor("job-p3-attempt-1", nil)
	commit := zombie.steps.At("compact.before-commit", "@v1/p3")
	job3 := w.takeOne(isJob(1, 3))
	zDone := w.goDeliver(zombie, job3)
	commit.Wait(t, stepTimeout)
	w.run(1, 0, 1, 2)
	w.clock.Advance(leaseDuration + time.Second)
	if err := w.deliver(w.actor("job-p3-attempt-2", nil), job3); err != nil {
		t.Fatal(err)
	}
	w.mb.Take(isNote)
	cleaner := w.actor("cleaner", nil)
	complete := cleaner.steps.At("cleaner.before-complete", "@v1")
	cDone := w.goDeliver(cleaner, w.note("commit"))
	complete.Wait(t, stepTimeout) // read: every partition DONE
	commit.Release()              // the stale commit lands now
	if err := wait(t, zDone); err != nil {
		t.Fatal(err)
	}
	complete.Release()
	if err := wait(t, cDone); err != nil {
		t.Fatal(err)
	}
	acc, rej := w.commits("@v1/p3")
	if len(acc) != 1 || len(rej) != 1 {
		t.Fatalf("commits of v1/p3: accepted %v, rejected %v; want exactly one of each", acc, rej)
	}
	if h := w.head(w.g); h.State != protocol.GroupComplete && h.State != protocol.GroupRetired {
		t.Fatalf("completion lost to a rejected commit: v1 is %s", h.State)
	}
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.readable("after v1 retired")
	w.finish()
}

// TestIncident003CompletionBetweenReadAndCommit is the reverse order: the
// job of p3 has read its sources and compacts; meanwhile its lease expires,
// the partition is taken over and committed, and the cleaner completes the
// version, publishes the outputs and retires the sources. Then the first
// job's commit arrives, after the collection: it is rejected, and its
// output never replaces what was published.
func TestIncident003CompletionBetweenReadAndCommit(t *testing.T) {
	t.Parallel()
	w := newWorld003(t)
	w.plan()
	zombie := w.actor("job-p3-attempt-1", nil)
	read := zombie.steps.At("compact.after-read", "@v1/p3")
	job3 := w.takeOne(isJob(1, 3))
	zDone := w.goDeliver(zombie, job3)
	read.Wait(t, stepTimeout)
	w.run(1, 0, 1, 2)
	w.clock.Advance(leaseDuration + time.Second)
	if err := w.deliver(w.actor("job-p3-attempt-2", nil), job3); err != nil {
		t.Fatal(err)
	}
	w.pump(w.main, nil) // complete, publish, retire
	w.wantState(w.g, 1, protocol.GroupRetired)
	published := w.readable("after v1 retired")
	read.Release()
	if err := wait(t, zDone); err != nil {
		t.Fatal(err)
	}
	acc, rej := w.commits("@v1/p3")
	if len(acc) != 1 || len(rej) != 1 {
		t.Fatalf("commits of v1/p3: accepted %v, rejected %v", acc, rej)
	}
	if now := w.readable("after the late commit"); len(now.Blocks) != len(published.Blocks) {
		t.Fatalf("a reader sees %d blocks after the rejected commit, %d before", len(now.Blocks), len(published.Blocks))
	}
	w.finish()
}

// TestIncident003TakeoverRacingCompletion: a lease takeover and the
// original holder's commit race for one partition, in both orders, and a
// takeover of an already DONE partition races the completion itself.
//
//   - p2: the holder's lease has expired and a redelivered job is about to
//     take it over; the holder commits first → the takeover is refused.
//   - p3: same, but the takeover leases first → the holder's commit is
//     refused, the takeover commits.
//   - the cleaner has read every partition DONE and is about to complete;
//     a job with a clock far ahead tries to take over p1 → refused; the
//     completion goes through.
//
// Exactly one commit per partition; nothing orphaned.
func TestIncident003TakeoverRacingCompletion(t *testing.T) {
	t.Parallel()
	w := newWorld003(t)
	w.plan()
	holder2, holder3 := w.actor("holder-p2", nil), w.actor("holder-p3", nil)
	c2 := holder2.steps.At("compact.before-commit", "@v1/p2")
	c3 := holder3.steps.At("compact.before-commit", "@v1/p3")
	job2, job3 := w.takeOne(isJob(1, 2)), w.takeOne(isJob(1, 3))
	h2, h3 := w.goDeliver(holder2, job2), w.goDeliver(holder3, job3)
	c2.Wait(t, stepTimeout)
	c3.Wait(t, stepTimeout)
	job1 := w.mb.Peek(isJob(1, 1))[0]
	w.run(1, 0, 1)
	w.clock.Advance(leaseDuration + time.Second) // both holders' leases expire

	// p2: the holder commits first, then the takeover tries.
	take2 := w.actor("takeover-p2", nil)
	l2 := take2.steps.At("compact.before-lease", "@v1/p2")
	t2 := w.goDeliver(take2, job2)
	l2.Wait(t, stepTimeout)
	c2.Release()
	if err := wait(t, h2); err != nil {
		t.Fatal(err)
	}
	l2.Release()
	if err := wait(t, t2); err != nil {
		t.Fatal(err)
	}
	// p3: the takeover leases first; while it works, the holder tries to
	// commit (refused: the lease is no longer its own); then the takeover
	// commits.
	take3 := w.actor("takeover-p3", nil)
	tc3 := take3.steps.At("compact.before-commit", "@v1/p3")
	t3 := w.goDeliver(take3, job3)
	tc3.Wait(t, stepTimeout)
	c3.Release()
	if err := wait(t, h3); err != nil {
		t.Fatal(err)
	}
	tc3.Release()
	if err := wait(t, t3); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"@v1/p2": "holder-p2", "@v1/p3": "takeover-p3"} {
		acc, rej := w.commits(p)
		if len(acc) != 1 || len(acc[0]) < len(want) || acc[0][:len(want)] != want {
			t.Fatalf("commits of %s: accepted %v (rejected %v), want exactly %s's", p, acc, rej, want)
		}
	}
	if ps := w.partitions(w.g, 1); ps[2].Attempt != 1 || ps[3].Attempt != 2 {
		t.Fatalf("attempts: p2 %d (want 1: the takeover was refused), p3 %d (want 2)", ps[2].Attempt, ps[3].Attempt)
	}
	// The completion, with a far-ahead job trying to take p1 over.
	w.mb.Take(isNote)
	cleaner := w.actor("cleaner", nil)
	complete := cleaner.steps.At("cleaner.before-complete", "@v1")
	cDone := w.goDeliver(cleaner, w.note("commit"))
	complete.Wait(t, stepTimeout)
	skewed := w.actor("skewed-job-p1", w.clock.Skewed(2*leaseDuration))
	if err := w.deliver(skewed, job1); err != nil {
		t.Fatal(err)
	}
	if ps := w.partitions(w.g, 1); ps[1].Attempt != 1 || ps[1].State != protocol.PartitionDone {
		t.Fatalf("p1 after a takeover of a DONE partition: %s attempt %d", ps[1].State, ps[1].Attempt)
	}
	complete.Release()
	if err := wait(t, cDone); err != nil {
		t.Fatal(err)
	}
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.finish()
}

// TestIncident003SupersedeRacingCompletion: the sweep reads a version whose
// last partition is still running and decides it is stuck (its clock says
// so); the last commit lands and a cleaner reads every partition DONE. The
// supersede and the completion both expect the version PLANNED, so exactly
// one goes through — in both orders. Round 1 (v1): the completion first,
// the supersede is refused. Round 2 (v2, after a late block): the supersede
// first, the completion is refused; the sources are released, not retired,
// and version 3 compacts them.
func TestIncident003SupersedeRacingCompletion(t *testing.T) {
	t.Parallel()
	w := newWorld003(t)
	w.plan()
	stuck := w.clock.Skewed(stuckAfter + time.Minute) // the sweep's clock
	// Round 1: completion first.
	w.run(1, 0, 1, 2)
	w.mb.Take(isNote)
	sweeper := w.actor("sweeper", stuck)
	sup := sweeper.steps.At("cleaner.before-supersede", "@v1")
	sDone := w.goSweep(sweeper)
	sup.Wait(t, stepTimeout) // read: p3 PENDING, no progress for StuckAfter
	w.run(1, 3)
	w.mb.Take(isNote)
	cleaner := w.actor("cleaner", nil)
	complete := cleaner.steps.At("cleaner.before-complete", "@v1")
	cDone := w.goDeliver(cleaner, w.note("commit"))
	complete.Wait(t, stepTimeout)
	complete.Release()
	if err := wait(t, cDone); err != nil {
		t.Fatal(err)
	}
	sup.Release()
	if err := wait(t, sDone); err != nil {
		t.Fatal(err)
	}
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.readable("after round 1")

	// Round 2: a late block makes v2; the supersede goes first.
	w.upload(corpus.late)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	h2 := w.wantState(w.g, 2, protocol.GroupPlanned)
	last := h2.Partitions - 1
	for p := 0; p < last; p++ {
		w.run(2, p)
	}
	w.mb.Take(isNote)
	sweeper2 := w.actor("sweeper-2", w.clock.Skewed(stuckAfter+time.Minute))
	sup2 := sweeper2.steps.At("cleaner.before-supersede", "@v2")
	sDone2 := w.goSweep(sweeper2)
	sup2.Wait(t, stepTimeout)
	w.run(2, last)
	w.mb.Take(isNote)
	cleaner2 := w.actor("cleaner-2", nil)
	complete2 := cleaner2.steps.At("cleaner.before-complete", "@v2")
	cDone2 := w.goDeliver(cleaner2, testworld.Mail{Msg: messages.CleanerNote{Tenant: w.tenant, Group: w.g.String(), Version: 2, Why: "commit"}})
	complete2.Wait(t, stepTimeout)
	sup2.Release()
	if err := wait(t, sDone2); err != nil {
		t.Fatal(err)
	}
	complete2.Release()
	if err := wait(t, cDone2); err != nil {
		t.Fatal(err)
	}
	if h := w.head(w.g); h.Version == 2 && h.State != protocol.GroupSuperseded {
		t.Fatalf("v2 is %s; the supersede went first, so the completion must have been refused", h.State)
	}
	w.readable("after v2 was superseded")
	w.pump(w.main, nil)
	if h := w.head(w.g); h.Version != 3 || h.State != protocol.GroupRetired {
		t.Fatalf("after superseding v2 the group is at v%d %s, want v3 RETIRED", h.Version, h.State)
	}
	w.finish()
}

// TestIncident003DuplicateCleaners: the cleaner's notification is delivered
// twice and both copies run at once. Both read every partition DONE and
// both try to complete; then both try to retire the same source. Exactly
// one write of each wins and the other copy carries on idempotently: one
// PUBLISH per output, one MARK per source.
func TestIncident003DuplicateCleaners(t *testing.T) {
	t.Parallel()
	w := newWorld003(t)
	w.plan()
	w.run(1, 0, 1, 2, 3)
	w.mb.Take(isNote)
	a, b := w.actor("cleaner-a", nil), w.actor("cleaner-b", nil)
	ca, cb := a.steps.At("cleaner.before-complete", "@v1"), b.steps.At("cleaner.before-complete", "@v1")
	da, db := w.goDeliver(a, w.note("commit")), w.goDeliver(b, w.note("commit"))
	ca.Wait(t, stepTimeout)
	cb.Wait(t, stepTimeout)
	ca.Release()
	if err := wait(t, da); err != nil {
		t.Fatal(err)
	}
	cb.Release()
	if err := wait(t, db); err != nil {
		t.Fatal(err)
	}
	publishes := 0
	for _, m := range w.mb.Peek(nil) {
		if op, ok := m.Msg.(messages.BlockOp); ok && op.Op == messages.OpPublish {
			publishes++
		}
	}
	outputs := 0
	for _, p := range w.partitions(w.g, 1) {
		if p.Output != "" {
			outputs++
		}
	}
	if publishes != outputs {
		t.Fatalf("%d PUBLISH ops for %d outputs", publishes, outputs)
	}
	// Publish, then race two cleaners on retiring the sources.
	w.pump(w.main, func(m testworld.Mail) bool { return isNote(m) })
	w.mb.Take(isNote)
	a2, b2 := w.actor("cleaner-a2", nil), w.actor("cleaner-b2", nil)
	ra, rb := a2.steps.At("cleaner.before-retire", ""), b2.steps.At("cleaner.before-retire", "")
	da, db = w.goDeliver(a2, w.note("published")), w.goDeliver(b2, w.note("published"))
	ra.Wait(t, stepTimeout)
	rb.Wait(t, stepTimeout)
	rb.Release()
	ra.Release()
	if err := wait(t, da); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, db); err != nil {
		t.Fatal(err)
	}
	marks := map[string]int{}
	for _, m := range w.mb.Peek(nil) {
		if op, ok := m.Msg.(messages.BlockOp); ok && op.Op == messages.OpMark {
			marks[op.Block]++
		}
	}
	for id, n := range marks {
		if n != 1 {
			t.Fatalf("%d MARK ops for source %s", n, id)
		}
	}
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.finish()
}
