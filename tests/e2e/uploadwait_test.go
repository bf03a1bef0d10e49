package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// A replica that ships its blocks minutes after the first is a source of
// the range's first version, not of a second: the range, covered by the
// first replica's six blocks, waits the upload wait after its newest
// upload (each arrival moving the wait on), then the sweep plans it once
// over all twelve. Without the wait, the first replica's last block
// would have planned the range alone and the second replica's blocks
// would have needed a version of their own, reading and writing the
// range's samples again.
func TestUploadWaitGathersLateReplicas(t *testing.T) {
	t.Parallel()
	const wait = 10 * time.Minute
	clock := &testworld.Clock{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Now: clock.Now},
		Configure: func(c *config.Config) {
			c.ReplicaLabels = []string{"replica"}
			c.Policy.Ranges = []time.Duration{12 * time.Hour}
			c.Policy.UploadWait = wait
		}})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 61, ThanosFiles: true,
		ExternalLabels: map[string]string{"cluster": "east"}, ReplicationFactor: 2, ReplicaLabel: "replica"})
	var first, second []blockgen.Block
	for _, b := range blocks {
		if b.Replica == 0 {
			first = append(first, b)
		} else {
			second = append(second, b)
		}
	}
	if len(first) != 6 || len(second) != 6 {
		t.Fatalf("the workload has %d and %d blocks per replica, want 6 each", len(first), len(second))
	}
	g := planning.GroupKey{Stream: stream.Of(first[0].Meta, w.Config.ReplicaLabels).ID(), Level: 1, RangeStart: day().UnixMilli()}
	registered := func(n int) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			bs, err := w.Store.TenantBlocks(ctx, "acme")
			uploads := 0
			for _, b := range bs {
				if b.Level == 0 {
					uploads++
				}
			}
			return uploads == n, err
		}
	}
	waitsUntil := func(when string) time.Time {
		t.Helper()
		if _, planned, err := w.Store.GetGroup(ctx, "acme", g); err != nil || planned {
			t.Fatalf("%s: the range was planned (%v) within the upload wait", when, err)
		}
		due, err := w.Store.Due(ctx, records.AgendaRange, clock.Now().Add(24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var last time.Time
		for _, e := range due {
			if e.Tenant == "acme" && e.Subject == g.String() && e.Due.After(last) {
				last = e.Due
			}
		}
		if last.IsZero() {
			t.Fatalf("%s: the covered range waits with nothing on the agenda to plan it", when)
		}
		return last
	}

	for _, b := range first {
		w.Upload(ctx, "acme", b.Dir)
	}
	settleUntil(t, w, registered(6), "acme")
	firstDue := waitsUntil("after the first replica")
	if d := firstDue.Sub(clock.Now()); d <= 0 || d > wait {
		t.Fatalf("the range is to be planned %v from now; want within the %v upload wait", d, wait)
	}

	clock.Advance(wait / 2)
	for _, b := range second {
		w.Upload(ctx, "acme", b.Dir)
	}
	settleUntil(t, w, registered(12), "acme")
	if due := waitsUntil("after the second replica, half the wait later"); !due.After(firstDue) {
		t.Fatalf("the second replica's uploads did not move the wait on: due %v, was %v", due, firstDue)
	}

	clock.Advance(wait)
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		head, ok, err := w.Store.GetGroup(ctx, "acme", g)
		return ok && head.State == protocol.GroupRetired, err
	}, "acme")
	head, _, err := w.Store.GetGroup(ctx, "acme", g)
	if err != nil {
		t.Fatal(err)
	}
	if head.Version != 1 || len(head.Sources) != 12 {
		t.Errorf("the range ran version %d over %d sources; want one version over both replicas' 12 blocks", head.Version, len(head.Sources))
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}
