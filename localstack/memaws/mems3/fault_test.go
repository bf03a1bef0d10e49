package mems3_test

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

var slowDown = &mems3.Failure{Status: 503, Code: "SlowDown", Message: "Please reduce your request rate."}

func TestFaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	ctx := t.Context()
	var mu sync.Mutex
	attempts := map[string]int{}
	f.srv.SetFault(func(op, bucket, key string) *mems3.Failure {
		mu.Lock()
		defer mu.Unlock()
		attempts[op+" "+key]++
		n := attempts[op+" "+key]
		switch {
		case op == "PutObject" && key == "flaky" && n <= 2:
			return slowDown // throttled twice, then the SDK's third attempt lands
		case op == "HeadObject" && key == "down":
			return slowDown
		case op == "PutObject" && key == "lost" && n == 1:
			// Applied, but the answer is lost: the retry meets the write.
			return &mems3.Failure{Status: 500, Code: "InternalError", Message: "We encountered an internal error.", AfterApply: true}
		case op == "DeleteObjects" && key == "b":
			return &mems3.Failure{Status: 503, Code: "SlowDown", Message: "Please reduce your request rate."}
		}
		return nil
	})

	if _, err := f.tryPut(ctx, "flaky", "x"); err != nil {
		t.Fatalf("PutObject with two throttled attempts: %v", err)
	}
	if n := attempts["PutObject flaky"]; n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	_, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("down")})
	wantError(t, "HEAD always throttled (no body: the code comes from the status)", err, "ServiceUnavailable", 503)

	_, err = f.tryPut(ctx, "lost", "mine", func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
	wantError(t, "retried conditional PutObject whose first answer was lost", err, "PreconditionFailed", 412)
	if got := f.mustGet(t, "lost", ""); got != "mine" {
		t.Fatalf("the lost write holds %q", got)
	}

	for _, k := range []string{"a", "b", "c"} {
		f.put(t, k, k)
	}
	out, err := f.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(f.bucket), Delete: &s3types.Delete{
		Objects: []s3types.ObjectIdentifier{{Key: aws.String("a")}, {Key: aws.String("b")}, {Key: aws.String("c")}}}})
	if err != nil || len(out.Deleted) != 2 || len(out.Errors) != 1 || aws.ToString(out.Errors[0].Key) != "b" || aws.ToString(out.Errors[0].Code) != "SlowDown" {
		t.Fatalf("DeleteObjects with a failing key: %v %+v", err, out)
	}
	if got := f.mustGet(t, "b", ""); got != "b" {
		t.Fatalf("b after its delete failed: %q", got)
	}

	f.srv.SetFault(nil)
	if _, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("b")}); err != nil {
		t.Fatalf("HEAD after SetFault(nil): %v", err)
	}
}

// The operation names the fault sees are the SDK's.
func TestFaultOperationNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{MinPartSize: 1}, true)
	ctx := t.Context()
	var ops []string
	f.srv.SetFault(func(op, bucket, key string) *mems3.Failure {
		ops = append(ops, op+" "+bucket+"/"+key)
		return nil
	})
	b := aws.String(f.bucket)
	f.put(t, "k", "v")
	f.mustGet(t, "k", "")
	_, _ = f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: aws.String("k")})
	_, _ = f.c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: b})
	_, _ = f.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: b})
	_, _ = f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: b, Key: aws.String("k")})
	id, done := uploadParts(t, f, "m", "", [][]byte{[]byte("x")})
	_, _ = f.complete(t, "m", id, done)
	_, _ = f.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: b})
	_, _ = f.c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: b})
	want := []string{
		"PutObject bucket-1/k", "GetObject bucket-1/k", "HeadObject bucket-1/k", "ListObjectVersions bucket-1/",
		"ListObjectsV2 bucket-1/", "DeleteObject bucket-1/k", "CreateMultipartUpload bucket-1/m", "UploadPart bucket-1/m",
		"CompleteMultipartUpload bucket-1/m", "HeadBucket bucket-1/", "GetBucketVersioning bucket-1/",
	}
	if !slices.Equal(ops, want) {
		t.Fatalf("operations\n%v\nwant\n%v", ops, want)
	}
}

func TestDeleteObjects(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	ctx := t.Context()
	f.put(t, "a", "a")
	vb := aws.ToString(f.put(t, "b", "b").VersionId)
	out, err := f.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(f.bucket), Delete: &s3types.Delete{Objects: []s3types.ObjectIdentifier{
		{Key: aws.String("a")},
		{Key: aws.String("b"), VersionId: aws.String(vb)},
		{Key: aws.String("never")},
		{Key: aws.String("x"), VersionId: aws.String("not-a-version")},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Deleted) != 3 || len(out.Errors) != 1 {
		t.Fatalf("DeleteObjects: %+v", out)
	}
	a, b := out.Deleted[0], out.Deleted[1]
	if !aws.ToBool(a.DeleteMarker) || aws.ToString(a.DeleteMarkerVersionId) == "" || aws.ToString(b.VersionId) != vb || aws.ToBool(b.DeleteMarker) {
		t.Fatalf("Deleted entries %+v %+v", a, b)
	}
	vs, err := f.c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket)})
	if err != nil || len(vs.Versions) != 1 || len(vs.DeleteMarkers) != 2 {
		t.Fatalf("after DeleteObjects: %v versions %d markers %d", err, len(vs.Versions), len(vs.DeleteMarkers))
	}
	quiet, err := f.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(f.bucket), Delete: &s3types.Delete{
		Quiet: aws.Bool(true), Objects: []s3types.ObjectIdentifier{{Key: aws.String("a")}}}})
	if err != nil || len(quiet.Deleted) != 0 || len(quiet.Errors) != 0 {
		t.Fatalf("quiet DeleteObjects: %v %+v", err, quiet)
	}
}

// digestScript is a mix of requests that leaves versions, markers,
// checksums, metadata, a notification configuration and an upload in
// progress.
func digestScript(t *testing.T, f *fixture) []string {
	t.Helper()
	ctx := t.Context()
	var ids []string
	for i, k := range []string{"x", "y", "x", "z/1"} {
		out := f.put(t, k, k+string(rune('0'+i)), func(in *s3.PutObjectInput) {
			in.Metadata = map[string]string{"n": k}
			in.ChecksumAlgorithm = s3types.ChecksumAlgorithmSha256
		})
		ids = append(ids, aws.ToString(out.VersionId))
	}
	del, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("y")})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, aws.ToString(del.VersionId))
	if err := f.putNotification(t, s3types.QueueConfiguration{Id: aws.String("q"), QueueArn: aws.String(blocksARN), Events: []s3types.Event{"s3:ObjectCreated:*"}}); err != nil {
		t.Fatal(err)
	}
	created, err := f.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(f.bucket), Key: aws.String("big"), ChecksumAlgorithm: s3types.ChecksumAlgorithmSha256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(f.bucket), Key: aws.String("big"), UploadId: created.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("part one")), ChecksumAlgorithm: s3types.ChecksumAlgorithmSha256}); err != nil {
		t.Fatal(err)
	}
	return append(ids, aws.ToString(created.UploadId))
}

func digestOf(srv *mems3.Server) [sha256.Size]byte {
	h := sha256.New()
	srv.Digest(h)
	return [sha256.Size]byte(h.Sum(nil))
}

func TestDigest(t *testing.T) {
	t.Parallel()
	q := &sink{}
	a := newFixture(t, mems3.Options{Notify: q.notify}, true)
	b := newFixture(t, mems3.Options{Notify: q.notify}, true)
	idsA, idsB := digestScript(t, a), digestScript(t, b)
	if !slices.Equal(idsA, idsB) {
		t.Fatalf("identifiers differ for the same requests: %v %v", idsA, idsB)
	}
	if digestOf(a.srv) != digestOf(b.srv) {
		t.Fatal("digests differ for the same requests")
	}
	before := digestOf(a.srv)
	a.mustGet(t, "x", "")
	if _, err := a.c.ListObjectVersions(t.Context(), &s3.ListObjectVersionsInput{Bucket: aws.String(a.bucket)}); err != nil {
		t.Fatal(err)
	}
	if digestOf(a.srv) != before {
		t.Fatal("reads changed the digest")
	}
	a.put(t, "x", "one more")
	if digestOf(a.srv) == digestOf(b.srv) {
		t.Fatal("digest unchanged by a write")
	}
	b.put(t, "x", "one more")
	if digestOf(a.srv) != digestOf(b.srv) {
		t.Fatal("digests differ after the same further write")
	}
	b.put(t, "x", "one more")
	if digestOf(a.srv) == digestOf(b.srv) {
		t.Fatal("digest unchanged by rewriting the same bytes (a new version)")
	}
}
