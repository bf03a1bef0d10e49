package testworld

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// CheckQuiescent fed hand-built violations: a small tenant is compacted
// for real (on the in-memory tier under -short), then one thing is broken
// behind the pipeline's back — each a violation of one invariant — and the
// checker must name it. The untouched world must pass.
func TestCheckQuiescentCatchesHandBuiltViolations(t *testing.T) {
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)
	type tamper func(ctx context.Context, t *testing.T, w *World, live, source records.Block)
	cases := []struct {
		name   string
		want   string // the invariant the error must name; "" for none
		tamper tamper
	}{
		{name: "untouched", want: ""},
		{name: "a sample that never reached a live block", want: "I1 violated", tamper: func(ctx context.Context, t *testing.T, w *World, _, _ records.Block) {
			more := w.Generate(blockgen.Options{Tenant: "q", Start: start.Add(48 * time.Hour), Blocks: 1, Series: 10, Seed: 9})
			w.Uploaded["q"] = append(w.Uploaded["q"], more[0].Dir) // as if uploaded, but it never was
		}},
		{name: "an upload marked for deletion whose samples are gone", want: "", tamper: func(ctx context.Context, t *testing.T, w *World, _, _ records.Block) {
			more := w.Generate(blockgen.Options{Tenant: "q", Start: start.Add(48 * time.Hour), Blocks: 1, Series: 10, Seed: 9})
			w.Uploaded["q"] = append(w.Uploaded["q"], more[0].Dir) // its block deleted with its deletion mark
			w.Withdraw("q", more[0].Meta.ULID.String())
		}},
		{name: "a sample missing beside an upload marked for deletion", want: "I1 violated", tamper: func(ctx context.Context, t *testing.T, w *World, _, _ records.Block) {
			more := w.Generate(blockgen.Options{Tenant: "q", Start: start.Add(48 * time.Hour), Blocks: 2, Series: 10, Seed: 9})
			w.Uploaded["q"] = append(w.Uploaded["q"], more[0].Dir, more[1].Dir) // neither reached a live block
			w.Withdraw("q", more[0].Meta.ULID.String())
		}},
		{name: "a repaired upload whose samples never reached a live block", want: "I1 violated", tamper: func(ctx context.Context, t *testing.T, w *World, _, _ records.Block) {
			more := w.Generate(blockgen.Options{Tenant: "q", Start: start.Add(48 * time.Hour), Blocks: 1, Series: 10, Seed: 9})
			w.Damaged["q"] = map[string]bool{more[0].Meta.ULID.String(): true} // damaged, then repaired, never retried
			w.Repaired("q", more[0].Dir)
		}},
		{name: "a quarantined block whose no-compact mark is not in the bucket", want: "the no-compact mark its record names", tamper: func(ctx context.Context, t *testing.T, w *World, live, _ records.Block) {
			w.Damaged["q"] = map[string]bool{live.ID: true}
			setState(ctx, t, w, live, protocol.BlockQuarantined)
			if _, err := w.Env.Clients.DynamoDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(w.Config.Table),
				Key: map[string]types.AttributeValue{
					"PK": &types.AttributeValueMemberS{Value: "T#" + live.Tenant}, "SK": &types.AttributeValueMemberS{Value: "B#" + live.ID}},
				UpdateExpression:          aws.String("SET ncVid = :vid, ncOurs = :ours"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":vid": &types.AttributeValueMemberS{Value: "a-version-deleted-since"}, ":ours": &types.AttributeValueMemberBOOL{Value: true}},
			}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a retired source back to LIVE beside its output", want: "I2 violated", tamper: func(ctx context.Context, t *testing.T, w *World, _, src records.Block) {
			setState(ctx, t, w, src, protocol.BlockLive)
		}},
		{name: "a live block's chunk version deleted", want: "I3 violated", tamper: func(ctx context.Context, t *testing.T, w *World, live, _ records.Block) {
			k, err := w.key(live)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range live.Files {
				if strings.HasPrefix(f.RelPath, "chunks/") {
					if _, err := w.Env.Clients.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(w.Config.Bucket),
						Key: aws.String(k.Object(f.RelPath)), VersionId: aws.String(f.VersionID)}); err != nil {
						t.Fatal(err)
					}
					return
				}
			}
			t.Fatal("the live block has no chunk file")
		}},
		{name: "an object version no record names", want: "I4 violated", tamper: func(ctx context.Context, t *testing.T, w *World, live, _ records.Block) {
			k, err := w.key(live)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(w.Config.Bucket),
				Key: aws.String(k.Object("chunks/000099")), Body: bytes.NewReader([]byte("stray"))}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a delete without a VersionId", want: "I4 violated: delete marker", tamper: func(ctx context.Context, t *testing.T, w *World, live, _ records.Block) {
			// Of an object that exists: moto leaves no marker on a key
			// with no versions (S3 would).
			k, err := w.key(live)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Env.Clients.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(w.Config.Bucket),
				Key: aws.String(k.Object("meta.json"))}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// The in-memory tier always: this tests the checker, not AWS.
			w := New(t, Options{Env: []envtest.Option{envtest.WithBackend(envtest.Memory)}})
			for _, b := range w.Generate(blockgen.Options{Tenant: "q", Start: start, Blocks: 6, Series: 10, Seed: 1, ThanosFiles: true}) {
				w.Upload(ctx, "q", b.Dir)
			}
			if err := w.Pipeline.Settle(ctx, 2*time.Second, 3*time.Minute, func(ctx context.Context) (bool, error) {
				return w.Quiescent(ctx, "q")
			}); err != nil {
				t.Fatalf("the pipeline did not settle: %v", err)
			}
			var live, source records.Block
			for _, b := range w.Blocks(ctx, "q") {
				switch {
				case b.State == protocol.BlockLive && b.Level > 0:
					live = b
				case b.State == protocol.BlockDeleted && b.Level == 0:
					source = b
				}
			}
			if live.ID == "" || source.ID == "" {
				t.Fatalf("no compacted output (%q) and deleted source (%q) to tamper with", live.ID, source.ID)
			}
			if c.tamper != nil {
				c.tamper(ctx, t, w, live, source)
			}
			err := w.CheckQuiescent(ctx, "q")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("an untouched world fails: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("want %q, got %v", c.want, err)
			}
		})
	}
}

// setState writes a block's state behind the pipeline's back.
func setState(ctx context.Context, t *testing.T, w *World, b records.Block, s protocol.BlockState) {
	t.Helper()
	_, err := w.Env.Clients.DynamoDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(w.Config.Table),
		Key: map[string]types.AttributeValue{
			"PK": &types.AttributeValueMemberS{Value: "T#" + b.Tenant}, "SK": &types.AttributeValueMemberS{Value: "B#" + b.ID}},
		UpdateExpression:          aws.String("SET #st = :st"),
		ExpressionAttributeNames:  map[string]string{"#st": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":st": &types.AttributeValueMemberS{Value: string(s)}},
	})
	if err != nil {
		t.Fatal(err)
	}
}
