package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// TestRunBesideTheDeployedPipeline: 'sluice run' against a deployment
// whose own pipeline is at work — as it would run in AWS beside the
// deployed functions, competing for the same queues — is safe: both
// consume, every change is fenced, and the result is as if one had run
// (I1–I4 hold, nothing reaches a DLQ).
func TestRunBesideTheDeployedPipeline(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{})
	ctx := context.Background()
	for _, tenant := range []string{"acme", "beta"} {
		for _, b := range w.Generate(blockgen.Options{Tenant: tenant, Start: day(), Blocks: 12, Series: 20, Seed: 41, ThanosFiles: true,
			ReplicationFactor: 2, ReplicaLabel: "__ingester_id__"}) {
			w.Upload(ctx, tenant, b.Dir)
		}
	}
	var wg sync.WaitGroup
	var runErr error
	var sum *cli.RunSummary
	wg.Add(1)
	go func() {
		defer wg.Done()
		rctx, cancel := context.WithTimeout(ctx, settleTimeout)
		defer cancel()
		sum, runErr = cli.RunPipeline(rctx, w.Env.Clients, w.Config, cli.RunOptions{UntilIdle: true, SweepEvery: time.Second, Logger: w.Env.Logger})
	}()
	settle(t, w, "acme", "beta")
	wg.Wait()
	if runErr != nil {
		t.Fatalf("sluice run: %v", runErr)
	}
	if sum.Invocations["compact"]+sum.Invocations["planner"] == 0 {
		t.Errorf("sluice run handled nothing (%v): the test did not make it compete", sum.Invocations)
	}
	t.Logf("sluice run's invocations: %v", sum.Invocations)
	settle(t, w, "acme", "beta")
	if err := w.CheckQuiescent(ctx, "acme", "beta"); err != nil {
		t.Fatal(err)
	}
}
