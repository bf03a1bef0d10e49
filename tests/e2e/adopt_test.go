package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// failingSends is the block-events queue of a `sluice adopt` that dies
// after its first few sends.
type failingSends struct {
	cli.AdoptSQS
	left int
}

func (f *failingSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if f.left == 0 {
		return nil, errors.New("connection reset")
	}
	f.left--
	return f.AdoptSQS.SendMessage(ctx, in, o...)
}

// `sluice adopt` takes over a bucket that another compactor looked after:
// blocks that were there before Sluice (no notification ever reached it)
// are found by one paginated LIST, reported per tenant by a dry run that
// changes nothing, and registered by --apply — resumed after an
// interruption — with every check an upload gets. Level-0 blocks are
// compacted, a block longer than the top range (a Thanos 2d block) stays
// as it is, a block under another tool's deletion mark is deleted when
// the delay from its mark ends, one under a no-compact mark is left alone,
// and a partial upload (no meta.json) is reported and left alone.
func TestAdoptTakesOverABucket(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) { c.Policy.CloseDelay = 3 * time.Second }})
	ctx := context.Background()
	s3c := w.Env.Clients.S3
	bucket := aws.String(w.Config.Bucket)

	// The bucket as the other compactor left it: its notifications to
	// Sluice are not there yet.
	notif, err := s3c.GetBucketNotificationConfiguration(ctx, &s3.GetBucketNotificationConfigurationInput{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: bucket,
		NotificationConfiguration: &s3types.NotificationConfiguration{}}); err != nil {
		t.Fatal(err)
	}
	level0 := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 51, ThanosFiles: true})
	twoDay := w.Generate(blockgen.Options{Tenant: "acme", Start: day().Add(-96 * time.Hour), BlockRange: 48 * time.Hour, Blocks: 1,
		Series: 20, Seed: 52, ThanosFiles: true})[0]
	later := w.Generate(blockgen.Options{Tenant: "acme", Start: day().Add(24 * time.Hour), Blocks: 3, Series: 20, Seed: 53, ThanosFiles: true})
	marked, noCompact, partial := later[0], later[1], later[2]
	beta := w.Generate(blockgen.Options{Tenant: "beta", Start: day(), Blocks: 3, Series: 20, Seed: 54, ThanosFiles: true})
	for _, b := range append(append([]blockgen.Block{}, level0...), twoDay, marked, noCompact) {
		w.Upload(ctx, "acme", b.Dir)
	}
	for _, b := range beta {
		w.Upload(ctx, "beta", b.Dir)
	}
	markedID, ncID := marked.Meta.ULID.String(), noCompact.Meta.ULID.String()
	putMark(t, w, "acme", markedID, blockkey.DeletionMarkFile, time.Now().Add(-time.Hour))
	putMark(t, w, "acme", ncID, blockkey.NoCompactMarkFile, time.Now())
	// A partial upload: its index and chunks, never its meta.json.
	if err := os.Remove(filepath.Join(partial.Dir, blockkey.MetaFile)); err != nil {
		t.Fatal(err)
	}
	if err := testworld.UploadFiles(ctx, s3c, w.Config.Bucket, w.Config.Layout, "acme", partial.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: bucket,
		NotificationConfiguration: &s3types.NotificationConfiguration{QueueConfigurations: notif.QueueConfigurations}}); err != nil {
		t.Fatal(err)
	}

	deps := cli.AdoptDeps{S3: s3c, SQS: w.Env.Clients.SQS, Records: w.Store}
	opts := cli.AdoptOptions{Bucket: w.Config.Bucket, Layout: w.Config.Layout, Policy: w.Config.Policy,
		BlockEvents: w.Env.Deployment.QueueURLs[spec.BlockEvents], PageSize: 7}
	dry, err := cli.Adopt(ctx, deps, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int{
		"acme": {cli.AdoptRegister: 6, cli.AdoptAboveTop: 1, cli.AdoptMarked: 1, cli.AdoptNoCompact: 1, cli.AdoptPartial: 1},
		"beta": {cli.AdoptRegister: 3},
	}
	checkAdopt(t, "dry run", dry.Tenants, want)
	if dry.Sent != 0 || len(dry.Partial) != 1 {
		t.Errorf("dry run sent %d notifications and listed partial uploads %v; want none sent, one partial", dry.Sent, dry.Partial)
	}
	for _, tenant := range []string{"acme", "beta"} {
		if bs := w.Blocks(ctx, tenant); len(bs) != 0 {
			t.Fatalf("the dry run registered %d blocks of %s", len(bs), tenant)
		}
	}

	// --apply, interrupted after four blocks, then resumed where it said.
	opts.Apply = true
	first, err := cli.Adopt(ctx, cli.AdoptDeps{S3: s3c, SQS: &failingSends{AdoptSQS: w.Env.Clients.SQS, left: 4}, Records: w.Store}, opts)
	if err == nil || first.Sent != 4 || first.LastKey == "" {
		t.Fatalf("interrupted adopt: err %v, sent %d, resume key %q; want an error after 4 sent and a key to resume at", err, first.Sent, first.LastKey)
	}
	opts.StartAfter = first.LastKey
	rest, err := cli.Adopt(ctx, deps, opts)
	if err != nil {
		t.Fatal(err)
	}
	if total := first.Sent + rest.Sent; total != 12 {
		t.Errorf("adopt sent %d + %d notifications; want 12, one per block with a meta.json", first.Sent, rest.Sent)
	}

	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		for _, c := range []struct{ tenant, id string }{
			{"acme", level0[0].Meta.ULID.String()}, {"acme", markedID}, {"beta", beta[0].Meta.ULID.String()},
		} {
			b, _, err := w.Store.GetBlock(ctx, c.tenant, c.id)
			if err != nil || b.State != protocol.BlockDeleted {
				return false, err
			}
		}
		return true, nil
	}, "acme", "beta")

	all := byID(w.Blocks(ctx, "acme"))
	if b := all[twoDay.Meta.ULID.String()]; b.State != protocol.BlockLive || b.Gen != 1 {
		t.Errorf("the 2d block is %s gen %d; want registered LIVE and left as it is", b.State, b.Gen)
	}
	// An adopted block is dated by when its meta.json was written, as
	// Cortex's and Mimir's bucket-index updaters date it, not by its
	// adoption: queriers treat it as the old block it is.
	for _, id := range []string{twoDay.Meta.ULID.String(), ncID} {
		b := all[id]
		meta, err := w.Env.Clients.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Config.Bucket),
			Key: aws.String(w.Config.Layout.TenantPrefix(b.Tenant) + id + "/meta.json"), VersionId: aws.String(b.MetaVersionID)})
		if err != nil {
			t.Fatal(err)
		}
		if written := aws.ToTime(meta.LastModified).Unix(); b.PublishedAt/1000 != written || b.Arrived/1000 < written {
			t.Errorf("adopted block %s: publishedAt %d, arrived %d; want publishedAt its meta.json's last-modified %d, arrival its adoption",
				id, b.PublishedAt/1000, b.Arrived/1000, written)
		}
	}
	if b := all[ncID]; b.State != protocol.BlockLive || !b.NoCompact || b.Gen != 1 {
		t.Errorf("the no-compact block is %s gen %d noCompact %v; want LIVE, untouched", b.State, b.Gen, b.NoCompact)
	}
	if _, ok := all[partial.Meta.ULID.String()]; ok {
		t.Error("the partial upload was registered")
	}
	for _, b := range level0 {
		if s := all[b.Meta.ULID.String()].State; s != protocol.BlockDeleted {
			t.Errorf("adopted level-0 block %s is %s, want compacted and DELETED", b.Meta.ULID, s)
		}
	}
	// Adopting again finds every block known, and the partial upload as
	// it was.
	opts.Apply, opts.StartAfter = false, ""
	again, err := cli.Adopt(ctx, deps, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.Tenants["acme"][cli.AdoptPartial] != 1 || again.Tenants["acme"][cli.AdoptRegister] != 0 || again.Tenants["beta"][cli.AdoptRegister] != 0 {
		t.Errorf("a second adopt found %v; want nothing left to register and the partial upload still there", again.Tenants)
	}

	// The invariants are about Sluice's objects: the partial upload is
	// the other shipper's to finish or remove.
	for _, v := range listVersions(t, w, "acme", partial.Meta.ULID.String()) {
		if _, err := s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: bucket, Key: aws.String(v.RelPath), VersionId: aws.String(v.VersionID)}); err != nil {
			t.Fatal(err)
		}
	}
	dropUpload(w, "acme", marked)
	if err := w.CheckQuiescent(ctx, "acme", "beta"); err != nil {
		t.Fatal(err)
	}
}

func checkAdopt(t *testing.T, what string, got, want map[string]map[string]int) {
	t.Helper()
	for tenant, kinds := range want {
		for kind, n := range kinds {
			if got[tenant][kind] != n {
				t.Errorf("%s: %s has %d blocks to %q, want %d (report %v)", what, tenant, got[tenant][kind], kind, n, got)
			}
		}
	}
}
