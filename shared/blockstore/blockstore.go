// Package blockstore moves block files between a local directory and S3:
// versioned downloads with size checks, and uploads that never overwrite an
// object (If-None-Match: *) and adopt an identical object an earlier
// attempt already wrote. It also provides the scratch directory a job works
// in, removed on every path.
//
// Every S3 call goes through the small S3API interface (*s3.Client
// satisfies it), so tests can substitute a fake.
package blockstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3API is the subset of *s3.Client that blockstore uses.
type S3API interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(ctx context.Context, in *s3.UploadPartInput, opts ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

var _ S3API = (*s3.Client)(nil)

// Errors callers tell apart with errors.Is.
var (
	// ErrNotDeterministic: an upload found its key already holding an
	// object with other content. Two attempts of one job wrote different
	// bytes; the job must fail loudly, never overwrite.
	ErrNotDeterministic = errors.New("object exists with different content: output is not deterministic")
	// ErrSizeMismatch: a downloaded object's size differs from the one
	// recorded for it.
	ErrSizeMismatch = errors.New("object size differs from the recorded size")
	// ErrNotFound: the object or the named version does not exist.
	ErrNotFound = errors.New("object or version not found")
	// ErrInvalidPath: a relative path escapes the directory.
	ErrInvalidPath = errors.New("invalid relative path")
)

// WithScratchDir creates a fresh directory under base (os.TempDir() when
// base is empty), runs fn in it and removes it afterwards, whether fn
// returns an error, succeeds or panics.
func WithScratchDir(base string, fn func(dir string) error) (err error) {
	if base == "" {
		base = os.TempDir()
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	dir, err := os.MkdirTemp(base, "sluice-scratch-*")
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove scratch dir %s: %w", dir, rerr))
		}
	}()
	return fn(dir)
}

// forEach runs fn(i) for i in [0, n) with at most limit running at once.
// The first error cancels the context the others see and is returned.
func forEach(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	if limit < 1 {
		limit = 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, limit)
	)
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
