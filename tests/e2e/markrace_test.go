package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// A MARK op writes deletion-mark.json, then the sweep moves the block to
// DELETED before the op records the mark's version (or the op crashes
// there). The mark's version is then named by no record; the DELETE op that
// follows in the block key's FIFO order must remove it with the rest, or it
// is orphaned forever (I4). Found by the demo test under load.
func TestMarkLosingToDeletionLeavesNoOrphan(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "record lost", true: "crash after write"}[crash]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := testworld.New(t, testworld.Options{})
			ctx := context.Background()
			blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 1, Series: 10, Seed: 4, ThanosFiles: true})
			w.Upload(ctx, "acme", blocks[0].Dir)
			if err := w.Pipeline.Settle(ctx, time.Second, time.Minute, func(ctx context.Context) (bool, error) {
				_, ok, err := w.Store.GetBlock(ctx, "acme", blocks[0].Meta.ULID.String())
				return ok, err
			}); err != nil {
				t.Fatal(err)
			}
			id := blocks[0].Meta.ULID.String()
			b, _, _ := w.Store.GetBlock(ctx, "acme", id)
			const ref = "acme/1#0@v1"
			now := time.Now()
			if err := w.Store.Claim(ctx, ref, []records.Block{b}, now); err != nil {
				t.Fatal(err)
			}
			b, _, _ = w.Store.GetBlock(ctx, "acme", id)
			markGen, err := w.Store.Retire(ctx, ref, b, now, now)
			if err != nil {
				t.Fatal(err)
			}

			deps := *w.Pipeline.Deps
			errCrash := errors.New("crash")
			deps.Hook = func(ctx context.Context, step pipeline.Step, _ string) error {
				if step != "uploader.mark-written" {
					return nil
				}
				// The sweep's deletion lands between the write and its record.
				b, _, _ := w.Store.GetBlock(ctx, "acme", id)
				if _, err := w.Store.StartDelete(ctx, b, nil, time.Now()); err != nil {
					t.Errorf("start delete: %v", err)
				}
				if crash {
					return errCrash
				}
				return nil
			}
			up := pipeline.Uploader{Deps: &deps}
			err = up.Execute(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen})
			if crash != errors.Is(err, errCrash) {
				t.Fatalf("mark: %v", err)
			}
			// The redelivered MARK (after a crash) is stale and dropped.
			deps.Hook = nil
			if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: "acme", Block: id, Gen: markGen}); err != nil {
				t.Fatalf("stale mark: %v", err)
			}
			if err := up.Execute(ctx, messages.BlockOp{Op: messages.OpDelete, Tenant: "acme", Block: id, Gen: markGen + 1}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			k, _ := testworld.BlockKeyOf(w.Config.Layout, "acme", blocks[0].Dir)
			res, err := w.Env.Clients.S3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket), Prefix: aws.String(k.BlockPrefix())})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range res.Versions {
				t.Errorf("left behind: %s@%s", aws.ToString(v.Key), aws.ToString(v.VersionId))
			}
			if len(res.DeleteMarkers) > 0 {
				t.Errorf("%d delete markers: a delete without a VersionId", len(res.DeleteMarkers))
			}
		})
	}
}
