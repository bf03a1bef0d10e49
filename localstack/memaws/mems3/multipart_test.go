package mems3_test

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc64"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

const testMinPart = 1024

// uploadParts creates an upload of key with alg and uploads parts, each
// with its checksum computed by the SDK; it returns the upload id and the
// completed-part list to send.
func uploadParts(t *testing.T, f *fixture, key string, alg s3types.ChecksumAlgorithm, parts [][]byte) (string, []s3types.CompletedPart) {
	t.Helper()
	ctx := t.Context()
	created, err := f.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(f.bucket), Key: aws.String(key), ChecksumAlgorithm: alg})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	if created.ChecksumAlgorithm != alg {
		t.Fatalf("CreateMultipartUpload answered algorithm %q, want %q", created.ChecksumAlgorithm, alg)
	}
	var done []s3types.CompletedPart
	for i, p := range parts {
		n := int32(i + 1)
		out, err := f.c.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(f.bucket), Key: aws.String(key), UploadId: created.UploadId, PartNumber: aws.Int32(n),
			Body: bytes.NewReader(p), ChecksumAlgorithm: alg,
		})
		if err != nil {
			t.Fatalf("UploadPart %d: %v", n, err)
		}
		done = append(done, s3types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.ETag,
			ChecksumSHA256: out.ChecksumSHA256, ChecksumCRC64NVME: out.ChecksumCRC64NVME, ChecksumCRC32: out.ChecksumCRC32})
	}
	return aws.ToString(created.UploadId), done
}

func (f *fixture) complete(t *testing.T, key, id string, parts []s3types.CompletedPart, mods ...func(*s3.CompleteMultipartUploadInput)) (*s3.CompleteMultipartUploadOutput, error) {
	t.Helper()
	in := &s3.CompleteMultipartUploadInput{Bucket: aws.String(f.bucket), Key: aws.String(key), UploadId: aws.String(id),
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}}
	for _, m := range mods {
		m(in)
	}
	return f.c.CompleteMultipartUpload(t.Context(), in)
}

func testParts(sizes ...int) [][]byte {
	var out [][]byte
	for i, n := range sizes {
		out = append(out, bytes.Repeat([]byte{byte('a' + i)}, n))
	}
	return out
}

func TestMultipartSHA256Composite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{MinPartSize: testMinPart}, true)
	ctx := t.Context()
	parts := testParts(testMinPart, testMinPart+7, 100)
	id, done := uploadParts(t, f, "mp", s3types.ChecksumAlgorithmSha256, parts)

	// What a user of S3 computes on their side.
	etagMD5s, partSHAs := md5.New(), sha256.New()
	for _, p := range parts {
		m, s := md5.Sum(p), sha256.Sum256(p)
		etagMD5s.Write(m[:])
		partSHAs.Write(s[:])
	}
	wantETag := fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(etagMD5s.Sum(nil)), len(parts))
	wantSum := fmt.Sprintf("%s-%d", base64.StdEncoding.EncodeToString(partSHAs.Sum(nil)), len(parts))

	out, err := f.complete(t, "mp", id, done, func(in *s3.CompleteMultipartUploadInput) { in.IfNoneMatch = aws.String("*") })
	if err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
	if aws.ToString(out.ETag) != wantETag || aws.ToString(out.ChecksumSHA256) != wantSum || out.ChecksumType != s3types.ChecksumTypeComposite ||
		aws.ToString(out.VersionId) == "" || !strings.HasSuffix(aws.ToString(out.Location), "/bucket-1/mp") {
		t.Fatalf("CompleteMultipartUpload answered %+v, want ETag %s checksum %s", out, wantETag, wantSum)
	}
	h, err := f.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("mp"), ChecksumMode: s3types.ChecksumModeEnabled})
	if err != nil || aws.ToString(h.ETag) != wantETag || aws.ToString(h.ChecksumSHA256) != wantSum || h.ChecksumType != s3types.ChecksumTypeComposite {
		t.Fatalf("HEAD: %v %+v", err, h)
	}
	body, _, err := f.get(ctx, "mp", "")
	if err != nil || body != string(bytes.Join(parts, nil)) {
		t.Fatalf("GET: %v (%d bytes)", err, len(body))
	}

	// The upload is gone; a second upload of the key loses at completion.
	_, err = f.complete(t, "mp", id, done)
	wantError(t, "completing a completed upload", err, "NoSuchUpload", 404)
	id2, done2 := uploadParts(t, f, "mp", s3types.ChecksumAlgorithmSha256, testParts(testMinPart, 1))
	_, err = f.complete(t, "mp", id2, done2, func(in *s3.CompleteMultipartUploadInput) { in.IfNoneMatch = aws.String("*") })
	wantError(t, "If-None-Match at completion", err, "PreconditionFailed", 412)
	uploads, err := f.c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(f.bucket)})
	if err != nil || len(uploads.Uploads) != 1 || aws.ToString(uploads.Uploads[0].UploadId) != id2 {
		t.Fatalf("ListMultipartUploads after a failed completion: %v %+v", err, uploads)
	}
	lp, err := f.c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(f.bucket), Key: aws.String("mp"), UploadId: aws.String(id2)})
	if err != nil || len(lp.Parts) != 2 || aws.ToString(lp.Parts[0].ChecksumSHA256) != aws.ToString(done2[0].ChecksumSHA256) {
		t.Fatalf("ListParts: %v %+v", err, lp)
	}
	if _, err := f.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(f.bucket), Key: aws.String("mp"), UploadId: aws.String(id2)}); err != nil {
		t.Fatalf("AbortMultipartUpload: %v", err)
	}
	_, err = f.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(f.bucket), Key: aws.String("mp"), UploadId: aws.String(id2),
		PartNumber: aws.Int32(3), Body: sdkBody("x")})
	wantError(t, "UploadPart to an aborted upload", err, "NoSuchUpload", 404)
	_, err = f.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(f.bucket), Key: aws.String("mp"), UploadId: aws.String(id2)})
	var nsu *s3types.NoSuchUpload
	if !errors.As(err, &nsu) {
		t.Fatalf("aborting an aborted upload: %v, want NoSuchUpload", err)
	}
	_, err = f.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(f.bucket)})
	wantError(t, "DeleteBucket", err, "BucketNotEmpty", 409)
}

func TestMultipartErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{MinPartSize: testMinPart}, true)
	cases := []struct {
		name   string
		sizes  []int
		edit   func([]s3types.CompletedPart) []s3types.CompletedPart
		code   string
		status int
	}{
		{"part below the minimum", []int{testMinPart - 1, 10}, nil, "EntityTooSmall", 400},
		{"wrong ETag", []int{testMinPart, 10}, func(ps []s3types.CompletedPart) []s3types.CompletedPart {
			ps[1].ETag = aws.String(`"00000000000000000000000000000000"`)
			return ps
		}, "InvalidPart", 400},
		{"wrong part checksum", []int{testMinPart, 10}, func(ps []s3types.CompletedPart) []s3types.CompletedPart {
			ps[0].ChecksumSHA256 = ps[1].ChecksumSHA256
			return ps
		}, "InvalidPart", 400},
		{"missing part checksum", []int{testMinPart, 10}, func(ps []s3types.CompletedPart) []s3types.CompletedPart {
			ps[0].ChecksumSHA256 = nil
			return ps
		}, "InvalidRequest", 400},
		{"part never uploaded", []int{testMinPart, 10}, func(ps []s3types.CompletedPart) []s3types.CompletedPart {
			ps[1].PartNumber = aws.Int32(7)
			return ps
		}, "InvalidPart", 400},
		{"descending parts", []int{testMinPart, testMinPart}, func(ps []s3types.CompletedPart) []s3types.CompletedPart {
			ps[0], ps[1] = ps[1], ps[0]
			return ps
		}, "InvalidPartOrder", 400},
	}
	for i, c := range cases {
		key := fmt.Sprintf("bad-%d", i)
		id, done := uploadParts(t, f, key, s3types.ChecksumAlgorithmSha256, testParts(c.sizes...))
		if c.edit != nil {
			done = c.edit(done)
		}
		_, err := f.complete(t, key, id, done)
		wantError(t, c.name, err, c.code, c.status)
		if _, err := f.c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key)}); apiCode(err) != "NotFound" {
			t.Fatalf("%s: HEAD after a failed completion: %v, want NotFound", c.name, err)
		}
	}
	// A part whose checksum algorithm is not the upload's is refused.
	created, err := f.c.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String(f.bucket), Key: aws.String("mixed"),
		ChecksumAlgorithm: s3types.ChecksumAlgorithmSha256})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.c.UploadPart(t.Context(), &s3.UploadPartInput{Bucket: aws.String(f.bucket), Key: aws.String("mixed"), UploadId: created.UploadId,
		PartNumber: aws.Int32(1), Body: sdkBody("x"), ChecksumAlgorithm: s3types.ChecksumAlgorithmCrc32})
	wantError(t, "CRC32 part of a SHA256 upload", err, "InvalidRequest", 400)
}

// A CRC64NVME upload has a FULL_OBJECT checksum, which the SDK validates
// on GET: this checks the server's CRC-64/NVME against the SDK's.
func TestMultipartCRC64NVMEFullObject(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{MinPartSize: testMinPart}, false)
	parts := testParts(testMinPart, 33)
	id, done := uploadParts(t, f, "full", s3types.ChecksumAlgorithmCrc64nvme, parts)
	whole := bytes.Join(parts, nil)
	crc := crc64.Checksum(whole, crc64.MakeTable(0x9a6c9329ac4bc9b5))
	want := base64.StdEncoding.EncodeToString([]byte{byte(crc >> 56), byte(crc >> 48), byte(crc >> 40), byte(crc >> 32), byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)})
	out, err := f.complete(t, "full", id, done, func(in *s3.CompleteMultipartUploadInput) {
		in.ChecksumCRC64NVME = aws.String(want)
		in.ChecksumType = s3types.ChecksumTypeFullObject
	})
	if err != nil || aws.ToString(out.ChecksumCRC64NVME) != want || out.ChecksumType != s3types.ChecksumTypeFullObject {
		t.Fatalf("CompleteMultipartUpload: %v %+v, want CRC64NVME %s", err, out, want)
	}
	f.logs.take()
	body, got, err := f.get(t.Context(), "full", "")
	if err != nil || body != string(whole) || aws.ToString(got.ChecksumCRC64NVME) != want {
		t.Fatalf("GET: %v %+v", err, got)
	}
	if logs := f.logs.take(); len(logs) != 0 {
		t.Fatalf("SDK did not validate the full-object checksum: %v", logs)
	}

	// A wrong full-object checksum at completion is BadDigest.
	id, done = uploadParts(t, f, "full2", s3types.ChecksumAlgorithmCrc64nvme, parts)
	_, err = f.complete(t, "full2", id, done, func(in *s3.CompleteMultipartUploadInput) { in.ChecksumCRC64NVME = aws.String("AAAAAAAAAAA=") })
	wantError(t, "wrong full-object checksum", err, "BadDigest", 400)
}
