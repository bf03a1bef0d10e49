package blockstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/s3errors"
)

// SizeUnknown as Object.Size skips the size check (meta.json, whose size
// thanos.files does not record).
const SizeUnknown int64 = -1

// Object is one object to download.
type Object struct {
	Key string
	// VersionID to read; empty reads the current version (only for buckets
	// without versioning — Sluice always names the version it recorded).
	VersionID string
	// Size the object must have; SizeUnknown skips the check.
	Size int64
	// RelPath is where it goes under the directory, slash-separated
	// ("chunks/000001").
	RelPath string
}

// Download fetches objects into dir (dir/RelPath), at most parallelism at
// a time (< 1 means 1), each by its VersionID, and checks that each has the
// recorded Size. The first failure cancels the rest; a file that failed is
// removed (the caller's scratch directory takes care of the others).
// Errors wrap ErrNotFound, ErrSizeMismatch or ErrInvalidPath where they apply.
func Download(ctx context.Context, api S3API, bucket string, objects []Object, dir string, parallelism int) error {
	for _, o := range objects {
		if _, err := localPath(dir, o.RelPath); err != nil {
			return err
		}
	}
	return forEach(ctx, len(objects), parallelism, func(ctx context.Context, i int) error {
		return download(ctx, api, bucket, objects[i], dir)
	})
}

func localPath(dir, rel string) (string, error) {
	p := filepath.FromSlash(rel)
	if rel == "" || !filepath.IsLocal(p) {
		return "", fmt.Errorf("%q: %w", rel, ErrInvalidPath)
	}
	return filepath.Join(dir, p), nil
}

func download(ctx context.Context, api S3API, bucket string, o Object, dir string) (err error) {
	where := fmt.Sprintf("download s3://%s/%s (version %q)", bucket, o.Key, o.VersionID)
	path, err := localPath(dir, o.RelPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.Key)}
	if o.VersionID != "" {
		in.VersionId = aws.String(o.VersionID)
	}
	out, err := api.GetObject(ctx, in)
	if err != nil {
		if s3errors.IsNotFound(err) {
			return fmt.Errorf("%s: %w: %w", where, ErrNotFound, err)
		}
		return fmt.Errorf("%s: %w", where, err)
	}
	defer out.Body.Close()
	if o.Size != SizeUnknown && out.ContentLength != nil && *out.ContentLength != o.Size {
		return fmt.Errorf("%s: %d bytes, recorded %d: %w", where, *out.ContentLength, o.Size, ErrSizeMismatch)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", where, cerr)
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	n, err := io.Copy(f, out.Body)
	if err != nil {
		return fmt.Errorf("%s: after %d bytes: %w", where, n, err)
	}
	if o.Size != SizeUnknown && n != o.Size {
		return fmt.Errorf("%s: read %d bytes, recorded %d: %w", where, n, o.Size, ErrSizeMismatch)
	}
	if out.ContentLength != nil && n != *out.ContentLength {
		return fmt.Errorf("%s: read %d of %d bytes: %w", where, n, *out.ContentLength, errors.Join(ErrSizeMismatch, io.ErrUnexpectedEOF))
	}
	return nil
}
