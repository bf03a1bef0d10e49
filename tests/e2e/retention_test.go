package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Retention retires every block whose end is older than the retention —
// marked, then deleted after the deletion delay, like a compacted source —
// and nothing younger. A block that a running version has claimed is
// never expired under it: the pass that runs while the version compacts
// leaves its sources alone, and the output it commits is expired by the
// next pass. `sluice status` says which block expires next, and when.
func TestRetentionExpiresWhatIsPastIt(t *testing.T) {
	t.Parallel()
	// Blocks ending before day()+18h are past the retention; the young
	// ones (from day()+24h) are not, for as long as the test runs.
	keep := time.Since(day().Add(18 * time.Hour))
	steps := &testworld.Steps{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: steps.Hook}, Configure: func(c *config.Config) {
		c.Retention.Raw = keep
		c.RetentionInterval = time.Hour // the test runs each pass itself, at the step it chooses
	}})
	ctx := context.Background()
	at := steps.At("compact.before-commit", "@v1/")
	old := halfDay(ctx, w, "acme", 61)
	young := w.Generate(blockgen.Options{Tenant: "acme", Start: day().Add(24 * time.Hour), Blocks: 3, Series: 20, Seed: 62, ThanosFiles: true})
	for _, b := range young {
		w.Upload(ctx, "acme", b.Dir)
	}
	retention := pipeline.Cleaner{Deps: w.Pipeline.Deps}
	oldEnd := day().Add(12 * time.Hour).UnixMilli()
	settled := make(chan error, 1)
	go func() {
		settled <- w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
			bs, err := w.Store.TenantBlocks(ctx, "acme")
			if err != nil {
				return false, err
			}
			live := 0
			for _, b := range bs {
				if b.MaxT <= oldEnd && b.State != protocol.BlockDeleted && b.State != protocol.BlockDiscarded {
					return false, nil
				}
				if b.State == protocol.BlockLive {
					live++
				}
			}
			if live != len(young) {
				return false, nil
			}
			return w.Quiescent(ctx, "acme")
		})
	}()

	// A pass while the old half day is being compacted: its sources are
	// claimed, and stay so.
	at.Wait(t, settleTimeout)
	if err := retention.Retention(ctx); err != nil {
		t.Fatal(err)
	}
	for _, b := range old {
		got, _, err := w.Store.GetBlock(ctx, "acme", b.Meta.ULID.String())
		if err != nil {
			t.Fatal(err)
		}
		if got.State != protocol.BlockClaimed {
			t.Errorf("source %s is %s after a retention pass during its compaction; want still CLAIMED", got.ID, got.State)
		}
	}
	at.Release()
	// The output, once live, is past the retention too: the next pass
	// expires it.
	var output string
	waitFor(t, func() (bool, error) {
		bs, err := w.Store.TenantBlocks(ctx, "acme")
		for _, b := range bs {
			if b.Level >= 1 && b.State == protocol.BlockLive && b.Published {
				output = b.ID
			}
		}
		return output != "", err
	})
	if err := retention.Retention(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatal(err)
	}

	all := byID(w.Blocks(ctx, "acme"))
	if o := all[output]; o.State != protocol.BlockDeleted || o.MarkVersionID == "" {
		t.Errorf("expired output %s is %s (mark %q); want deleted after its deletion mark", output, o.State, o.MarkVersionID)
	}
	var youngIDs []string
	for _, b := range young {
		id := b.Meta.ULID.String()
		youngIDs = append(youngIDs, id)
		if y := all[id]; y.State != protocol.BlockLive || y.Gen != 1 {
			t.Errorf("young block %s is %s gen %d; want LIVE, untouched", id, y.State, y.Gen)
		}
	}
	rep, err := cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Tenants[0].Retention
	if r == nil || r.Due != 0 || r.Next == nil || !slices.Contains(youngIDs, r.Next.Block) {
		t.Fatalf("status retention = %+v; want nothing due and a young block next", r)
	}
	if want := time.UnixMilli(all[r.Next.Block].MaxT).Add(keep); !r.Next.At.Equal(want.UTC()) {
		t.Errorf("status says %s expires at %v, want %v (its end plus the retention)", r.Next.Block, r.Next.At, want)
	}
	for _, b := range old {
		dropUpload(w, "acme", b)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}
