package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/overrides"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// putOverrides writes the runtime overrides object, as an operator does.
func putOverrides(t *testing.T, w *testworld.World, body string) {
	t.Helper()
	if _, err := w.Env.Clients.S3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(w.Config.Bucket),
		Key: aws.String(overrides.Key(w.Config.Layout)), Body: stringsReader(body)}); err != nil {
		t.Fatal(err)
	}
}

// states counts a tenant's blocks by state.
func states(w *testworld.World, tenant string) map[protocol.BlockState]int {
	out := map[protocol.BlockState]int{}
	for _, b := range w.Blocks(context.Background(), tenant) {
		out[b.State]++
	}
	return out
}

// Per-tenant overrides take effect without a redeploy: one tenant's
// retention expires its blocks on retention's own schedule while another
// tenant, its compaction disabled, keeps its blocks as uploaded. An object
// with a typo is refused with its line named (sluice status says so) and
// the last good overrides stay in force; clearing the override lets the
// second tenant's range be compacted with no new upload.
func TestOverridesPerTenantWithoutRedeploy(t *testing.T) {
	t.Parallel()
	clock := &testworld.Clock{}
	keep := time.Since(day().Add(18*time.Hour)).Round(time.Hour) + time.Hour
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Now: clock.Now}, Configure: func(c *config.Config) {
		c.OverridesTTL = time.Second
		c.RetentionInterval = 2 * time.Second
		c.Policy.CloseDelay = 3 * time.Second
	}})
	ctx := context.Background()
	putOverrides(t, w, fmt.Sprintf("overrides:\n  acme:\n    retention: %dh\n  legacy:\n    compaction_disabled: true\n", int(keep.Hours())))
	halfDay(ctx, w, "acme", 81)
	legacy := halfDay(ctx, w, "legacy", 82)
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		bs, err := w.Store.TenantBlocks(ctx, "acme")
		if err != nil || len(bs) == 0 {
			return false, err
		}
		for _, b := range bs {
			if b.State != protocol.BlockDeleted {
				return false, nil
			}
		}
		return true, nil
	}, "acme", "legacy")
	if got := states(w, "legacy"); got[protocol.BlockLive] != len(legacy) || len(got) != 1 {
		t.Fatalf("legacy's blocks: %v; want all %d LIVE, never compacted", got, len(legacy))
	}

	// A typo: refused, named by its line; the last good overrides stay.
	putOverrides(t, w, "overrides:\n  legacy:\n    compaction_disabld: false\n")
	_, err := cli.LoadOverrides(ctx, w.Env.Clients.S3, w.Config)
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("a bad overrides object loads with %v; want an error naming line 3", err)
	}
	clock.Advance(20 * time.Minute) // past the disabled range's next look
	settle(t, w, "acme", "legacy")
	if got := states(w, "legacy"); got[protocol.BlockLive] != len(legacy) || len(got) != 1 {
		t.Fatalf("after a bad overrides object legacy's blocks are %v; want the last good overrides kept: all LIVE", got)
	}

	// Cleared: legacy's range is compacted when it is looked at again.
	putOverrides(t, w, "overrides: {}\n")
	clock.Advance(20 * time.Minute)
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "legacy", legacy[0].Meta.ULID.String())
		return b.State == protocol.BlockDeleted, err
	}, "legacy")
	rep, err := cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range rep.Tenants {
		if len(ts.Overrides) != 0 {
			t.Errorf("%s still shows overrides %v after they were cleared", ts.Tenant, ts.Overrides)
		}
	}
	w.Uploaded["acme"] = nil // expired by its retention, as asked
	if err := w.CheckQuiescent(ctx, "acme", "legacy"); err != nil {
		t.Fatal(err)
	}
}
