package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// halfDay uploads a tenant's first 12 hours of day() as six 2h blocks.
func halfDay(ctx context.Context, w *testworld.World, tenant string, seed int64) []blockgen.Block {
	blocks := w.Generate(blockgen.Options{Tenant: tenant, Start: day(), Blocks: 6, Series: 30, Seed: seed, ThanosFiles: true})
	for _, b := range blocks {
		w.Upload(ctx, tenant, b.Dir)
	}
	return blocks
}

// settleTimeout bounds how long a pipeline may take to settle: it only
// ends a pipeline that is stuck. A settled pipeline returns at once, and
// the whole suite shares one emulator on a two-core machine (the e2e
// package has taken 7 minutes there under load).
const settleTimeout = 10 * time.Minute

// settle runs the pipeline until the tenants are quiescent.
func settle(t *testing.T, w *testworld.World, tenants ...string) {
	t.Helper()
	err := w.Pipeline.Settle(context.Background(), 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
		return w.Quiescent(ctx, tenants...)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// byID indexes block records.
func byID(blocks []records.Block) map[string]records.Block {
	m := map[string]records.Block{}
	for _, b := range blocks {
		m[b.ID] = b
	}
	return m
}

// settleUntil runs the pipeline until the tenants are quiescent and cond
// holds (a range that closes only after its close delay is quiescent while
// it waits).
func settleUntil(t *testing.T, w *testworld.World, cond func(context.Context) (bool, error), tenants ...string) {
	t.Helper()
	err := w.Pipeline.Settle(context.Background(), 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
		if ok, err := cond(ctx); err != nil || !ok {
			return false, err
		}
		return w.Quiescent(ctx, tenants...)
	})
	if err != nil {
		t.Fatal(err)
	}
}
