package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Bad input gets a clear outcome and loses nothing: a corrupt meta.json and
// a block missing its index are recorded REJECTED with the reason; a key
// outside the layout is a logged skip; a malformed message lands in the
// DLQ with its body intact. Meanwhile another tenant's work completes.
func TestBadInputIsIsolated(t *testing.T) {
	t.Parallel()
	// envtest's visibility timeout is long enough that a slow (loaded)
	// handler is never redelivered while it works, and testworld's runner
	// brings failures back after a second: only the poison, failed twice,
	// reaches the DLQ. (With a 5 s timeout, a planner batch that took 20 s
	// on a loaded machine sent a good event there.)
	w := testworld.New(t, testworld.Options{Env: []envtest.Option{envtest.WithMaxReceiveCount(2)}})
	ctx := context.Background()
	bucket := aws.String(w.Config.Bucket)
	put := func(key, body string) {
		t.Helper()
		if _, err := w.Env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}

	// Tenant "bad": a corrupt meta.json, and a block whose index is missing.
	bad := w.Generate(blockgen.Options{Tenant: "bad", Start: day(), Blocks: 2, Series: 10, Seed: 5, ThanosFiles: true})
	corrupt, noIndex := bad[0], bad[1]
	if err := os.WriteFile(filepath.Join(corrupt.Dir, blockkey.MetaFile), []byte(`{"ulid": "01J`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := testworld.UploadBlock(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, "bad", corrupt.Dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(noIndex.Dir, blockkey.IndexFile)); err != nil {
		t.Fatal(err)
	}
	if err := testworld.UploadBlock(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, "bad", noIndex.Dir); err != nil {
		t.Fatal(err)
	}
	// Blocks whose files are wrong in ways a few bytes show: an index cut
	// short, a chunk segment that does not start with Prometheus' header,
	// and a meta.json that lists a file outside the block. (Plain
	// Prometheus meta.json: no sizes to catch the truncation with.)
	damaged := w.Generate(blockgen.Options{Tenant: "bad", Start: day().Add(12 * time.Hour), Blocks: 3, Series: 10, Seed: 7})
	truncIndex, badChunk, escaping := damaged[0], damaged[1], damaged[2]
	damage := func(path string, fn func([]byte) []byte) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, fn(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	damage(filepath.Join(truncIndex.Dir, blockkey.IndexFile), func(b []byte) []byte { return b[:len(b)-200] })
	damage(filepath.Join(badChunk.Dir, blockkey.ChunksDir, "000001"), func(b []byte) []byte { b[1] ^= 0xff; return b })
	escaping.Meta.Thanos = &blockmeta.Thanos{Labels: map[string]string{}, Source: "sidecar",
		Files: []blockmeta.File{{RelPath: "../../other/index", SizeBytes: 1}}}
	if err := escaping.Meta.WriteDir(escaping.Dir); err != nil {
		t.Fatal(err)
	}
	for _, b := range damaged {
		if err := testworld.UploadBlock(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, "bad", b.Dir); err != nil {
			t.Fatal(err)
		}
	}
	// Keys outside the <tenant>/<ULID>/ layout.
	put("loose/meta.json", "{}")
	put("acme/not-a-ulid/meta.json", "{}")
	// A message that is neither an S3 event nor a Sluice message.
	const poison = `{"this is": "not an event"}`
	if _, err := w.Env.Clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(w.Env.Deployment.QueueURLs[spec.BlockEvents]), MessageBody: aws.String(poison)}); err != nil {
		t.Fatal(err)
	}
	// Tenant "good" compacts meanwhile.
	halfDay(ctx, w, "good", 6)
	settle(t, w, "good", "bad")

	rejected := byID(w.Blocks(ctx, "bad"))
	for _, c := range []struct {
		id, reason string
	}{
		{corrupt.Meta.ULID.String(), "truncated JSON"},
		{noIndex.Meta.ULID.String(), "block file missing"},
		{truncIndex.Meta.ULID.String(), "index table of contents"},
		{badChunk.Meta.ULID.String(), "chunk segment magic"},
		{escaping.Meta.ULID.String(), "leaves the block"},
	} {
		b, ok := rejected[c.id]
		if !ok || b.State != protocol.BlockRejected || !strings.Contains(b.Reason, c.reason) || !strings.Contains(b.Reason, c.id) && !strings.Contains(b.Reason, "bad/") {
			t.Errorf("block %s = %+v; want REJECTED naming the block and %q", c.id, b, c.reason)
		}
	}
	if len(rejected) != 5 {
		t.Errorf("tenant bad has %d records, want the 5 rejected blocks", len(rejected))
	}
	tenants, err := w.Store.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range tenants {
		if tn == "loose" || tn == "acme" {
			t.Errorf("a key outside the layout registered tenant %q", tn)
		}
	}
	dlq := w.Env.Deployment.DLQURLs[spec.BlockEvents]
	var bodies []string
	deadline := time.Now().Add(30 * time.Second)
	for len(bodies) == 0 && time.Now().Before(deadline) {
		res, err := w.Env.Clients.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
		}
	}
	if len(bodies) != 1 || bodies[0] != poison {
		t.Fatalf("block-events DLQ holds %q; want exactly the poison message, intact", bodies)
	}
	if err := w.CheckQuiescent(ctx, "good", "bad"); err != nil {
		t.Fatal(err)
	}
}
