package blockstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/shared/s3errors"
)

// Upload defaults.
const (
	DefaultMultipartThreshold int64 = 64 << 20
	DefaultPartSize           int64 = 16 << 20
	MinPartSize               int64 = 5 << 20
	DefaultUploadParallelism        = 4
)

// UploadOptions tune Upload; zero fields mean the documented default.
type UploadOptions struct {
	// MultipartThreshold: files of at least this size are uploaded in parts.
	// Zero means DefaultMultipartThreshold (64 MiB).
	MultipartThreshold int64
	// PartSize of a multipart upload; zero means DefaultPartSize (16 MiB),
	// smaller than MinPartSize is raised to it. The ETag of a multipart
	// object depends on it: every attempt of a job must use the same value
	// for adoption to recognise its earlier objects.
	PartSize int64
	// Parallelism: files uploaded at once; zero means 4.
	Parallelism int
	// Buffers, when set, is shared by a job's streamed uploads: its slots
	// bound the parts they send at once, over all of them (else each
	// sends Parallelism), and it keeps the peak of the bytes they hold.
	Buffers *Buffers
}

func (o UploadOptions) withDefaults() UploadOptions {
	if o.MultipartThreshold <= 0 {
		o.MultipartThreshold = DefaultMultipartThreshold
	}
	if o.PartSize <= 0 {
		o.PartSize = DefaultPartSize
	}
	o.PartSize = max(o.PartSize, MinPartSize)
	if o.Parallelism <= 0 {
		o.Parallelism = DefaultUploadParallelism
	}
	return o
}

// Uploaded is one object Upload wrote or adopted.
type Uploaded struct {
	RelPath, Key, VersionID, ETag string
	// Checksum is the object's SHA-256 as S3 keeps it (base64; for a
	// multipart upload the composite of its parts' and "-<parts>"): what
	// an earlier attempt's object is recognised by. An ETag is no MD5 under
	// SSE-KMS, so it cannot serve.
	Checksum string
	Size     int64
	// Adopted is true when the key already held this exact object (an
	// earlier attempt wrote it) and its VersionID was taken over.
	Adopted bool
}

// maxConflictRetries bounds retries of a conditional write that S3 answered
// with 409 (a concurrent write of the key in flight) or whose 412 winner
// vanished before HEAD could see it.
const maxConflictRetries = 5

// Upload writes dir/relPath to keyPrefix/relPath for every relPath, with
// If-None-Match: "*" (also on CompleteMultipartUpload), so an existing
// object is never overwritten, and with a SHA-256 checksum S3 verifies and
// keeps. When the key already exists (412), it HEADs the object: the same
// size and checksum mean an earlier attempt wrote these bytes and its
// VersionId is adopted; anything else returns an error wrapping
// ErrNotDeterministic. The result is in relPaths order.
func Upload(ctx context.Context, api S3API, bucket, keyPrefix, dir string, relPaths []string, opts UploadOptions) ([]Uploaded, error) {
	opts = opts.withDefaults()
	for _, rel := range relPaths {
		if _, err := localPath(dir, rel); err != nil {
			return nil, err
		}
	}
	out := make([]Uploaded, len(relPaths))
	err := forEach(ctx, len(relPaths), opts.Parallelism, func(ctx context.Context, i int) error {
		key := strings.TrimSuffix(keyPrefix, "/") + "/" + path.Clean(relPaths[i])
		if keyPrefix == "" {
			key = path.Clean(relPaths[i])
		}
		u, err := uploadFile(ctx, api, bucket, key, dir, relPaths[i], opts)
		if err != nil {
			return fmt.Errorf("upload s3://%s/%s: %w", bucket, key, err)
		}
		out[i] = u
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func uploadFile(ctx context.Context, api S3API, bucket, key, dir, rel string, opts UploadOptions) (Uploaded, error) {
	p, _ := localPath(dir, rel)
	f, err := os.Open(p)
	if err != nil {
		return Uploaded{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Uploaded{}, err
	}
	size := fi.Size()
	multipart := size >= opts.MultipartThreshold
	parts, err := partDigests(f, size, multipart, opts.PartSize)
	if err != nil {
		return Uploaded{}, fmt.Errorf("hash %s: %w", p, err)
	}
	u := Uploaded{RelPath: rel, Key: key, ETag: expectedETag(parts, multipart), Checksum: checksumOf(parts, multipart), Size: size}
	put := func() (string, error) {
		if multipart {
			return putMultipart(ctx, api, bucket, key, f, size, opts.PartSize, parts)
		}
		return putSingle(ctx, api, bucket, key, io.NewSectionReader(f, 0, size), size, parts[0])
	}
	vid, adopted, err := putIfAbsent(ctx, api, bucket, key, size, u.Checksum, put)
	if err != nil {
		return u, err
	}
	u.VersionID, u.Adopted = vid, adopted
	return u, nil
}

// putIfAbsent runs put (a conditional write) until it writes the key or
// finds it holding the same bytes (adopted), retrying 409 conflicts and a
// 412 whose winner vanished.
func putIfAbsent(ctx context.Context, api S3API, bucket, key string, size int64, checksum string, put func() (string, error)) (vid string, adopted bool, err error) {
	for attempt := 0; ; attempt++ {
		vid, err := put()
		switch {
		case err == nil:
			if vid == "" {
				return "", false, fmt.Errorf("no VersionId returned: is versioning on for bucket %s?", bucket)
			}
			return vid, false, nil
		case s3errors.IsPreconditionFailed(err):
			existing, found, herr := adopt(ctx, api, bucket, key, size, checksum)
			if herr != nil {
				return "", false, herr
			}
			if found {
				return existing, true, nil
			}
			// The object that made us lose is gone again: try once more.
		case s3errors.IsConflict(err):
		default:
			return "", false, err
		}
		if attempt >= maxConflictRetries {
			return "", false, fmt.Errorf("conditional write kept conflicting after %d attempts: %w", attempt+1, err)
		}
		select {
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
}

// PutOnce writes body to key with If-None-Match and a SHA-256 checksum:
// an object is never overwritten. When the key already holds an object
// (an earlier attempt of the same write, or another writer's), its
// version is returned, and same says whether it holds these very bytes.
func PutOnce(ctx context.Context, api S3API, bucket, key string, body []byte) (vid string, same bool, err error) {
	parts, err := partDigests(bytes.NewReader(body), int64(len(body)), false, 0)
	if err != nil {
		return "", false, err
	}
	vid, _, err = putIfAbsent(ctx, api, bucket, key, int64(len(body)), checksumOf(parts, false), func() (string, error) {
		return putSingle(ctx, api, bucket, key, bytes.NewReader(body), int64(len(body)), parts[0])
	})
	if errors.Is(err, ErrNotDeterministic) {
		h, herr := api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if herr != nil {
			return "", false, fmt.Errorf("put s3://%s/%s: exists, and head failed: %w", bucket, key, herr)
		}
		return deref(h.VersionId), false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
	}
	return vid, true, nil
}

// adopt HEADs key and compares it with the local bytes by size and
// checksum. found is false when the key holds nothing (any more).
func adopt(ctx context.Context, api S3API, bucket, key string, size int64, checksum string) (versionID string, found bool, err error) {
	h, err := api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		if s3errors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("head existing object: %w", err)
	}
	gotSize, gotSum := deref(h.ContentLength), deref(h.ChecksumSHA256)
	if gotSize != size || !sameChecksum(gotSum, checksum) {
		return "", true, fmt.Errorf("existing object (version %s) has size %d and SHA-256 %q, local bytes have size %d and SHA-256 %q: %w",
			deref(h.VersionId), gotSize, gotSum, size, checksum, ErrNotDeterministic)
	}
	if deref(h.VersionId) == "" {
		return "", true, fmt.Errorf("existing object has no VersionId: is versioning on for bucket %s?", bucket)
	}
	return *h.VersionId, true, nil
}

// sameChecksum compares a checksum S3 returned with ours. S3 writes a
// multipart object's composite as "<base64>-<parts>"; an emulator may
// leave the part count out, which is then not compared.
func sameChecksum(got, want string) bool {
	if got == "" {
		return false // an object written without one is not ours
	}
	g, gParts, gOK := strings.Cut(got, "-")
	w, wParts, wOK := strings.Cut(want, "-")
	return g == w && (!gOK || !wOK || gParts == wParts)
}

// partSum is one part's digests: MD5 for Content-MD5, SHA-256 for S3's
// additional checksum.
type partSum struct{ md5, sha256 []byte }

// partDigests returns the digests of each part (one part for a single PUT).
func partDigests(r io.ReaderAt, size int64, multipart bool, partSize int64) ([]partSum, error) {
	if !multipart {
		partSize = max(size, 1)
	}
	var out []partSum
	for off := int64(0); off < size || (off == 0 && size == 0); off += partSize {
		m, h := md5.New(), sha256.New()
		if _, err := io.Copy(io.MultiWriter(m, h), io.NewSectionReader(r, off, min(partSize, size-off))); err != nil {
			return nil, err
		}
		out = append(out, partSum{md5: m.Sum(nil), sha256: h.Sum(nil)})
		if size == 0 {
			break
		}
	}
	return out, nil
}

// expectedETag is the ETag S3 gives an object without SSE-KMS: the hex MD5
// of its bytes, or for a multipart upload the hex MD5 of the parts' MD5s
// followed by "-<number of parts>". It is recorded for people; identity is
// the checksum.
func expectedETag(parts []partSum, multipart bool) string {
	if !multipart {
		return hex.EncodeToString(parts[0].md5)
	}
	h := md5.New()
	for _, p := range parts {
		h.Write(p.md5)
	}
	return fmt.Sprintf("%s-%d", hex.EncodeToString(h.Sum(nil)), len(parts))
}

// checksumOf is the SHA-256 checksum S3 keeps for the object: base64 of
// the bytes' SHA-256, or for a multipart upload base64 of the SHA-256 of
// the parts' SHA-256s, followed by "-<number of parts>" (S3's composite).
func checksumOf(parts []partSum, multipart bool) string {
	if !multipart {
		return base64.StdEncoding.EncodeToString(parts[0].sha256)
	}
	h := sha256.New()
	for _, p := range parts {
		h.Write(p.sha256)
	}
	return fmt.Sprintf("%s-%d", base64.StdEncoding.EncodeToString(h.Sum(nil)), len(parts))
}

func putSingle(ctx context.Context, api S3API, bucket, key string, body io.Reader, size int64, sum partSum) (string, error) {
	out, err := api.PutObject(ctx, &s3.PutObjectInput{
		Bucket:            aws.String(bucket),
		Key:               aws.String(key),
		Body:              body,
		ContentLength:     aws.Int64(size),
		ContentMD5:        aws.String(base64.StdEncoding.EncodeToString(sum.md5)),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
		ChecksumSHA256:    aws.String(base64.StdEncoding.EncodeToString(sum.sha256)),
		IfNoneMatch:       aws.String("*"),
	})
	if err != nil {
		return "", err
	}
	return deref(out.VersionId), nil
}

func putMultipart(ctx context.Context, api S3API, bucket, key string, f *os.File, size, partSize int64, digests []partSum) (versionID string, err error) {
	created, err := api.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
	if err != nil {
		return "", fmt.Errorf("create multipart upload: %w", err)
	}
	uploadID := created.UploadId
	completed := false
	defer func() {
		if !completed {
			// Best effort, also when ctx is cancelled; a lifecycle rule
			// cleans up what this misses.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = api.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: uploadID})
		}
	}()
	var parts []types.CompletedPart
	for i, off := 0, int64(0); off < size; i, off = i+1, off+partSize {
		n := min(partSize, size-off)
		num := int32(i + 1)
		sum := base64.StdEncoding.EncodeToString(digests[i].sha256)
		out, err := api.UploadPart(ctx, &s3.UploadPartInput{
			Bucket:            aws.String(bucket),
			Key:               aws.String(key),
			UploadId:          uploadID,
			PartNumber:        aws.Int32(num),
			Body:              io.NewSectionReader(f, off, n),
			ContentLength:     aws.Int64(n),
			ContentMD5:        aws.String(base64.StdEncoding.EncodeToString(digests[i].md5)),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
			ChecksumSHA256:    aws.String(sum),
		})
		if err != nil {
			return "", fmt.Errorf("upload part %d: %w", num, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num), ChecksumSHA256: aws.String(sum)})
	}
	out, err := api.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          aws.String(bucket),
		Key:             aws.String(key),
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfNoneMatch:     aws.String("*"),
	})
	if err != nil {
		return "", err
	}
	completed = true
	return deref(out.VersionId), nil
}
