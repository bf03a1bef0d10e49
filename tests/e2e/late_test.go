package e2e

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// A 2h block arriving after its day was compacted to 24h becomes a new
// version of the 24h group over the old output and the late block
// (vertical compaction), and nothing is lost.
func TestLateBlockMakesANewVersion(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{})
	ctx := context.Background()
	for _, b := range w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 12, Series: 30, Seed: 1, ThanosFiles: true}) {
		w.Upload(ctx, "acme", b.Dir)
	}
	settle(t, w, "acme")
	dayGroup := planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 2, RangeStart: day().UnixMilli()}
	before, ok, err := w.Store.GetGroup(ctx, "acme", dayGroup)
	if err != nil || !ok || before.State != protocol.GroupRetired {
		t.Fatalf("day group before the late block: %+v, %v, %v", before, ok, err)
	}
	oldLive := testworld.Live(w.Blocks(ctx, "acme"))

	late := w.Generate(blockgen.Options{Tenant: "acme", Start: day().Add(6 * 3600e9), Blocks: 1, Series: 20, Seed: 99, ThanosFiles: true})
	w.Upload(ctx, "acme", late[0].Dir)
	settle(t, w, "acme")

	after, _, err := w.Store.GetGroup(ctx, "acme", dayGroup)
	if err != nil || after.Version != before.Version+1 || after.State != protocol.GroupRetired {
		t.Fatalf("day group after the late block: version %d state %s (%v); want version %d RETIRED", after.Version, after.State, err, before.Version+1)
	}
	srcs := map[string]bool{}
	for _, s := range after.Sources {
		srcs[s] = true
	}
	if !srcs[late[0].Meta.ULID.String()] {
		t.Fatalf("the late block %s is not a source of %s (sources %v)", late[0].Meta.ULID, after.Ref(), after.Sources)
	}
	for _, b := range oldLive {
		if !srcs[b.ID] {
			t.Fatalf("old output %s is not a source of %s", b.ID, after.Ref())
		}
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}
