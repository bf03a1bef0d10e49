package blockstore

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
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
	Size                          int64
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
// object is never overwritten. When the key already exists (412), it HEADs
// the object: same size and ETag means an earlier attempt wrote these bytes
// and its VersionId is adopted; anything else returns an error wrapping
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
	etag := expectedETag(parts, multipart)
	u := Uploaded{RelPath: rel, Key: key, ETag: etag, Size: size}

	for attempt := 0; ; attempt++ {
		var versionID string
		if multipart {
			versionID, err = putMultipart(ctx, api, bucket, key, f, size, opts.PartSize, parts)
		} else {
			versionID, err = putSingle(ctx, api, bucket, key, f, size, parts[0])
		}
		switch {
		case err == nil:
			if versionID == "" {
				return u, fmt.Errorf("no VersionId returned: is versioning on for bucket %s?", bucket)
			}
			u.VersionID = versionID
			return u, nil
		case isPreconditionFailed(err):
			adopted, found, herr := adopt(ctx, api, bucket, key, size, etag)
			if herr != nil {
				return u, herr
			}
			if found {
				u.VersionID, u.Adopted = adopted, true
				return u, nil
			}
			// The object that made us lose is gone again: try once more.
		case isConditionalConflict(err):
		default:
			return u, err
		}
		if attempt >= maxConflictRetries {
			return u, fmt.Errorf("conditional write kept conflicting after %d attempts: %w", attempt+1, err)
		}
		select {
		case <-ctx.Done():
			return u, ctx.Err()
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
}

// adopt HEADs key and compares it with the local file. found is false when
// the key holds nothing (any more).
func adopt(ctx context.Context, api S3API, bucket, key string, size int64, etag string) (versionID string, found bool, err error) {
	h, err := api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if isNotFound(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("head existing object: %w", err)
	}
	gotSize, gotETag := deref(h.ContentLength), trimETag(h.ETag)
	if gotSize != size || gotETag != etag {
		return "", true, fmt.Errorf("existing object (version %s) has size %d and ETag %s, local file has size %d and ETag %s: %w",
			deref(h.VersionId), gotSize, gotETag, size, etag, ErrNotDeterministic)
	}
	if deref(h.VersionId) == "" {
		return "", true, fmt.Errorf("existing object has no VersionId: is versioning on for bucket %s?", bucket)
	}
	return *h.VersionId, true, nil
}

// partDigests returns the MD5 of each part (one part for a single PUT).
func partDigests(f *os.File, size int64, multipart bool, partSize int64) ([][]byte, error) {
	if !multipart {
		partSize = max(size, 1)
	}
	var out [][]byte
	for off := int64(0); off < size || (off == 0 && size == 0); off += partSize {
		h := md5.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, off, min(partSize, size-off))); err != nil {
			return nil, err
		}
		out = append(out, h.Sum(nil))
		if size == 0 {
			break
		}
	}
	return out, nil
}

// expectedETag is the ETag S3 gives an object without SSE-KMS: the hex MD5
// of its bytes, or for a multipart upload the hex MD5 of the parts' MD5s
// followed by "-<number of parts>".
func expectedETag(parts [][]byte, multipart bool) string {
	if !multipart {
		return hex.EncodeToString(parts[0])
	}
	h := md5.New()
	for _, p := range parts {
		h.Write(p)
	}
	return fmt.Sprintf("%s-%d", hex.EncodeToString(h.Sum(nil)), len(parts))
}

func putSingle(ctx context.Context, api S3API, bucket, key string, f *os.File, size int64, digest []byte) (string, error) {
	out, err := api.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(bucket),
		Key:           aws.String(key),
		Body:          io.NewSectionReader(f, 0, size),
		ContentLength: aws.Int64(size),
		ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(digest)),
		IfNoneMatch:   aws.String("*"),
	})
	if err != nil {
		return "", err
	}
	return deref(out.VersionId), nil
}

func putMultipart(ctx context.Context, api S3API, bucket, key string, f *os.File, size, partSize int64, digests [][]byte) (versionID string, err error) {
	created, err := api.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
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
		out, err := api.UploadPart(ctx, &s3.UploadPartInput{
			Bucket:        aws.String(bucket),
			Key:           aws.String(key),
			UploadId:      uploadID,
			PartNumber:    aws.Int32(num),
			Body:          io.NewSectionReader(f, off, n),
			ContentLength: aws.Int64(n),
			ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(digests[i])),
		})
		if err != nil {
			return "", fmt.Errorf("upload part %d: %w", num, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
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
