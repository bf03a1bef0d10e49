package e2e

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/bucketindex"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/s3errors"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// readIndex reads a tenant's bucket index as a Cortex or Mimir
// store-gateway reads it; ok is false while there is none.
func readIndex(t *testing.T, w *testworld.World, tenant string) (idx bucketindex.Index, versions int, ok bool) {
	t.Helper()
	ctx := context.Background()
	key := w.Config.Layout.TenantPrefix(tenant) + bucketindex.File
	res, err := w.Env.Clients.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(key)})
	if s3errors.IsNotFound(err) {
		return idx, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	idx, err = bucketindex.Decode(body)
	if err != nil {
		return idx, 0, false // not (yet) an index: the test's own garbage
	}
	vs, err := w.Env.Clients.S3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket), Prefix: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	return idx, len(vs.Versions), true
}

// visible lists, by ULID, the blocks of a tenant a reader may query.
func visible(w *testworld.World, tenant string) []string {
	var out []string
	for _, b := range w.Blocks(context.Background(), tenant) {
		if bucketindex.Visible(b) {
			out = append(out, b.ID)
		}
	}
	slices.Sort(out)
	return out
}

// indexed lists the blocks of an index by ULID.
func indexed(idx bucketindex.Index) []string {
	var out []string
	for _, b := range idx.Blocks {
		out = append(out, b.ID.String())
	}
	slices.Sort(out)
	return out
}

// A Cortex or Mimir bucket gets each tenant's bucket-index.json.gz, kept
// from the records and never from a LIST: once the half day is compacted
// and its sources deleted, the index lists exactly the blocks a reader
// may query (the output), each with its range, and nothing deleted. A
// write that finds the index changed since it read it (here: another
// writer's object put in between) fails its If-Match and is retried from
// the records, so no writer ever puts an index over a newer one, and the
// version it replaced is deleted.
func TestBucketIndexFollowsTheRecords(t *testing.T) {
	t.Parallel()
	steps := &testworld.Steps{}
	// Each PUBLISH starts more than a second after its output's commit: an
	// index that took the commit's time for uploaded_at would date the
	// output before its meta.json.
	hook := func(ctx context.Context, s pipeline.Step, subject string) error {
		if s == "uploader.before-publish" {
			time.Sleep(1100 * time.Millisecond)
		}
		return steps.Hook(ctx, s, subject)
	}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: hook}, Configure: func(c *config.Config) {
		c.BucketIndex = bucketindex.Mimir
		c.BucketIndexInterval = 5 * time.Second
	}})
	ctx := context.Background()
	raced := steps.At("uploader.before-index-put", "acme")
	blocks := halfDay(ctx, w, "acme", 71)
	settled := make(chan error, 1)
	go func() {
		settled <- w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
			b, _, err := w.Store.GetBlock(ctx, "acme", blocks[0].Meta.ULID.String())
			if err != nil || b.State != protocol.BlockDeleted {
				return false, err
			}
			if ok, err := w.Quiescent(ctx, "acme"); err != nil || !ok {
				return false, err
			}
			// The scheduled pass rewrites the index after the deletions;
			// the pipeline keeps running until one has.
			got, versions, ok := readIndex(t, w, "acme")
			return ok && versions == 1 && slices.Equal(indexed(got), visible(w, "acme")), nil
		})
	}()
	// The first index write is held after it read the records; another
	// writer's object lands meanwhile.
	raced.Wait(t, settleTimeout)
	key := w.Config.Layout.TenantPrefix("acme") + bucketindex.File
	if _, err := w.Env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(key),
		Body: stringsReader("not an index")}); err != nil {
		t.Fatal(err)
	}
	raced.Release()
	if err := <-settled; err != nil {
		t.Fatal(err)
	}

	for _, b := range w.Blocks(ctx, "acme") {
		if b.State == protocol.BlockLive && b.Level == 0 {
			t.Errorf("source %s is still live", b.ID)
		}
	}
	live := visible(w, "acme")
	idx, versions, ok := readIndex(t, w, "acme")
	if len(live) == 0 || !ok || versions != 1 || !slices.Equal(indexed(idx), live) {
		t.Fatalf("index lists %v in %d version(s) (readable %v); want exactly the live blocks %v, one version", indexed(idx), versions, ok, live)
	}
	if idx.Version != 2 || len(idx.BlockDeletionMarks) != 0 || time.Since(time.Unix(idx.UpdatedAt, 0)) > time.Minute {
		t.Errorf("index = version %d, %d deletion marks, updated %v; want Mimir's version 2, none, just now",
			idx.Version, len(idx.BlockDeletionMarks), time.Unix(idx.UpdatedAt, 0))
	}
	all := byID(w.Blocks(ctx, "acme"))
	for _, e := range idx.Blocks {
		b := all[e.ID.String()]
		if e.MinTime != b.MinT || e.MaxTime != b.MaxT || e.UploadedAt == 0 || e.SegmentsFormat != bucketindex.SegmentsFormat1Based6Digits {
			t.Errorf("index entry %+v does not describe block %s [%d, %d)", *e, b.ID, b.MinT, b.MaxT)
		}
		// Cortex's and Mimir's updaters take uploaded_at from meta.json's
		// last-modified time, and their queriers give store-gateways a
		// grace from it to load the block: Sluice's may not be earlier.
		meta, err := w.Env.Clients.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Config.Bucket),
			Key: aws.String(w.Config.Layout.TenantPrefix(b.Tenant) + b.ID + "/meta.json"), VersionId: aws.String(b.MetaVersionID)})
		if err != nil {
			t.Fatal(err)
		}
		if written := aws.ToTime(meta.LastModified).Unix(); e.UploadedAt < written {
			t.Errorf("index dates block %s uploaded at %d, before its meta.json was written (%d)", b.ID, e.UploadedAt, written)
		}
	}
	// Every retired source got its global marker beside its own mark
	// (<tenant>/markers/<ULID>-deletion-mark.json), and lost it with its
	// deletion.
	for _, b := range blocks {
		r := all[b.Meta.ULID.String()]
		if r.State != protocol.BlockDeleted || r.GlobalMarkVersionID == "" {
			t.Errorf("source %s is %s with global marker %q; want DELETED after one was written", r.ID, r.State, r.GlobalMarkVersionID)
		}
	}
	markers, err := w.Env.Clients.S3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket),
		Prefix: aws.String(w.Config.Layout.TenantPrefix("acme") + "markers/")})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(markers.Versions) + len(markers.DeleteMarkers); n != 0 {
		t.Errorf("%d global marker versions are left after their blocks were deleted", n)
	}
	// The held write lost to the other object and was made again.
	puts := 0
	for _, s := range steps.Trace() {
		if strings.Contains(s, "uploader.before-index-put") {
			puts++
		}
	}
	if puts < 2 {
		t.Errorf("the index was put %d times; want the raced write retried", puts)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	keepsAnUnchangedIndex(t, w, "acme")
}

// keepsAnUnchangedIndex: with nothing changed, a scheduled request leaves
// the index as it is (no PUT, no DELETE) until it would be older than
// SLUICE_BUCKET_INDEX_MAX_AGE at the next pass, then rewrites it, and a
// change's request always writes; each write leaves one version listing
// the same blocks, its updated_at the writer's clock, and a kept index
// keeps its updated_at.
func keepsAnUnchangedIndex(t *testing.T, w *testworld.World, tenant string) {
	t.Helper()
	ctx := context.Background()
	key := w.Config.Layout.TenantPrefix(tenant) + bucketindex.File
	current := func() (vid, sum string) {
		t.Helper()
		h, err := w.Env.Clients.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(h.VersionId), h.Metadata[bucketindex.MetadataContentSum]
	}
	before, _, _ := readIndex(t, w, tenant)
	first, sum := current()
	if sum == "" {
		t.Fatalf("the index carries no %s metadata", bucketindex.MetadataContentSum)
	}
	later := *w.Pipeline.Deps
	skew := w.Config.BucketIndexMaxAge
	later.Now = func() time.Time { return time.Now().Add(skew) }
	for _, tc := range []struct {
		name      string
		deps      *pipeline.Deps
		scheduled bool
		written   bool
	}{
		{"scheduled, unchanged and young", w.Pipeline.Deps, true, false},
		{"a change's request", w.Pipeline.Deps, false, true},
		{"scheduled, one maximum age later", &later, true, true},
	} {
		was, _ := current()
		prior, _, _ := readIndex(t, w, tenant)
		clock := time.Now()
		if tc.deps.Now != nil {
			clock = tc.deps.Now()
		}
		if err := (pipeline.Uploader{Deps: tc.deps}).WriteIndex(ctx, messages.IndexRequest{Tenant: tenant, Why: "test", Scheduled: tc.scheduled}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		vid, got := current()
		idx, versions, ok := readIndex(t, w, tenant)
		if written := vid != was; written != tc.written || got != sum || !ok || versions != 1 || !slices.Equal(indexed(idx), indexed(before)) {
			t.Errorf("%s: written %v (version %s after %s), sum %s (want %s), %d version(s), lists %v; want written %v, one version listing %v",
				tc.name, written, vid, was, got, sum, versions, indexed(idx), tc.written, indexed(before))
		}
		switch {
		case tc.written && idx.UpdatedAt < clock.Unix():
			t.Errorf("%s: updated_at %v, want the writer's clock, %v", tc.name, time.Unix(idx.UpdatedAt, 0), clock)
		case !tc.written && idx.UpdatedAt != prior.UpdatedAt:
			t.Errorf("%s: updated_at %v, want the kept index's %v", tc.name, time.Unix(idx.UpdatedAt, 0), time.Unix(prior.UpdatedAt, 0))
		}
	}
	if last, _ := current(); last == first {
		t.Errorf("the index was never rewritten")
	}
}
