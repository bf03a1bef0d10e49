package mems3_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

func TestBuckets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, false)
	ctx := t.Context()

	_, err := f.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(f.bucket)})
	var owned *s3types.BucketAlreadyOwnedByYou
	if !errors.As(err, &owned) {
		t.Fatalf("CreateBucket twice: %v, want BucketAlreadyOwnedByYou", err)
	}
	_, err = f.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("no-such-bucket")})
	var notFound *s3types.NotFound
	if !errors.As(err, &notFound) {
		t.Fatalf("HeadBucket of a missing bucket: %v, want NotFound", err)
	}
	_, err = f.c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("no-such-bucket"), Key: aws.String("k"), Body: sdkBody("x")})
	wantError(t, "PutObject to a missing bucket", err, "NoSuchBucket", 404)
	_, err = f.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("Bad_Name")})
	wantError(t, "CreateBucket Bad_Name", err, "InvalidBucketName", 400)

	got, err := f.c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(f.bucket)})
	if err != nil || got.Status != "" {
		t.Fatalf("GetBucketVersioning of a new bucket: %v %q, want no status", err, got.Status)
	}
	f.setVersioning(t, "Enabled")
	if got, _ := f.c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(f.bucket)}); got.Status != s3types.BucketVersioningStatusEnabled {
		t.Fatalf("GetBucketVersioning: %q, want Enabled", got.Status)
	}

	f.put(t, "k", "v")
	_, err = f.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(f.bucket)})
	wantError(t, "DeleteBucket with an object", err, "BucketNotEmpty", 409)
	// A delete marker alone still keeps the bucket non-empty.
	if _, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	_, err = f.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(f.bucket)})
	wantError(t, "DeleteBucket with versions and a marker", err, "BucketNotEmpty", 409)

	list, err := f.c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil || len(list.Buckets) != 1 || aws.ToString(list.Buckets[0].Name) != f.bucket {
		t.Fatalf("ListBuckets: %v %+v", err, list)
	}

	if _, err := f.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("empty-bucket")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("empty-bucket")}); err != nil {
		t.Fatalf("DeleteBucket of an empty bucket: %v", err)
	}
}

func TestUnversionedBucket(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, false)
	ctx := t.Context()
	out := f.put(t, "k", "one")
	if out.VersionId != nil {
		t.Fatalf("PutObject in an unversioned bucket returned version %q", *out.VersionId)
	}
	f.put(t, "k", "two")
	if got := f.mustGet(t, "k", ""); got != "two" {
		t.Fatalf("GET after overwrite: %q", got)
	}
	if got := f.mustGet(t, "k", "null"); got != "two" {
		t.Fatalf("GET versionId=null: %q", got)
	}
	vs, err := f.c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket)})
	if err != nil || len(vs.Versions) != 1 || aws.ToString(vs.Versions[0].VersionId) != "null" || len(vs.DeleteMarkers) != 0 {
		t.Fatalf("versions of an overwritten unversioned key: %v %+v", err, vs)
	}
	del, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k")})
	if err != nil || aws.ToBool(del.DeleteMarker) || del.VersionId != nil {
		t.Fatalf("DeleteObject: %v %+v, want no marker", err, del)
	}
	_, _, err = f.get(ctx, "k", "")
	var nsk *s3types.NoSuchKey
	if !errors.As(err, &nsk) {
		t.Fatalf("GET after delete: %v, want NoSuchKey", err)
	}
}

func TestVersionsAndDeleteMarkers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	ctx := t.Context()
	v1 := aws.ToString(f.put(t, "k", "one").VersionId)
	v2 := aws.ToString(f.put(t, "k", "two").VersionId)
	if v1 == "" || v2 == "" || v1 == v2 || v1 == "null" {
		t.Fatalf("version ids %q %q", v1, v2)
	}
	if got := f.mustGet(t, "k", v1); got != "one" {
		t.Fatalf("GET v1: %q", got)
	}

	del, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k")})
	if err != nil || !aws.ToBool(del.DeleteMarker) || aws.ToString(del.VersionId) == "" {
		t.Fatalf("DeleteObject: %v %+v, want a delete marker", err, del)
	}
	marker := aws.ToString(del.VersionId)

	cases := []struct {
		name   string
		run    func() error
		code   string
		status int
	}{
		{"GET current marker", func() error { _, _, err := f.get(ctx, "k", ""); return err }, "NoSuchKey", 404},
		{"HEAD current marker", func() error {
			_, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k")})
			return err
		}, "NotFound", 404},
		{"GET marker by version", func() error { _, _, err := f.get(ctx, "k", marker); return err }, "MethodNotAllowed", 405},
		{"HEAD marker by version", func() error {
			_, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k"), VersionId: aws.String(marker)})
			return err
		}, "MethodNotAllowed", 405},
		{"GET unknown version", func() error { _, _, err := f.get(ctx, "k", "0123456789abcdef"); return err }, "NoSuchVersion", 404},
		{"HEAD unknown version", func() error {
			_, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k"), VersionId: aws.String("0123456789abcdef")})
			return err
		}, "NotFound", 404},
		{"GET malformed version", func() error { _, _, err := f.get(ctx, "k", "not a version"); return err }, "InvalidArgument", 400},
		{"GET missing key", func() error { _, _, err := f.get(ctx, "never", ""); return err }, "NoSuchKey", 404},
	}
	for _, c := range cases {
		wantError(t, c.name, c.run(), c.code, c.status)
	}

	// Deleting the marker by version brings v2 back; deleting v2 leaves v1.
	del, err = f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k"), VersionId: aws.String(marker)})
	if err != nil || !aws.ToBool(del.DeleteMarker) || aws.ToString(del.VersionId) != marker {
		t.Fatalf("DeleteObject of the marker: %v %+v", err, del)
	}
	if got := f.mustGet(t, "k", ""); got != "two" {
		t.Fatalf("GET after removing the marker: %q", got)
	}
	if _, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k"), VersionId: aws.String(v2)}); err != nil {
		t.Fatal(err)
	}
	if got := f.mustGet(t, "k", ""); got != "one" {
		t.Fatalf("GET after removing v2: %q", got)
	}
	// Deleting a version that does not exist succeeds, as in S3.
	if _, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k"), VersionId: aws.String(v2)}); err != nil {
		t.Fatalf("DeleteObject of a deleted version: %v", err)
	}

	h, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k")})
	if err != nil || aws.ToString(h.VersionId) != v1 || aws.ToInt64(h.ContentLength) != 3 || h.LastModified == nil {
		t.Fatalf("HEAD: %v %+v", err, h)
	}

	// Suspending versioning: writes make (and replace) the null version,
	// earlier versions stay.
	f.setVersioning(t, "Suspended")
	f.put(t, "k", "null-1")
	f.put(t, "k", "null-2")
	vs, err := f.c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range vs.Versions {
		ids = append(ids, aws.ToString(v.VersionId))
	}
	if want := []string{"null", v1}; strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("versions after suspended writes: %v, want %v", ids, want)
	}
	if got := f.mustGet(t, "k", ""); got != "null-2" {
		t.Fatalf("GET: %q", got)
	}
}

func TestIfNoneMatchRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	const writers, keys = 32, 4
	type result struct {
		key, body string
		err       error
	}
	results := make(chan result, writers*keys)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for k := range keys {
				key, body := fmt.Sprintf("race/%d", k), fmt.Sprintf("writer-%d", w)
				_, err := f.tryPut(t.Context(), key, body, func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
				results <- result{key, body, err}
			}
		})
	}
	wg.Wait()
	close(results)
	winners := map[string]string{}
	for r := range results {
		switch {
		case r.err == nil:
			if prev, ok := winners[r.key]; ok {
				t.Fatalf("%s: two writers won: %s and %s", r.key, prev, r.body)
			}
			winners[r.key] = r.body
		case apiCode(r.err) == "PreconditionFailed" && httpStatus(r.err) == 412:
		default:
			t.Fatalf("%s: %v, want success or PreconditionFailed", r.key, r.err)
		}
	}
	for k := range keys {
		key := fmt.Sprintf("race/%d", k)
		if got := f.mustGet(t, key, ""); got != winners[key] || got == "" {
			t.Fatalf("%s holds %q, the winner wrote %q", key, got, winners[key])
		}
		vs, err := f.c.ListObjectVersions(t.Context(), &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket), Prefix: aws.String(key)})
		if err != nil || len(vs.Versions) != 1 {
			t.Fatalf("%s: %v, %d versions, want 1", key, err, len(vs.Versions))
		}
	}
	// A delete marker as current version counts as absent.
	if _, err := f.c.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("race/0")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.tryPut(t.Context(), "race/0", "after marker", func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }); err != nil {
		t.Fatalf("If-None-Match over a delete marker: %v", err)
	}
}

func TestIfMatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	etag := aws.ToString(f.put(t, "k", "one").ETag)
	f.put(t, "gone", "x")
	if _, err := f.c.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("gone")}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, key, ifMatch string
		code               string
		status             int
	}{
		{"no such key", "never", etag, "NoSuchKey", 404},
		{"current is a delete marker", "gone", etag, "NoSuchKey", 404},
		{"other etag", "k", `"0123456789abcdef0123456789abcdef"`, "PreconditionFailed", 412},
		{"matching etag", "k", etag, "", 200},
		{"the etag replaced by the previous case", "k", etag, "PreconditionFailed", 412},
	}
	for _, c := range cases {
		_, err := f.tryPut(t.Context(), c.key, "new "+c.name, func(in *s3.PutObjectInput) { in.IfMatch = aws.String(c.ifMatch) })
		if c.code == "" {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			continue
		}
		wantError(t, c.name, err, c.code, c.status)
	}
}

func TestConditionalDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	etag := aws.ToString(f.put(t, "k", "one").ETag)
	del := func(key, ifMatch string) error {
		_, err := f.c.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key), IfMatch: aws.String(ifMatch)})
		return err
	}
	wantError(t, "If-Match of another ETag", del("k", `"0123456789abcdef0123456789abcdef"`), "PreconditionFailed", 412)
	wantError(t, "If-Match of a missing key", del("never", "*"), "NoSuchKey", 404)
	if err := del("k", etag); err != nil {
		t.Fatalf("If-Match of the current ETag: %v", err)
	}
	wantError(t, "If-Match * over a delete marker", del("k", "*"), "NoSuchKey", 404)
	f.put(t, "k", "two")
	out, err := f.c.DeleteObjects(t.Context(), &s3.DeleteObjectsInput{Bucket: aws.String(f.bucket), Delete: &s3types.Delete{
		Objects: []s3types.ObjectIdentifier{{Key: aws.String("k"), ETag: aws.String(etag)}}}})
	if err != nil || len(out.Errors) != 1 || aws.ToString(out.Errors[0].Code) != "PreconditionFailed" {
		t.Fatalf("DeleteObjects with a stale ETag: %v %+v", err, out)
	}
}

func TestRangedReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, false)
	const body = "0123456789"
	f.put(t, "k", body, func(in *s3.PutObjectInput) { in.ChecksumAlgorithm = s3types.ChecksumAlgorithmSha256 })
	f.logs.take()
	cases := []struct {
		rng, want, contentRange string
		checksum                bool // the whole object, so its checksum is returned and validated
	}{
		{"bytes=0-4", "01234", "bytes 0-4/10", false},
		{"bytes=5-", "56789", "bytes 5-9/10", false},
		{"bytes=-3", "789", "bytes 7-9/10", false},
		{"bytes=8-100", "89", "bytes 8-9/10", false},
		{"bytes=0-9", body, "bytes 0-9/10", true},
		{"bytes=-100", body, "bytes 0-9/10", true},
	}
	for _, c := range cases {
		got, out, err := f.get(t.Context(), "k", "", func(in *s3.GetObjectInput) { in.Range = aws.String(c.rng) })
		if err != nil {
			t.Fatalf("%s: %v", c.rng, err)
		}
		if got != c.want || aws.ToString(out.ContentRange) != c.contentRange {
			t.Fatalf("%s: %q %q, want %q %q", c.rng, got, aws.ToString(out.ContentRange), c.want, c.contentRange)
		}
		if (out.ChecksumSHA256 != nil) != c.checksum {
			t.Fatalf("%s: checksum %v, want returned=%v", c.rng, out.ChecksumSHA256, c.checksum)
		}
	}
	_, _, err := f.get(t.Context(), "k", "", func(in *s3.GetObjectInput) { in.Range = aws.String("bytes=10-") })
	wantError(t, "range past the end", err, "InvalidRange", 416)

	f.logs.take() // partial ranges carry no checksum: the SDK says so, as against S3
	got, out, err := f.get(t.Context(), "k", "")
	if err != nil || got != body || aws.ToString(out.ChecksumSHA256) == "" || out.ChecksumType != s3types.ChecksumTypeFullObject {
		t.Fatalf("full GET: %v %q %+v", err, got, out)
	}
	for _, l := range f.logs.take() {
		if strings.Contains(l, "Not validating") || strings.Contains(l, "Skipped") {
			t.Fatalf("SDK skipped validating a whole-object read: %s", l)
		}
	}
}

func TestObjectAttributesAndCopy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	ctx := t.Context()
	f.put(t, "src", "payload", func(in *s3.PutObjectInput) {
		in.ContentType = aws.String("application/json")
		in.Metadata = map[string]string{"Block-Id": "b1"}
		in.CacheControl = aws.String("no-cache")
	})
	h, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("src")})
	if err != nil || aws.ToString(h.ContentType) != "application/json" || h.Metadata["block-id"] != "b1" ||
		aws.ToString(h.CacheControl) != "no-cache" || aws.ToString(h.ETag) != `"321c3cf486ed509164edec1e1981fec8"` {
		t.Fatalf("HEAD: %v %+v", err, h)
	}
	cp, err := f.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("dst"), CopySource: aws.String(f.bucket + "/src")})
	if err != nil || aws.ToString(cp.CopyObjectResult.ETag) != aws.ToString(h.ETag) || aws.ToString(cp.VersionId) == "" {
		t.Fatalf("CopyObject: %v %+v", err, cp)
	}
	got, out, err := f.get(ctx, "dst", "")
	if err != nil || got != "payload" || out.Metadata["block-id"] != "b1" {
		t.Fatalf("GET copy: %v %q %+v", err, got, out)
	}
	_, err = f.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("dst"),
		CopySource: aws.String(f.bucket + "/src"), IfNoneMatch: aws.String("*")})
	wantError(t, "CopyObject If-None-Match onto an object", err, "PreconditionFailed", 412)
}
