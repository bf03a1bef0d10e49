package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// A block with no-compact-mark.json is never a source: its range is
// compacted around it once the range closes, and it stays live as it is.
func TestNoCompactMarkIsHonoured(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) { c.Policy.CloseDelay = 3 * time.Second }})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 3, ThanosFiles: true})
	marked := blocks[2]
	k, err := testworld.BlockKeyOf(w.Config.Layout, "acme", marked.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(w.Config.Bucket),
		Key:  aws.String(k.Object(blockkey.NoCompactMarkFile)),
		Body: stringsReader(`{"id":"` + marked.Meta.ULID.String() + `","version":1,"reason":"manual","no_compact_time":1}`)}); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		w.Upload(ctx, "acme", b.Dir)
	}
	// The range waits for its close delay (it is never covered), then is
	// compacted around the marked block.
	sibling := blocks[0].Meta.ULID.String()
	err = w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", sibling)
		if err != nil || b.State != protocol.BlockDeleted {
			return false, err
		}
		return w.Quiescent(ctx, "acme")
	})
	if err != nil {
		t.Fatal(err)
	}
	all := byID(w.Blocks(ctx, "acme"))
	m := all[marked.Meta.ULID.String()]
	if m.State != protocol.BlockLive || !m.NoCompact || m.ClaimedBy != "" || m.Gen != 1 {
		t.Fatalf("no-compact block = %s gen %d noCompact %v claimedBy %q; want untouched LIVE", m.State, m.Gen, m.NoCompact, m.ClaimedBy)
	}
	for _, b := range blocks {
		if b.Dir == marked.Dir {
			continue
		}
		if s := all[b.Meta.ULID.String()].State; s != protocol.BlockDeleted {
			t.Errorf("source %s is %s, want DELETED after compaction around the marked block", b.Meta.ULID, s)
		}
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}
