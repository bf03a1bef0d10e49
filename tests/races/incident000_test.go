package races

import (
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// world000 is the Cortex timeline's setting: one 12h range of 2h blocks,
// sized so that version 1 gets 8 partitions and version 2 — the 8 outputs
// plus one late block — gets 4.
type world000 struct {
	*replay
	g      planning.GroupKey
	blocks []blockgen.Block // the six 2h blocks of version 1
	late   blockgen.Block   // the new lower-level block of version 2
}

func newWorld000(t *testing.T, tenant string, configure func(*config.Config)) *world000 {
	r := newReplay(t, seed000, tenant, func(c *config.Config) {
		// 6 blocks × 40 series = 240 → 8 partitions; v2: 40 + 48 = 88 → 4.
		c.Policy.MaxSeriesPerPartition = 30
		c.Policy.SeriesChurn = 1 // series summed over time, as when the seed was recorded
		if configure != nil {
			configure(c)
		}
	})
	return &world000{replay: r, g: planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: day().UnixMilli()}, blocks: corpus.v1, late: corpus.late}
}

// planV1 uploads the six blocks and lets the planner create version 1;
// every job stays in the mailbox.
func (w *world000) planV1() records.Group {
	w.t.Helper()
	w.upload(w.blocks...)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	h := w.wantState(w.g, 1, protocol.GroupPlanned)
	if h.Partitions != 8 || len(h.Sources) != 6 {
		w.t.Fatalf("version 1 has %d partitions over %d sources, want 8 over 6", h.Partitions, len(h.Sources))
	}
	return h
}

// planV2 uploads the late block; version 2 is created over version 1's
// outputs and the late block, with 4 partitions. Its jobs stay in the
// mailbox.
func (w *world000) planV2(v1 records.Group) records.Group {
	w.t.Helper()
	w.upload(w.late)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	h := w.wantState(w.g, 2, protocol.GroupPlanned)
	outs := map[string]bool{}
	for _, p := range w.partitions(w.g, 1) {
		if p.Output != "" {
			outs[p.Output] = true
		}
	}
	n := 0
	for _, s := range h.Sources {
		if outs[s] {
			n++
		}
	}
	if h.Partitions != 4 || n != len(outs) || len(h.Sources) != len(outs)+1 {
		w.t.Fatalf("version 2 has %d partitions over %v; want 4 over v1's %d outputs and the late block", h.Partitions, h.Sources, len(outs))
	}
	return h
}

// runJobs delivers version v's jobs except those of the partitions in
// except, then lets the cleaner and uploader do what follows.
func (w *world000) runJobs(v int64, except ...int) {
	w.t.Helper()
	skip := map[int]bool{}
	for _, p := range except {
		skip[p] = true
	}
	w.pump(w.main, func(m testworld.Mail) bool {
		j, ok := m.Msg.(messages.Job)
		return ok && (j.Version != v || skip[j.Partition])
	})
}

// checkV2Partition0 asserts that version 2's partition 0 is version 2's own
// output, holding exactly the series of every upload — the late block's
// included — that hash to partition 0 of 4: the stale output of version 1
// was never taken for it.
func (w *world000) checkV2Partition0(staleOutput string) {
	w.t.Helper()
	parts := w.partitions(w.g, 2)
	p0 := parts[0]
	h2 := records.Group{Tenant: w.tenant, Key: w.g, Version: 2, CreatedAt: p0.CreatedAt}
	want := compaction.OutputULID(time.UnixMilli(h2.CreatedAt), w.tenant, w.g.String(), 2, 0).String()
	if p0.State != protocol.PartitionDone || p0.Output != want || p0.Output == staleOutput {
		w.t.Fatalf("v2/p0 is %s with output %q; want DONE with v2's own output %s (stale v1/p0 output: %s)", p0.State, p0.Output, want, staleOutput)
	}
	b := w.block(p0.Output)
	if b.ProducedBy != (protocol.PartitionRef{VersionRef: protocol.VersionRef{Tenant: w.tenant, Group: w.g, Version: 2}}).String() {
		w.t.Fatalf("v2/p0's output was produced by %q", b.ProducedBy)
	}
	dirs, err := w.w.DownloadBlocks(w.ctx, []records.Block{b})
	if err != nil {
		w.t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range seriesOf(w.t, dirs[0]) {
		got[l.String()] = true
	}
	want0 := map[string]bool{}
	for _, d := range append(blockDirs(w.blocks), w.late.Dir) {
		for _, l := range seriesOf(w.t, d) {
			if compaction.PartitionOf(l, 4) == 0 {
				want0[l.String()] = true
			}
		}
	}
	lateOnly := 0
	for _, l := range seriesOf(w.t, w.late.Dir) {
		if compaction.PartitionOf(l, 4) == 0 && !inBlocks(w.t, l, w.blocks) {
			lateOnly++
		}
	}
	if len(got) != len(want0) {
		w.t.Fatalf("v2/p0 holds %d series, want the %d series of partition 0/4 (%d of them only in the late block)", len(got), len(want0), lateOnly)
	}
	for s := range want0 {
		if !got[s] {
			w.t.Fatalf("v2/p0 lacks series %s", s)
		}
	}
	w.t.Logf("v2/p0 holds its %d series, %d of them only in the late block", len(got), lateOnly)
}

func blockDirs(bs []blockgen.Block) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Dir)
	}
	return out
}

func inBlocks(t *testing.T, l labels.Labels, bs []blockgen.Block) bool {
	for _, b := range bs {
		for _, x := range seriesOf(t, b.Dir) {
			if labels.Equal(x, l) {
				return true
			}
		}
	}
	return false
}

// TestIncident000StaleJobOfCleanedVersion replays 000_d90c1df027825b86.txt:
// version 1 (8 partitions) completes and is cleaned while compactor 1 still
// holds a job of version 1; a new block makes version 2 (4 partitions); the
// stale job finishes last. In Cortex its result was taken for version 2's
// partition 0 and the new block's data in it was lost. Here the stale job
// held the lease of v1/p0 until it expired and another compactor took the
// partition over (the only way v1 can complete while the job is alive);
// its commit is fenced on version = 1, so it is rejected, its objects are
// the ones the takeover already wrote (same key, same bytes), and version
// 2's partition 0 is version 2's own.
func TestIncident000StaleJobOfCleanedVersion(t *testing.T) {
	t.Parallel()
	w := newWorld000(t, "tenant", nil)
	// 1. compactor x: version 1 with 8 partitions.
	v1 := w.planV1()
	stale := w.actor("compactor-1", nil)
	job0 := w.takeOne(isJob(1, 0))
	// 3./5. compactor 1 picks v1/p0, leases it and reads its sources.
	read := stale.steps.At("compact.after-read", "@v1/p0")
	staleDone := w.goDeliver(stale, job0)
	read.Wait(t, stepTimeout)
	// 2. compactors n..m finish partitions 1..7.
	w.runJobs(1, 0)
	w.wantState(w.g, 1, protocol.GroupPlanned)
	w.readable("while v1 runs")
	// Compactor 1 outlives its lease; the job's redelivery takes v1/p0 over.
	w.clock.Advance(leaseDuration + time.Second)
	takeover := w.actor("compactor-n", nil)
	if err := w.deliver(takeover, job0); err != nil {
		t.Fatal(err)
	}
	if p := w.partitions(w.g, 1)[0]; p.State != protocol.PartitionDone || p.Attempt != 2 || p.LeaseOwner == "" {
		t.Fatalf("v1/p0 after the takeover: %+v", p)
	}
	staleOutput := w.partitions(w.g, 1)[0].Output
	// 4. cleaner: version 1 complete; outputs published, sources retiring.
	w.pump(w.main, nil)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.readable("after v1 was cleaned")
	// 6. a new lower-level block: version 2 with 4 partitions.
	w.planV2(v1)
	// 7./9. compactors finish v2's partitions 1..3.
	w.runJobs(2, 0)
	w.wantState(w.g, 2, protocol.GroupPlanned)
	// 8. compactor 1 finishes v1/p0 last: its commit is rejected.
	read.Release()
	if err := wait(t, staleDone); err != nil {
		t.Fatalf("stale job: %v", err)
	}
	acc, rej := w.commits("@v1/p0")
	if len(acc) != 1 || len(rej) != 1 || rej[0] == acc[0] {
		t.Fatalf("commits of v1/p0: accepted %v, rejected %v; want the takeover's accepted and compactor 1's rejected", acc, rej)
	}
	w.readable("after the stale job finished")
	// v2/p0 runs; 10. cleaner completes version 2.
	w.pump(w.main, nil)
	w.wantState(w.g, 2, protocol.GroupRetired)
	w.checkV2Partition0(staleOutput)
	w.finish()
}

// TestIncident000StaleJobBeforeLease is 000's step 5 exactly: compactor 1
// picked v1/p0 (a redelivered job message) but had not taken it when the
// cleaner finished version 1 and version 2 was planned. In Cortex the
// deleted visit marker let it start; here its lease is fenced on
// version = 1 AND PLANNED, so it starts nothing and writes nothing.
func TestIncident000StaleJobBeforeLease(t *testing.T) {
	t.Parallel()
	w := newWorld000(t, "tenant", nil)
	v1 := w.planV1()
	dup := w.mb.Peek(isJob(1, 0))[0] // the redelivery compactor 1 holds
	stale := w.actor("compactor-1", nil)
	lease := stale.steps.At("compact.before-lease", "@v1/p0")
	staleDone := w.goDeliver(stale, dup)
	lease.Wait(t, stepTimeout)
	w.runJobs(1)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.planV2(v1)
	w.runJobs(2, 0)
	lease.Release()
	if err := wait(t, staleDone); err != nil {
		t.Fatalf("stale job: %v", err)
	}
	if p := w.partitions(w.g, 1)[0]; p.Attempt != 1 {
		t.Fatalf("v1/p0 was leased %d times; the stale job must not lease it", p.Attempt)
	}
	w.pump(w.main, nil)
	w.wantState(w.g, 2, protocol.GroupRetired)
	w.checkV2Partition0("")
	w.finish()
}

// TestIncident000StaleJobOfSupersededVersion: version 1 gets stuck (its
// partition 0 job runs far longer than anything should, partition 1's job
// is late) and the cleaner's sweep supersedes it; the next plan is version
// 2 over the same blocks plus the late block. Partition 1's job then
// arrives: its lease is fenced. The stale job of v1/p0 finishes: its commit
// is fenced, and the objects it uploaded under v1/p0's key — which no
// record names — are deleted by v1's second orphan sweep. Nothing of
// version 1's sources is lost: they were released, not retired.
func TestIncident000StaleJobOfSupersededVersion(t *testing.T) {
	t.Parallel()
	w := newWorld000(t, "tenant", nil)
	w.planV1()
	stale := w.actor("compactor-1", nil)
	job0 := w.takeOne(isJob(1, 0))
	read := stale.steps.At("compact.after-read", "@v1/p0")
	staleDone := w.goDeliver(stale, job0)
	read.Wait(t, stepTimeout)      // leased and read; uploads after v1 is final
	job1 := w.takeOne(isJob(1, 1)) // delivered only after v1 is superseded
	w.runJobs(1, 0)
	// No progress for longer than StuckAfter: the sweep supersedes v1 and
	// the cleanup re-plans (the late block arrives meanwhile).
	w.clock.Advance(stuckAfter + time.Minute)
	w.upload(w.late)
	w.sweep(w.main)
	w.pump(w.main, func(m testworld.Mail) bool { _, job := m.Msg.(messages.Job); return job })
	h := w.head(w.g)
	if h.Version != 2 || h.State != protocol.GroupPlanned {
		t.Fatalf("after superseding v1 the group is at v%d %s, want v2 PLANNED", h.Version, h.State)
	}
	for _, p := range w.partitions(w.g, 1) {
		if p.Output != "" {
			if b := w.block(p.Output); b.State != protocol.BlockDiscarded && b.State != protocol.BlockDeleted {
				t.Fatalf("output %s of superseded v1 is %s", b.ID, b.State)
			}
		}
	}
	// A late copy of v1/p1's job finds its partition PENDING — and its
	// version superseded: the lease is fenced, nothing is written.
	if err := w.deliver(w.actor("late-job-p1", nil), job1); err != nil {
		t.Fatal(err)
	}
	if p := w.partitions(w.g, 1)[1]; p.Attempt != 0 || p.State != protocol.PartitionPending {
		t.Fatalf("a job of superseded v1 leased p1: %s attempt %d", p.State, p.Attempt)
	}
	commit := stale.steps.At("compact.before-commit", "@v1/p0")
	read.Release()
	commit.Wait(t, stepTimeout)
	w.readable("while the stale job's objects sit under v1/p0's key")
	commit.Release()
	if err := wait(t, staleDone); err != nil {
		t.Fatalf("stale job: %v", err)
	}
	if acc, rej := w.commits("@v1/p0"); len(acc) != 0 || len(rej) != 1 {
		t.Fatalf("commits of v1/p0: accepted %v, rejected %v", acc, rej)
	}
	staleOut := compaction.OutputULID(time.UnixMilli(w.partitions(w.g, 1)[0].CreatedAt), w.tenant, w.g.String(), 1, 0).String()
	if vs := w.objectVersions(staleOut); len(vs) == 0 {
		t.Fatalf("the stale job uploaded nothing under %s", staleOut)
	}
	w.runJobs(2)
	w.pump(w.main, nil)
	w.wantState(w.g, 2, protocol.GroupRetired)
	w.finish()
	if vs := w.objectVersions(staleOut); len(vs) != 0 {
		t.Fatalf("the stale job's objects survived the orphan sweeps: %v", vs)
	}
}

// TestIncident000ConcurrentPlannersOfVersion2: the late block's S3 event is
// delivered twice, to two planners at once, while version 1 is being
// cleaned; both read the group RETIRED and try to create version 2. One
// create wins; the other backs off — never two unfinished versions, never a
// block claimed twice.
func TestIncident000ConcurrentPlannersOfVersion2(t *testing.T) {
	t.Parallel()
	w := newWorld000(t, "tenant", nil)
	w.planV1()
	w.runJobs(1)
	w.wantState(w.g, 1, protocol.GroupRetired)
	w.upload(w.late)
	evs := w.takeEvents()
	if len(evs) != 1 {
		t.Fatalf("%d S3 events for the late block", len(evs))
	}
	p1, p2 := w.actor("planner-1", nil), w.actor("planner-2", nil)
	c1 := p1.steps.At("planner.before-create", "@v2")
	c2 := p2.steps.At("planner.before-create", "@v2")
	d1, d2 := w.goEvent(p1, evs[0]), w.goEvent(p2, evs[0]) // the event, delivered twice at once
	c1.Wait(t, stepTimeout)
	c2.Wait(t, stepTimeout)
	c2.Release()
	if err := wait(t, d2); err != nil {
		t.Fatal(err)
	}
	c1.Release()
	if err := wait(t, d1); err != nil {
		t.Fatal(err)
	}
	h := w.wantState(w.g, 2, protocol.GroupPlanned)
	if n := len(w.mb.Peek(func(m testworld.Mail) bool { _, ok := m.Msg.(messages.Job); return ok })); n != h.Partitions {
		t.Fatalf("%d jobs sent for v2's %d partitions: both planners planned", n, h.Partitions)
	}
	w.pump(w.main, nil)
	w.wantState(w.g, 2, protocol.GroupRetired)
	w.checkV2Partition0("")
	w.finish()
}
