package records_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// One job holds every partition of a version (a split's one pass): it
// leases them in one transaction, a second job gets none, a failure
// counts once and releases them all, a dead job's leases are taken over
// together with one dead attempt counted, and its commit of 64 partitions
// with outputs and memberships is batched under DynamoDB's limits (the
// store's client refuses what AWS would) yet every partition is DONE.
func TestOneJobHoldsEveryPartition(t *testing.T) {
	w := newWorld(t)
	src := w.block("01HK3QGM00JS67MS0A0DFMSX3V", protocol.BlockLive)
	const n = 64
	g := w.planned(records.Group{}, []records.Block{src}, n)
	parts := func() []records.Partition {
		t.Helper()
		ps, err := w.store.Partitions(w.ctx, "acme", g.Key, g.Version)
		if err != nil || len(ps) != n {
			t.Fatalf("partitions: %d, %v", len(ps), err)
		}
		return ps
	}
	head := func() records.Group {
		t.Helper()
		h, _, err := w.store.GetGroup(w.ctx, "acme", g.Key)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	leased, err := w.store.LeaseAll(w.ctx, "acme", g.Key, g.Version, parts(), "one", w.now, w.now.Add(time.Minute), 3)
	if err != nil || len(leased) != n {
		t.Fatalf("first job leased %d partitions (%v); want all %d", len(leased), err, n)
	}
	if again, err := w.store.LeaseAll(w.ctx, "acme", g.Key, g.Version, parts(), "two", w.now, w.now.Add(time.Minute), 3); err != nil || len(again) != 0 {
		t.Fatalf("a second job leased %v (%v); want none while the first holds them", again, err)
	}

	if err := w.store.RecordFailureAll(w.ctx, "acme", g.Key, g.Version, leased, "one", records.Failure{Kind: records.FailureOther, Message: "boom"}, w.now); err != nil {
		t.Fatal(err)
	}
	if h := head(); h.Failures != 1 {
		t.Errorf("one failed pass over %d partitions counted %d failures; want 1", n, h.Failures)
	}
	for _, p := range parts() {
		if p.State != protocol.PartitionPending || p.LeaseOwner != "" {
			t.Fatalf("after the failure p%d is %s held by %q; want PENDING", p.Index, p.State, p.LeaseOwner)
		}
	}

	// A job that dies: its leases expire and are taken over at once, the
	// dead attempt counted once.
	if _, err := w.store.LeaseAll(w.ctx, "acme", g.Key, g.Version, parts(), "dies", w.now, w.now.Add(time.Second), 3); err != nil {
		t.Fatal(err)
	}
	later := w.now.Add(time.Minute)
	leased, err = w.store.LeaseAll(w.ctx, "acme", g.Key, g.Version, parts(), "three", later, later.Add(time.Minute), 3)
	if err != nil || len(leased) != n {
		t.Fatalf("take-over leased %d (%v); want all %d", len(leased), err, n)
	}
	if h := head(); h.Failures != 2 || h.LastErrorKind != records.FailureDied {
		t.Errorf("after the take-over: %d failures, last %s; want 2, the second a dead attempt", h.Failures, h.LastErrorKind)
	}

	var commits []records.Committed
	for _, p := range leased {
		id := fmt.Sprintf("01HK3QGM%018d", p)
		out := &records.Block{Tenant: "acme", ID: id, Stream: src.Stream, MinT: 0, MaxT: 7_200_000, State: protocol.BlockPending, Gen: 1,
			ProducedBy: protocol.PartitionRef{VersionRef: protocol.VersionRef{Tenant: "acme", Group: g.Key, Version: g.Version}, Partition: p}.String(),
			Meta:       strings.Repeat("m", 20_000), PartitionCount: n, PartitionID: p}
		commits = append(commits, records.Committed{Partition: p, Output: out,
			Ranges: []planning.GroupKey{g12, {Stream: g12.Stream, Level: 2, RangeStart: 0}}})
	}
	if err := w.store.CommitAll(w.ctx, "acme", g.Key, g.Version, "three", commits, later); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts() {
		if p.State != protocol.PartitionDone || p.Output == "" {
			t.Fatalf("p%d is %s with output %q; want DONE naming its output", p.Index, p.State, p.Output)
		}
	}
	members, err := w.store.RangeBlocks(w.ctx, "acme", g12)
	if err != nil || len(members) != n+1 {
		t.Fatalf("%d members of %s (%v); want the source and the %d outputs", len(members), g12, err, n)
	}
	if err := w.store.CommitAll(w.ctx, "acme", g.Key, g.Version, "three", commits[:1], later); !records.IsConditionLost(err) {
		t.Errorf("committing a DONE partition again: %v; want a lost condition", err)
	}
	if _, err := w.store.LeaseAll(w.ctx, "acme", g.Key, g.Version, parts(), "four", later, later.Add(time.Minute), 3); err != nil {
		t.Errorf("leasing a version whose partitions are all DONE: %v; want none leased and no error", err)
	}
}

// A version whose jobs failed too often is not leased again: LeaseAll
// says so, as Lease does.
func TestLeaseAllStopsAtTheAttemptLimit(t *testing.T) {
	w := newWorld(t)
	src := w.block("01HK3QGM00JS67MS0A0DFMSX3V", protocol.BlockLive)
	g := w.planned(records.Group{}, []records.Block{src}, 4)
	for i := range 3 {
		ps, err := w.store.Partitions(w.ctx, "acme", g.Key, g.Version)
		if err != nil {
			t.Fatal(err)
		}
		owner := fmt.Sprint("job", i)
		leased, err := w.store.LeaseAll(w.ctx, "acme", g.Key, g.Version, ps, owner, w.now, w.now.Add(time.Minute), 3)
		if err != nil || len(leased) != 4 {
			t.Fatalf("attempt %d leased %v: %v", i+1, leased, err)
		}
		if err := w.store.RecordFailureAll(w.ctx, "acme", g.Key, g.Version, leased, owner, records.Failure{Kind: records.FailureOther, Message: "boom"}, w.now); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := w.store.Partitions(w.ctx, "acme", g.Key, g.Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.LeaseAll(w.ctx, "acme", g.Key, g.Version, ps, "job4", w.now, w.now.Add(time.Minute), 3); !errors.Is(err, records.ErrAttemptsExhausted) {
		t.Fatalf("a fourth attempt: %v; want ErrAttemptsExhausted", err)
	}
}
