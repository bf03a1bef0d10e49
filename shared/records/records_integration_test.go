package records_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
)

// world is a table with one tenant's blocks, for records tests.
type world struct {
	t     *testing.T
	ctx   context.Context
	store *records.Store
	now   time.Time
	// db and table reach the table beneath the store (for what an earlier
	// release left there).
	db    *dynamodb.Client
	table string
}

func newWorld(t *testing.T) *world {
	env := envtest.New(t)
	// AWS's limits, which the emulator does not enforce, on every write.
	db := awslimits.DynamoDB{DynamoDBAPI: env.Clients.DynamoDB, Refused: &awslimits.Refusals{}}
	t.Cleanup(func() {
		if n := db.Refused.N(); n > 0 {
			t.Errorf("the store made %d write(s) AWS would refuse", n)
		}
	})
	return &world{t: t, ctx: context.Background(), now: time.UnixMilli(1_700_000_000_000),
		store: records.NewStore(db, env.Deployment.Table, env.Logger), db: env.Clients.DynamoDB, table: env.Deployment.Table}
}

var g12 = planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: 0}

func (w *world) block(id string, state protocol.BlockState) records.Block {
	w.t.Helper()
	b := records.Block{Tenant: "acme", ID: id, MinT: 0, MaxT: 7_200_000, State: state, Gen: 1, Published: true, Meta: "{}"}
	if err := w.store.RegisterBlock(w.ctx, b, []planning.GroupKey{g12}, nil); err != nil {
		w.t.Fatalf("register %s: %v", id, err)
	}
	return b
}

// planned creates version v of g12 over srcs with n partitions, claims and
// plans it.
func (w *world) planned(prev records.Group, srcs []records.Block, n int) records.Group {
	w.t.Helper()
	g := records.Group{Tenant: "acme", Key: g12, Version: prev.Version + 1, State: protocol.GroupClaiming,
		CreatedAt: w.now.UnixMilli(), UpdatedAt: w.now.UnixMilli(), Partitions: n}
	for _, b := range srcs {
		g.Sources = append(g.Sources, b.ID)
	}
	if err := w.store.CreateVersion(w.ctx, prev, g, w.now, w.now); err != nil {
		w.t.Fatalf("create %s: %v", g.Ref(), err)
	}
	if err := w.store.Claim(w.ctx, g, srcs, w.now); err != nil {
		w.t.Fatalf("claim for %s: %v", g.Ref(), err)
	}
	if err := w.store.SetGroupState(w.ctx, g, protocol.GroupClaiming, protocol.GroupPlanned, w.now); err != nil {
		w.t.Fatalf("plan %s: %v", g.Ref(), err)
	}
	g.State = protocol.GroupPlanned
	return g
}

func (w *world) leaseAndCommit(g records.Group, p int, owner string) error {
	if _, err := w.store.Lease(w.ctx, "acme", g.Key, g.Version, p, owner, w.now, w.now.Add(time.Minute), 3); err != nil {
		return err
	}
	out := records.Block{Tenant: "acme", ID: fmt.Sprintf("OUT-%d-%d", g.Version, p), State: protocol.BlockPending, Gen: 1,
		ProducedBy: fmt.Sprintf("%s/p%d", g.Ref(), p), Level: 1, Meta: "{}"}
	return w.store.Commit(w.ctx, "acme", g.Key, g.Version, p, owner, &out, nil, w.now)
}

func TestRegisterTwiceLosesWithTheExistingRecord(t *testing.T) {
	w := newWorld(t)
	w.block("B1", protocol.BlockLive)
	err := w.store.RegisterBlock(w.ctx, records.Block{Tenant: "acme", ID: "B1", State: protocol.BlockLive, Gen: 1}, nil, nil)
	if !records.IsConditionLost(err) {
		t.Fatalf("second register: %v, want a lost condition", err)
	}
	blocks, err := w.store.RangeBlocks(w.ctx, "acme", g12)
	if err != nil || len(blocks) != 1 || blocks[0].ID != "B1" {
		t.Fatalf("range blocks = %v, %v; want B1 once", blocks, err)
	}
}

// Sixteen planners race to create version 1 of one group: exactly one wins.
func TestCreateVersionHasOneWinner(t *testing.T) {
	w := newWorld(t)
	const racers = 16
	var wg sync.WaitGroup
	results := make([]error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := records.Group{Tenant: "acme", Key: g12, Version: 1, State: protocol.GroupClaiming,
				CreatedAt: int64(i), Partitions: 4, Sources: []string{fmt.Sprint(i)}}
			results[i] = w.store.CreateVersion(w.ctx, records.Group{}, g, w.now, w.now)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		switch {
		case err == nil:
			wins++
		case !records.IsConditionLost(err):
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d planners created version 1; want exactly 1", wins)
	}
	head, _, _ := w.store.GetGroup(w.ctx, "acme", g12)
	parts, err := w.store.Partitions(w.ctx, "acme", g12, 1)
	if err != nil || len(parts) != head.Partitions {
		t.Fatalf("version 1 has %d partition items, head says %d (%v)", len(parts), head.Partitions, err)
	}
}

// Two versions of different groups claim an overlapping source: one loses.
func TestClaimsAreExclusive(t *testing.T) {
	w := newWorld(t)
	b := w.block("B1", protocol.BlockLive)
	g1, g2 := w.claiming(g12), w.claiming(planning.GroupKey{Stream: g12.Stream, Level: 2, RangeStart: g12.RangeStart})
	if err := w.store.Claim(w.ctx, g1, []records.Block{b}, w.now); err != nil {
		t.Fatal(err)
	}
	err := w.store.Claim(w.ctx, g2, []records.Block{b}, w.now)
	if !records.IsConditionLost(err) {
		t.Fatalf("second claim: %v, want lost", err)
	}
	got, _, _ := w.store.GetBlock(w.ctx, "acme", "B1")
	if got.ClaimedBy != g1.Ref() || got.State != protocol.BlockClaimed || got.Gen != 2 {
		t.Fatalf("block after claims = %+v", got)
	}
}

// The Janus interleaving: the last partition's commit races completion.
// Whatever the order, a COMPLETE version has every partition DONE, and a
// commit never lands after completion.
func TestCompletionConflictsWithCommit(t *testing.T) {
	for round := range 6 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			w := newWorld(t)
			g := w.planned(records.Group{}, []records.Block{w.block("B1", protocol.BlockLive)}, 2)
			if err := w.leaseAndCommit(g, 0, "w0"); err != nil {
				t.Fatal(err)
			}
			if _, err := w.store.Lease(w.ctx, "acme", g12, 1, 1, "w1", w.now, w.now.Add(time.Minute), 3); err != nil {
				t.Fatal(err)
			}
			var commitErr, completeErr error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				if round%2 == 0 {
					time.Sleep(time.Duration(round) * time.Millisecond)
				}
				out := records.Block{Tenant: "acme", ID: "OUT-1-1", State: protocol.BlockPending, Gen: 1, ProducedBy: g.Ref() + "/p1"}
				commitErr = w.store.Commit(w.ctx, "acme", g12, 1, 1, "w1", &out, nil, w.now)
			}()
			go func() {
				defer wg.Done()
				if round%2 == 1 {
					time.Sleep(time.Duration(round) * time.Millisecond)
				}
				completeErr = w.store.Complete(w.ctx, g, w.now)
			}()
			wg.Wait()
			for _, err := range []error{commitErr, completeErr} {
				if err != nil && !records.IsConditionLost(err) {
					t.Fatalf("unexpected error: %v", err)
				}
			}
			head, _, _ := w.store.GetGroup(w.ctx, "acme", g12)
			parts, _ := w.store.Partitions(w.ctx, "acme", g12, 1)
			if head.State == protocol.GroupComplete {
				for _, p := range parts {
					if p.State != protocol.PartitionDone {
						t.Fatalf("COMPLETE with partition %d %s", p.Index, p.State)
					}
				}
				if commitErr != nil {
					t.Fatalf("completion won although the commit it needed lost: %v", commitErr)
				}
			} else if completeErr == nil {
				t.Fatalf("completion reported success but head is %s", head.State)
			}
			// Completion a second time, now that both are in: exactly one
			// state results.
			if head.State == protocol.GroupPlanned {
				if err := w.store.Complete(w.ctx, g, w.now); err != nil {
					t.Fatalf("completion after the commit: %v", err)
				}
			}
		})
	}
}

// Fencing: a job of version 1 cannot lease or commit once version 1 is
// superseded, and a lease taken over leaves the old owner's commit lost.
func TestStaleJobsAreFenced(t *testing.T) {
	w := newWorld(t)
	b := w.block("B1", protocol.BlockLive)
	g := w.planned(records.Group{}, []records.Block{b}, 2)

	if _, err := w.store.Lease(w.ctx, "acme", g12, 1, 0, "old", w.now, w.now.Add(time.Second), 3); err != nil {
		t.Fatal(err)
	}
	later := w.now.Add(time.Minute)
	if _, err := w.store.Lease(w.ctx, "acme", g12, 1, 0, "live", w.now, w.now.Add(time.Hour), 3); !records.IsConditionLost(err) {
		t.Fatalf("lease over a live lease: %v, want lost", err)
	}
	jv, err := w.store.Lease(w.ctx, "acme", g12, 1, 0, "new", later, later.Add(time.Minute), 3)
	if err != nil || jv.Partition.Attempt != 2 || jv.Partition.LeaseOwner != "new" {
		t.Fatalf("takeover of an expired lease = attempt %d by %q, %v; want 2 by new", jv.Partition.Attempt, jv.Partition.LeaseOwner, err)
	}
	if !jv.HeadFound || jv.Head.Version != 1 || jv.Head.Key != g12 {
		t.Fatalf("the job read head %+v (found %v) with its lease, want version 1 of %s", jv.Head, jv.HeadFound, g12)
	}
	out := records.Block{Tenant: "acme", ID: "OUT", State: protocol.BlockPending, Gen: 1, ProducedBy: g.Ref() + "/p0"}
	if err := w.store.Commit(w.ctx, "acme", g12, 1, 0, "old", &out, nil, later); !records.IsConditionLost(err) {
		t.Fatalf("commit by the lease's old owner: %v, want lost", err)
	}
	if err := w.store.SetGroupState(w.ctx, g, protocol.GroupPlanned, protocol.GroupSuperseded, later); err != nil {
		t.Fatal(err)
	}
	if err := w.store.Commit(w.ctx, "acme", g12, 1, 0, "new", &out, nil, later); !records.IsConditionLost(err) {
		t.Fatalf("commit into a superseded version: %v, want lost", err)
	}
	if _, err := w.store.Lease(w.ctx, "acme", g12, 1, 1, "late", later, later.Add(time.Minute), 3); !records.IsConditionLost(err) {
		t.Fatalf("lease in a superseded version: %v, want lost", err)
	}
	if _, ok, _ := w.store.GetBlock(w.ctx, "acme", "OUT"); ok {
		t.Fatal("a fenced commit left an output record")
	}
	// Version 2 may now be created over version 1 (SUPERSEDED is final);
	// version 1's job still cannot touch it.
	g.State = protocol.GroupSuperseded
	if err := w.store.ReleaseClaim(w.ctx, g.Ref(), records.Block{Tenant: "acme", ID: "B1"}, later); err != nil {
		t.Fatal(err)
	}
	b, _, _ = w.store.GetBlock(w.ctx, "acme", "B1")
	g2 := w.planned(g, []records.Block{b}, 1)
	if _, err := w.store.Lease(w.ctx, "acme", g12, 1, 0, "v1-job", later, later.Add(time.Minute), 3); !records.IsConditionLost(err) {
		t.Fatalf("v1 job leasing after v2 exists: %v, want lost", err)
	}
	if err := w.leaseAndCommit(g2, 0, "v2-job"); err != nil {
		t.Fatalf("v2 job: %v", err)
	}
}

// A version cannot be created over an unfinished one, and a version
// bump names the version it read.
func TestCreateVersionNamesWhatItRead(t *testing.T) {
	w := newWorld(t)
	g := w.planned(records.Group{}, []records.Block{w.block("B1", protocol.BlockLive)}, 1)
	next := records.Group{Tenant: "acme", Key: g12, Version: 2, State: protocol.GroupClaiming, Partitions: 1}
	if err := w.store.CreateVersion(w.ctx, g, next, w.now, w.now); !records.IsConditionLost(err) {
		t.Fatalf("v2 over a PLANNED v1: %v, want lost", err)
	}
	// A planner read v1 final; meanwhile v2 was created and superseded.
	// The head is final again: the version in the condition (and v2's
	// partition items, created absent) stop a creation over the v1 it read
	// from overwriting v2.
	if err := w.store.SetGroupState(w.ctx, g, protocol.GroupPlanned, protocol.GroupSuperseded, w.now); err != nil {
		t.Fatal(err)
	}
	v1 := g
	v1.State = protocol.GroupSuperseded
	v2 := records.Group{Tenant: "acme", Key: g12, Version: 2, State: protocol.GroupClaiming, Partitions: 1}
	if err := w.store.CreateVersion(w.ctx, v1, v2, w.now, w.now); err != nil {
		t.Fatal(err)
	}
	if err := w.store.Supersede(w.ctx, v2, protocol.GroupClaiming, "test", w.now); err != nil {
		t.Fatal(err)
	}
	if err := w.store.CreateVersion(w.ctx, v1, v2, w.now, w.now); !records.IsConditionLost(err) {
		t.Fatalf("v2 again over the v1 read, with v2 superseded since: %v, want lost", err)
	}
	stale := records.Group{Tenant: "acme", Key: g12, Version: 0}
	if err := w.store.CreateVersion(w.ctx, stale, records.Group{Tenant: "acme", Key: g12, Version: 1, State: protocol.GroupClaiming, Partitions: 1}, w.now, w.now); !records.IsConditionLost(err) {
		t.Fatalf("v1 again from a stale read: %v, want lost", err)
	}
}

// A new version over a final one schedules the final one's second orphan
// sweep in the same transaction: its cleanup's FinishVersion may never run
// once the group's active entry stands for the new version.
func TestNextVersionSchedulesPreviousOrphanSweep(t *testing.T) {
	w := newWorld(t)
	v1 := w.planned(records.Group{}, []records.Block{w.block("B1", protocol.BlockLive)}, 1)
	if err := w.store.SetGroupState(w.ctx, v1, protocol.GroupPlanned, protocol.GroupSuperseded, w.now); err != nil {
		t.Fatal(err)
	}
	v1.State = protocol.GroupSuperseded
	sweepAt := w.now.Add(5 * time.Minute)
	v2 := records.Group{Tenant: "acme", Key: g12, Version: 2, State: protocol.GroupClaiming, Partitions: 1}
	if err := w.store.CreateVersion(w.ctx, v1, v2, w.now, sweepAt); err != nil {
		t.Fatalf("v2 over a superseded v1: %v", err)
	}
	subject := g12.String() + "@v1"
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{{w.now, false}, {sweepAt, true}} {
		due, err := w.store.Due(w.ctx, records.AgendaOrphans, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range due {
			found = found || (e.Tenant == "acme" && e.Subject == subject)
		}
		if found != tc.want {
			t.Errorf("orphan sweep of v1 due at %s: %v, want %v (entries %v)", tc.at, found, tc.want, due)
		}
	}
}

// claiming creates version 1 of group k, CLAIMING.
func (w *world) claiming(k planning.GroupKey) records.Group {
	w.t.Helper()
	g := records.Group{Tenant: "acme", Key: k, Version: 1, State: protocol.GroupClaiming,
		CreatedAt: w.now.UnixMilli(), UpdatedAt: w.now.UnixMilli(), Partitions: 1}
	if err := w.store.CreateVersion(w.ctx, records.Group{}, g, w.now, w.now); err != nil {
		w.t.Fatalf("create %s: %v", g.Ref(), err)
	}
	return g
}

// TestClaimIsFencedOnTheVersion: a claim for a version the sweep has
// superseded meanwhile is lost, and the block stays LIVE — no claim that
// no cleanup will ever release (chaos seed 18).
func TestClaimIsFencedOnTheVersion(t *testing.T) {
	w := newWorld(t)
	b := w.block("B1", protocol.BlockLive)
	g := w.claiming(g12)
	if err := w.store.Supersede(w.ctx, g, protocol.GroupClaiming, "claiming made no progress", w.now); err != nil {
		t.Fatal(err)
	}
	if err := w.store.Claim(w.ctx, g, []records.Block{b}, w.now); !records.IsConditionLost(err) {
		t.Fatalf("claim for a superseded version: %v, want lost", err)
	}
	got, _, _ := w.store.GetBlock(w.ctx, "acme", "B1")
	if got.State != protocol.BlockLive || got.ClaimedBy != "" {
		t.Errorf("block after the lost claim: %s claimed by %q, want LIVE and unclaimed", got.State, got.ClaimedBy)
	}
}

// TestLostConditionsAreCounted: a write whose condition DynamoDB refuses
// is counted once under a transition's name (a handful of names, never an
// item's key, so CloudWatch's dimension stays small); a write that wins
// counts nothing.
func TestLostConditionsAreCounted(t *testing.T) {
	w := newWorld(t)
	b := w.block("B1", protocol.BlockLive)
	g1, g2 := w.claiming(g12), w.claiming(planning.GroupKey{Stream: g12.Stream, Level: 2, RangeStart: g12.RangeStart})
	batch := metrics.NewBatch("table")
	ctx := metrics.With(w.ctx, batch)
	if err := w.store.Claim(ctx, g1, []records.Block{b}, w.now); err != nil {
		t.Fatal(err)
	}
	if v := batch.Values(); len(v) != 0 {
		t.Fatalf("a winning claim recorded %v", v)
	}
	if err := w.store.Claim(ctx, g2, []records.Block{b}, w.now); !records.IsConditionLost(err) {
		t.Fatalf("second claim: %v, want lost", err)
	}
	v := batch.Values()
	if len(v) != 1 || v[0].Metric.Name != metrics.ConditionLosses.Name || v[0].V != 1 {
		t.Fatalf("after a lost claim the batch holds %+v, want one condition loss", v)
	}
	if _, err := protocol.Lookup(protocol.Name(v[0].Dims[0])); err != nil {
		t.Errorf("the loss is counted under %q, not a transition's name: %v", v[0].Dims[0], err)
	}
}

// GetBlocks reads an id given twice once: DynamoDB refuses a batch that
// names a key twice, and a sweep may hold two agenda entries of one block
// (chaos on cde31a0: every sweep of a tenant failed on them).
func TestGetBlocksReadsAnIDGivenTwiceOnce(t *testing.T) {
	w := newWorld(t)
	a := w.block("01HK3QGM00JS67MS0A0DFMSX3V", protocol.BlockLive)
	b := w.block("01HK3QGM00JS67MS0A0DFMSX3W", protocol.BlockLive)
	got, err := w.store.GetBlocks(w.ctx, "acme", []string{b.ID, a.ID, b.ID, "01HK3QGM00JS67MS0A0DFMSX3Z", a.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != a.ID || got[1].ID != b.ID {
		t.Fatalf("read %d blocks: %v; want %s and %s once each", len(got), got, a.ID, b.ID)
	}
}

// GetGroups reads the heads asked for (and only heads: a version's
// partition items share their prefix), leaves out groups with none, and
// reads a group named twice once.
func TestGetGroupsReadsHeadsTogether(t *testing.T) {
	w := newWorld(t)
	b := w.block("01HK3QGM00JS67MS0A0DFMSX3V", protocol.BlockLive)
	v1 := w.planned(records.Group{}, []records.Block{b}, 3)
	g2 := planning.GroupKey{Stream: g12.Stream, Level: 2, RangeStart: g12.RangeStart}
	none := planning.GroupKey{Stream: g12.Stream, Level: 3, RangeStart: g12.RangeStart}
	if err := w.store.CreateVersion(w.ctx, records.Group{}, records.Group{Tenant: "acme", Key: g2, Version: 1, State: protocol.GroupClaiming,
		CreatedAt: w.now.UnixMilli(), Partitions: 1, Sources: []string{"X"}}, w.now, w.now); err != nil {
		t.Fatal(err)
	}
	got, err := w.store.GetGroups(w.ctx, "acme", []planning.GroupKey{none, g12, g2, g12})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("read %d heads: %v; want the heads of %s and %s", len(got), got, g12, g2)
	}
	if h := got[g12]; h.Version != v1.Version || h.State != protocol.GroupPlanned || h.Partitions != 3 || h.Key != g12 {
		t.Errorf("head of %s = v%d %s with %d partitions (key %s); want v1 PLANNED with 3", g12, h.Version, h.State, h.Partitions, h.Key)
	}
	if h := got[g2]; h.Version != 1 || h.State != protocol.GroupClaiming {
		t.Errorf("head of %s = v%d %s; want v1 CLAIMING", g2, h.Version, h.State)
	}
	for _, g := range []planning.GroupKey{g12, g2} {
		one, ok, err := w.store.GetGroup(w.ctx, "acme", g)
		if err != nil || !ok || one.Version != got[g].Version || one.State != got[g].State {
			t.Errorf("GetGroup(%s) = v%d %s (%v, %v); GetGroups read v%d %s", g, one.Version, one.State, ok, err, got[g].Version, got[g].State)
		}
	}
}
