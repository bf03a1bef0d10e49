// Package e2e drives the whole pipeline — S3 notifications, the four
// handlers behind the local event-source runner, DynamoDB and the bucket —
// against the emulator, and checks what a user would check.
package e2e

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// day is a day two days ago: every range of it has ended, so only
// coverage and arrival decide readiness.
func day() time.Time { return time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour) }

type upload struct {
	tenant string
	dir    string
}

// Two tenants upload 24 hours of 2h blocks each (one with replication
// factor 2) in a shuffled order, some events duplicated. The pipeline must
// end with one compacted day per tenant (its partitions), every source
// marked and then deleted, and exactly the uploaded samples live.
func TestConvergence(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.Policy.MaxSeriesPerPartition = 150 // small, so groups get 4 and 8 partitions
	}})
	ctx := context.Background()
	start := day()
	var ups []upload
	for _, spec := range []blockgen.Options{
		{Tenant: "alpha", Start: start, Blocks: 12, Series: 60, Histograms: true, Seed: 1, ThanosFiles: true},
		{Tenant: "beta", Start: start, Blocks: 12, Series: 60, ReplicationFactor: 2, Seed: 2, ThanosFiles: true},
	} {
		for _, b := range w.Generate(spec) {
			ups = append(ups, upload{spec.Tenant, b.Dir})
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(ups), func(i, j int) { ups[i], ups[j] = ups[j], ups[i] })
	dups := 0
	for i, u := range ups {
		w.Upload(ctx, u.tenant, u.dir)
		if i%5 == 0 {
			w.DuplicateEvent(ctx, u.tenant, u.dir)
			dups++
		}
	}

	tenants := []string{"alpha", "beta"}
	err := w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
		return w.Quiescent(ctx, tenants...)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range tenants {
		blocks := w.Blocks(ctx, tenant)
		live := testworld.Live(blocks)
		if len(live) == 0 {
			t.Fatalf("%s: no live blocks", tenant)
		}
		version := ""
		for _, b := range live {
			v, _, _ := strings.Cut(b.ProducedBy, "/p")
			if b.Level != 2 || b.MinT < start.UnixMilli() || b.MaxT > start.Add(24*time.Hour).UnixMilli() {
				t.Errorf("%s: live block %s is level %d over [%d, %d); want only the compacted day", tenant, b.ID, b.Level, b.MinT, b.MaxT)
			}
			if version != "" && v != version {
				t.Errorf("%s: live blocks of two versions: %s and %s", tenant, version, v)
			}
			version = v
		}
		uploaded := map[string]bool{}
		for _, d := range w.Uploaded[tenant] {
			uploaded[d[strings.LastIndex(d, "/")+1:]] = true
		}
		for _, b := range blocks {
			if uploaded[b.ID] && b.State != protocol.BlockDeleted {
				t.Errorf("%s: uploaded block %s is %s, want DELETED", tenant, b.ID, b.State)
			}
			if b.State == protocol.BlockDeleted && b.MarkVersionID == "" {
				t.Errorf("%s: block %s was deleted without a deletion mark first", tenant, b.ID)
			}
		}
		t.Logf("%s: %d live blocks of %s; %d records in all", tenant, len(live), version, len(blocks))
	}
	if err := w.CheckQuiescent(ctx, tenants...); err != nil {
		t.Fatal(err)
	}
	// Request economy: the pipeline's own requests over every uploaded
	// block's whole life (upload → 12h → 24h → deleted).
	total := 0
	for _, c := range w.Requests.Snapshot() {
		total += c.N
		t.Logf("requests: %-36s %5d  (%.1f per uploaded block)", c.Operation, c.N, float64(c.N)/float64(len(ups)))
		// One LIST of a block's own prefix per registration (it replaces
		// a HEAD per file) and per duplicate event of an upload (the
		// planner registers an upload without reading its record first;
		// the duplicate's registration loses its condition), orphan sweeps
		// of partitions leased twice, and nothing wider than one block.
		if strings.HasSuffix(c.Operation, awsenv.WiderThanABlock) {
			t.Errorf("the pipeline listed more than one block's prefix: %s × %d", c.Operation, c.N)
		}
		if strings.HasPrefix(c.Operation, "S3 List") && c.N > len(ups)+dups+len(ups)/4 {
			t.Errorf("the pipeline listed %d times for %d uploaded blocks and %d duplicate events: %s", c.N, len(ups), dups, c.Operation)
		}
	}
	t.Logf("requests: %d in all for %d uploaded blocks: %.1f per block", total, len(ups), float64(total)/float64(len(ups)))
}
