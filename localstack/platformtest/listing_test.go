package platformtest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/envtest"
)

// TestListingDuringWrites lists a block prefix's versions while other
// clients put and delete versions in the same bucket, as the planner's
// registration LIST does while the uploader deletes. moto's listing
// deep-copies every version list of the bucket, and a plain PUT or DELETE
// changes them under it (a 500 from a TypeError in moto); moto_serial.py
// runs them one at a time. SDK retries are off, so no error is hidden.
func TestListingDuringWrites(t *testing.T) {
	env := envtest.New(t)
	c, bucket := env.Clients.S3, env.Deployment.Bucket
	noRetry := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const writers, listers, rounds = 6, 3, 40
	var errs atomic.Int64
	var first atomic.Value
	fail := func(err error) {
		if errs.Add(1) == 1 {
			first.Store(err)
		}
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				key := fmt.Sprintf("t/01ARZ3NDEKTSV4RRFFQ69G5FA%d/chunks/%06d", w, r%4)
				res, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
					Body: bytes.NewReader([]byte(key))}, noRetry)
				if err != nil {
					fail(err)
					continue
				}
				if r%2 == 1 {
					if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
						VersionId: res.VersionId}, noRetry); err != nil {
						fail(err)
					}
				}
			}
		})
	}
	var listed atomic.Int64
	for l := range listers {
		wg.Go(func() {
			for range rounds {
				prefix := fmt.Sprintf("t/01ARZ3NDEKTSV4RRFFQ69G5FA%d/", l)
				if _, err := c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)}, noRetry); err != nil {
					fail(err)
					continue
				}
				listed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		t.Fatalf("%d requests failed while listing during writes; the first: %v", n, first.Load())
	}
	if listed.Load() != listers*rounds {
		t.Fatalf("%d listings, want %d", listed.Load(), listers*rounds)
	}
}
