package records_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// TestFailuresAreFencedAndCounted: only the lease holder records a failed
// attempt, which releases the partition; a lease that expired under a dead
// job is taken over once and counted; at maxFailures no lease is taken.
func TestFailuresAreFencedAndCounted(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	g := w.planned(records.Group{}, []records.Block{w.block("A", protocol.BlockLive), w.block("B", protocol.BlockLive)}, 2)
	lease := func(p int, owner string, now time.Time) error {
		_, err := w.store.Lease(w.ctx, "acme", g12, g.Version, p, owner, now, now.Add(time.Minute), 3)
		return err
	}
	fail := records.Failure{Kind: records.FailureSource, Block: "A", Message: "source block A: checksum mismatch"}
	if err := lease(0, "w1", w.now); err != nil {
		t.Fatal(err)
	}
	if err := w.store.RecordFailure(w.ctx, "acme", g12, g.Version, 0, "someone-else", fail, w.now); !records.IsConditionLost(err) {
		t.Fatalf("a failure recorded by a job that does not hold the lease: %v", err)
	}
	if err := w.store.RecordFailure(w.ctx, "acme", g12, g.Version, 0, "w1", fail, w.now); err != nil {
		t.Fatal(err)
	}
	// The partition is free again at once, and the head counts one failure.
	if err := lease(0, "w2", w.now); err != nil {
		t.Fatalf("a released partition: %v", err)
	}
	head, _, _ := w.store.GetGroup(w.ctx, "acme", g12)
	if head.Failures != 1 || head.LastErrorBlock != "A" || head.LastErrorKind != records.FailureSource {
		t.Fatalf("head after one failure: %d failures, blaming %q (%s)", head.Failures, head.LastErrorBlock, head.LastErrorKind)
	}
	// w2 dies: its lease expires; the next lease takes over and counts it.
	later := w.now.Add(2 * time.Minute)
	if err := lease(0, "w3", later); err != nil {
		t.Fatalf("take over an expired lease: %v", err)
	}
	head, _, _ = w.store.GetGroup(w.ctx, "acme", g12)
	if head.Failures != 2 || head.LastErrorKind != records.FailureDied || !strings.Contains(head.LastError, "w2") {
		t.Fatalf("head after a takeover: %d failures (%s): %q", head.Failures, head.LastErrorKind, head.LastError)
	}
	// A second taker of the same dead lease does not count it again.
	if err := lease(0, "w4", later); !records.IsConditionLost(err) {
		t.Fatalf("w3's live lease taken: %v", err)
	}
	if err := w.store.RecordFailure(w.ctx, "acme", g12, g.Version, 0, "w3", fail, later); err != nil {
		t.Fatal(err)
	}
	// Three failures: no job of the version is leased again.
	if err := lease(1, "w5", later); !errors.Is(err, records.ErrAttemptsExhausted) {
		t.Fatalf("a lease after 3 failures: %v, want ErrAttemptsExhausted", err)
	}
	head, _, _ = w.store.GetGroup(w.ctx, "acme", g12)
	if head.Failures != 3 {
		t.Fatalf("head: %d failures, want 3", head.Failures)
	}
}

// TestQuarantineTransitions: a source of the version is quarantined with
// the version superseded in one transaction, fenced on the claim; a group
// is quarantined and released.
func TestQuarantineTransitions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, b := w.block("A", protocol.BlockLive), w.block("B", protocol.BlockLive)
	g := w.planned(records.Group{}, []records.Block{a, b}, 1)
	a, _, _ = w.store.GetBlock(w.ctx, "acme", "A")
	other := g
	other.Version = 9
	if _, err := w.store.QuarantineSource(w.ctx, other, a, "x", w.now); !records.IsConditionLost(err) {
		t.Fatalf("quarantine by a version that is not current: %v", err)
	}
	gen, err := w.store.QuarantineSource(w.ctx, g, a, "3 failed attempts", w.now)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := w.store.GetBlock(w.ctx, "acme", "A")
	head, _, _ := w.store.GetGroup(w.ctx, "acme", g12)
	if got.State != protocol.BlockQuarantined || got.Gen != gen || got.ClaimedBy != "" || got.Reason != "3 failed attempts" || head.State != protocol.GroupSuperseded {
		t.Fatalf("after quarantine: block %s gen %d claimedBy %q reason %q, head %s", got.State, got.Gen, got.ClaimedBy, got.Reason, head.State)
	}
	if err := w.store.RecordNoCompactMark(w.ctx, "acme", "A", gen-1, "vid", true, "", w.now); !records.IsConditionLost(err) {
		t.Fatalf("a mark recorded at an old gen: %v", err)
	}
	if err := w.store.RecordNoCompactMark(w.ctx, "acme", "A", gen, "vid", true, "", w.now); err != nil {
		t.Fatal(err)
	}
	got, _, _ = w.store.GetBlock(w.ctx, "acme", "A")
	if got.NoCompactMarkVersionID != "vid" || !got.Names("no-compact-mark.json", "vid") {
		t.Fatalf("the record does not name its no-compact mark: %+v", got)
	}
	live, err := w.store.ReleaseBlock(w.ctx, got, w.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.store.ForgetNoCompactMark(w.ctx, "acme", "A", protocol.BlockLive, live, "vid", w.now); err != nil {
		t.Fatal(err)
	}
	got, _, _ = w.store.GetBlock(w.ctx, "acme", "A")
	if got.State != protocol.BlockLive || got.NoCompactMarkVersionID != "" || got.Reason != "" {
		t.Fatalf("after release: %+v", got)
	}

	g2 := w.planned(head, []records.Block{got}, 1)
	if err := w.store.QuarantineGroup(w.ctx, g2, "3 failed attempts; no block to blame", w.now); err != nil {
		t.Fatal(err)
	}
	q, _, _ := w.store.GetGroup(w.ctx, "acme", g12)
	if q.State != protocol.GroupQuarantined {
		t.Fatalf("group %s, want QUARANTINED", q.State)
	}
	next := records.Group{Tenant: "acme", Key: g12, Version: q.Version + 1, State: protocol.GroupClaiming, Partitions: 1, Sources: []string{"A"}}
	if err := w.store.CreateVersion(w.ctx, q, next, w.now, w.now); !records.IsConditionLost(err) {
		t.Fatalf("a version planned over a quarantined one: %v", err)
	}
	if err := w.store.ReleaseGroup(w.ctx, q, w.now); err != nil {
		t.Fatal(err)
	}
	q, _, _ = w.store.GetGroup(w.ctx, "acme", g12)
	if q.State != protocol.GroupSuperseded || q.Failures != 0 {
		t.Fatalf("released group %s with %d failures", q.State, q.Failures)
	}
}

// TestLargeMetaIsKeptInParts: a meta.json far over DynamoDB's 400 KB item
// limit (an output of 20,000 sources) is recorded in parts and read back
// whole; one too large to record fails with ErrMetaTooLarge, writing
// nothing. The store's writes pass AWS's limits (newWorld checks).
func TestLargeMetaIsKeptInParts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var sources []string
	for range 20000 {
		sources = append(sources, `"`+ulid.Make().String()+`"`)
	}
	meta := `{"ulid":"X","compaction":{"level":2,"sources":[` + strings.Join(sources, ",") + `]}}`
	if len(meta) < 500_000 {
		t.Fatalf("the test's meta.json is only %d bytes", len(meta))
	}
	b := records.Block{Tenant: "acme", ID: "BIG", MinT: 0, MaxT: 7_200_000, State: protocol.BlockLive, Gen: 1, Published: true, Meta: meta}
	if err := w.store.RegisterBlock(w.ctx, b, []planning.GroupKey{g12}, nil); err != nil {
		t.Fatal(err)
	}
	got, ok, err := w.store.GetBlock(w.ctx, "acme", "BIG")
	if err != nil || !ok || got.Meta != meta || got.MetaParts < 1 {
		t.Fatalf("read back %d of %d bytes in %d parts (%v, %v)", len(got.Meta), len(meta), got.MetaParts, ok, err)
	}
	all, err := w.store.RangeBlocks(w.ctx, "acme", g12)
	if err != nil || len(all) != 1 || all[0].Meta != meta {
		t.Fatalf("range read: %d blocks (%v)", len(all), err)
	}
	noise := make([]byte, 4<<20)
	_, _ = rand.Read(noise)
	huge := records.Block{Tenant: "acme", ID: "HUGE", State: protocol.BlockLive, Gen: 1, Meta: fmt.Sprintf(`{"x":%q}`, noise)}
	if err := w.store.RegisterBlock(w.ctx, huge, nil, nil); !errors.Is(err, records.ErrMetaTooLarge) {
		t.Fatalf("a %d-byte random meta.json: %v, want ErrMetaTooLarge", len(huge.Meta), err)
	}
	if _, ok, _ := w.store.GetBlock(w.ctx, "acme", "HUGE"); ok {
		t.Fatal("the refused block was recorded")
	}
}

// TestClaimOfManySources: a version over 250 sources (a big Cortex tenant's
// range) claims them in transactions of at most 100.
func TestClaimOfManySources(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var srcs []records.Block
	for i := range 250 {
		srcs = append(srcs, w.block(fmt.Sprintf("S%03d", i), protocol.BlockLive))
	}
	g := w.planned(records.Group{}, srcs, 1)
	got, err := w.store.GetBlocks(w.ctx, "acme", g.Sources)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range got {
		if b.State != protocol.BlockClaimed || b.ClaimedBy != g.Ref() {
			t.Fatalf("%s is %s claimed by %q", b.ID, b.State, b.ClaimedBy)
		}
	}
	if len(got) != 250 {
		t.Fatalf("%d of 250 claimed", len(got))
	}
}
