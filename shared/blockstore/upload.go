package blockstore

import (
	"bytes"
	"context"
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
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"

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
	// smaller than MinPartSize is raised to it. The checksum of a multipart
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
	RelPath, Key, VersionID string
	// ETag is the one S3 answered with (without quotes), recorded for
	// people: under SSE-KMS it is no MD5 of the bytes.
	ETag string
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
	parts, err := partChecksums(f, size, multipart, opts.PartSize)
	if err != nil {
		return Uploaded{}, fmt.Errorf("hash %s: %w", p, err)
	}
	u := Uploaded{RelPath: rel, Key: key, Checksum: checksumOf(parts, multipart), Size: size}
	put := func() (written, error) {
		if multipart {
			return putMultipart(ctx, api, bucket, key, f, size, opts.PartSize, parts)
		}
		return putSingle(ctx, api, bucket, key, io.NewSectionReader(f, 0, size), size, parts[0])
	}
	w, adopted, err := putIfAbsent(ctx, api, bucket, key, size, u.Checksum, put)
	if err != nil {
		return u, err
	}
	u.VersionID, u.ETag, u.Adopted = w.versionID, w.etag, adopted
	return u, nil
}

// written is S3's answer to an object write: the version it made (or,
// adopted, found) and its ETag.
type written struct{ versionID, etag string }

func writtenBy(versionID, etag *string) written {
	return written{versionID: deref(versionID), etag: strings.Trim(deref(etag), `"`)}
}

// putIfAbsent runs put (a conditional write) until it writes the key or
// finds it holding the same bytes (adopted), retrying 409 conflicts and a
// 412 whose winner vanished.
func putIfAbsent(ctx context.Context, api S3API, bucket, key string, size int64, checksum string, put func() (written, error)) (w written, adopted bool, err error) {
	for attempt := 0; ; attempt++ {
		w, err := put()
		switch {
		case err == nil:
			if w.versionID == "" {
				return written{}, false, fmt.Errorf("no VersionId returned: is versioning on for bucket %s?", bucket)
			}
			return w, false, nil
		case s3errors.IsPreconditionFailed(err):
			existing, found, herr := adopt(ctx, api, bucket, key, size, checksum)
			if herr != nil {
				return written{}, false, herr
			}
			if found {
				return existing, true, nil
			}
			// The object that made us lose is gone again: try once more.
		case s3errors.IsConflict(err):
		default:
			return written{}, false, err
		}
		if attempt >= maxConflictRetries {
			return written{}, false, fmt.Errorf("conditional write kept conflicting after %d attempts: %w", attempt+1, err)
		}
		select {
		case <-ctx.Done():
			return written{}, false, ctx.Err()
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
}

// PutOnce writes body to key with If-None-Match and a SHA-256 checksum:
// an object is never overwritten. When the key already holds an object
// (an earlier attempt of the same write, or another writer's), its
// version is returned, and same says whether it holds these very bytes.
func PutOnce(ctx context.Context, api S3API, bucket, key string, body []byte) (vid string, same bool, err error) {
	sum := sha256.Sum256(body)
	w, _, err := putIfAbsent(ctx, api, bucket, key, int64(len(body)), checksumOf([][]byte{sum[:]}, false), func() (written, error) {
		return putSingle(ctx, api, bucket, key, bytes.NewReader(body), int64(len(body)), sum[:])
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
	return w.versionID, true, nil
}

// adopt HEADs key and compares it with the local bytes by size and
// checksum. found is false when the key holds nothing (any more).
func adopt(ctx context.Context, api S3API, bucket, key string, size int64, checksum string) (w written, found bool, err error) {
	h, err := api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		if s3errors.IsNotFound(err) {
			return written{}, false, nil
		}
		return written{}, false, fmt.Errorf("head existing object: %w", err)
	}
	gotSize, gotSum := deref(h.ContentLength), deref(h.ChecksumSHA256)
	if gotSize != size || !sameChecksum(gotSum, checksum) {
		return written{}, true, fmt.Errorf("existing object (version %s) has size %d and SHA-256 %q, local bytes have size %d and SHA-256 %q: %w",
			deref(h.VersionId), gotSize, gotSum, size, checksum, ErrNotDeterministic)
	}
	if deref(h.VersionId) == "" {
		return written{}, true, fmt.Errorf("existing object has no VersionId: is versioning on for bucket %s?", bucket)
	}
	return writtenBy(h.VersionId, h.ETag), true, nil
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

// partChecksums returns the SHA-256 of each part (one part for a single
// PUT): S3 checks each against the bytes it receives, keeps the object's,
// and the request signature covers them (signedWith).
func partChecksums(r io.ReaderAt, size int64, multipart bool, partSize int64) ([][]byte, error) {
	if !multipart {
		partSize = max(size, 1)
	}
	var out [][]byte
	for off := int64(0); off < size || (off == 0 && size == 0); off += partSize {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(r, off, min(partSize, size-off))); err != nil {
			return nil, err
		}
		out = append(out, h.Sum(nil))
		if size == 0 {
			break
		}
	}
	return out, nil
}

// checksumOf is the SHA-256 checksum S3 keeps for the object: base64 of
// the bytes' SHA-256, or for a multipart upload base64 of the SHA-256 of
// the parts' SHA-256s, followed by "-<number of parts>" (S3's composite).
func checksumOf(parts [][]byte, multipart bool) string {
	if !multipart {
		return base64.StdEncoding.EncodeToString(parts[0])
	}
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
	}
	return fmt.Sprintf("%s-%d", base64.StdEncoding.EncodeToString(h.Sum(nil)), len(parts))
}

// signedWith makes the SDK sign a request's body with sum, the SHA-256
// its x-amz-checksum-sha256 header carries, instead of reading and hashing
// the body once more before sending it (it does over plain HTTP; over
// HTTPS it would leave the body unsigned). The body stays covered twice:
// by the signature, and by S3's own check of the checksum.
func signedWith(sum []byte) func(*s3.Options) {
	payloadHash := hex.EncodeToString(sum)
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("SluicePayloadHash",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					return next.HandleFinalize(v4.SetPayloadHash(ctx, payloadHash), in)
				}), middleware.Before)
		})
	}
}

func putSingle(ctx context.Context, api S3API, bucket, key string, body io.Reader, size int64, sum []byte) (written, error) {
	out, err := api.PutObject(ctx, &s3.PutObjectInput{
		Bucket:            aws.String(bucket),
		Key:               aws.String(key),
		Body:              body,
		ContentLength:     aws.Int64(size),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
		ChecksumSHA256:    aws.String(base64.StdEncoding.EncodeToString(sum)),
		IfNoneMatch:       aws.String("*"),
	}, signedWith(sum))
	if err != nil {
		return written{}, err
	}
	return writtenBy(out.VersionId, out.ETag), nil
}

func putMultipart(ctx context.Context, api S3API, bucket, key string, f *os.File, size, partSize int64, sums [][]byte) (w written, err error) {
	created, err := api.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
	if err != nil {
		return written{}, fmt.Errorf("create multipart upload: %w", err)
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
		sum := base64.StdEncoding.EncodeToString(sums[i])
		out, err := api.UploadPart(ctx, &s3.UploadPartInput{
			Bucket:            aws.String(bucket),
			Key:               aws.String(key),
			UploadId:          uploadID,
			PartNumber:        aws.Int32(num),
			Body:              io.NewSectionReader(f, off, n),
			ContentLength:     aws.Int64(n),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
			ChecksumSHA256:    aws.String(sum),
		}, signedWith(sums[i]))
		if err != nil {
			return written{}, fmt.Errorf("upload part %d: %w", num, err)
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
		return written{}, err
	}
	completed = true
	return writtenBy(out.VersionId, out.ETag), nil
}
