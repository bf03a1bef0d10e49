package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// The AWS limits the emulator does not enforce are enforced between the
// pipeline and it (shared/awslimits; CheckQuiescent fails on any
// refusal): these tests run what used to break them.

// TestLongTenantEndToEnd: a tenant id of 150 characters (the longest
// Cortex and Mimir accept) compacts end to end. Its FIFO message group ids
// — tenant/ULID, tenant/group — would be over SQS's 128 characters as
// they were; they are shortened with a hash.
func TestLongTenantEndToEnd(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{})
	ctx := context.Background()
	tenant := strings.Repeat("team-with-a-long-name.", 7)[:blockkey.MaxTenantLength]
	if err := blockkey.ValidateTenant(tenant); err != nil {
		t.Fatal(err)
	}
	for _, b := range w.Generate(blockgen.Options{Tenant: tenant, Start: day(), Blocks: 6, Series: 20, Seed: 31, ThanosFiles: true}) {
		w.Upload(ctx, tenant, b.Dir)
	}
	settle(t, w, tenant)
	live := testworld.Live(w.Blocks(ctx, tenant))
	if len(live) == 0 || live[0].ProducedBy == "" {
		t.Fatalf("the tenant's blocks were not compacted: %d live", len(live))
	}
	if err := w.CheckQuiescent(ctx, tenant); err != nil {
		t.Fatal(err)
	}
}

// TestLargeMetaJSON: a block whose meta.json names 20,000 sources and is
// padded to 1 MiB (DynamoDB items hold 400 KB) is registered and compacted
// with its neighbour, and the output — whose compaction.sources is the
// union, 20,001 ULIDs — is published whole. A meta.json too large to
// record (4 MiB of noise) is REJECTED with the reason, never a crash loop.
func TestLargeMetaJSON(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) { c.Policy.CloseDelay = 3 * time.Second }})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 3, Series: 20, Seed: 32, ThanosFiles: true})
	big, noisy := blocks[0], blocks[2]
	for range 20000 {
		big.Meta.Compaction.Sources = append(big.Meta.Compaction.Sources, ulid.Make())
	}
	pad, _ := json.Marshal(strings.Repeat("p", 1<<20-len(mustMarshal(t, big.Meta))-32))
	big.Meta.Unknown = map[string]json.RawMessage{"padding": pad}
	if err := big.Meta.WriteDir(big.Dir); err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 3<<20)
	_, _ = rand.Read(noise)
	junk, _ := json.Marshal(base64.StdEncoding.EncodeToString(noise))
	noisy.Meta.Unknown = map[string]json.RawMessage{"noise": junk}
	if err := noisy.Meta.WriteDir(noisy.Dir); err != nil {
		t.Fatal(err)
	}
	w.Upload(ctx, "acme", big.Dir)
	w.Upload(ctx, "acme", blocks[1].Dir)
	if err := testworld.UploadBlock(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, "acme", noisy.Dir); err != nil {
		t.Fatal(err)
	}
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", big.Meta.ULID.String())
		return b.State == protocol.BlockDeleted, err
	}, "acme")

	all := byID(w.Blocks(ctx, "acme"))
	if r := all[noisy.Meta.ULID.String()]; r.State != protocol.BlockRejected || !strings.Contains(r.Reason, "too large") {
		t.Errorf("the 4 MiB meta.json: %s (%q), want REJECTED as too large", r.State, r.Reason)
	}
	live := testworld.Live(w.Blocks(ctx, "acme"))
	if len(live) != 1 || live[0].MetaParts == 0 {
		t.Fatalf("%d live blocks; want the one output, its meta.json kept in parts", len(live))
	}
	published, err := blockmeta.Parse(readObject(t, w, "acme", live[0].ID, blockkey.MetaFile), live[0].Key())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(published.Compaction.Sources); n != 20002 {
		t.Errorf("the published output names %d sources, want 20,002 (20,000 + the two uploads)", n)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

func mustMarshal(t *testing.T, m *blockmeta.Meta) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
