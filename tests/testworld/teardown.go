package testworld

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// DeleteResources deletes the world's deployment — queues, table, every
// object version and the bucket — even when the test failed (envtest keeps
// a failed test's resources for inspection). Runs that fail by design or
// in numbers, like chaos seeds, call it so the emulator does not fill up;
// what the failure needs is in the test's log.
func (w *World) DeleteResources(ctx context.Context) error {
	c, d := w.Env.Clients, w.Env.Deployment
	var errs []error
	for id, u := range d.QueueURLs {
		for _, url := range []string{u, d.DLQURLs[id]} {
			if _, err := c.SQS.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
				errs = append(errs, fmt.Errorf("delete queue %s: %w", url, err))
			}
		}
	}
	if _, err := c.DynamoDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(d.Table)}); err != nil {
		errs = append(errs, fmt.Errorf("delete table %s: %w", d.Table, err))
	}
	p := s3.NewListObjectVersionsPaginator(c.S3, &s3.ListObjectVersionsInput{Bucket: aws.String(d.Bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			errs = append(errs, err)
			break
		}
		var ids []s3types.ObjectIdentifier
		for _, v := range page.Versions {
			ids = append(ids, s3types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
		}
		for _, m := range page.DeleteMarkers {
			ids = append(ids, s3types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
		}
		for len(ids) > 0 {
			n := min(len(ids), 1000)
			if _, err := c.S3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(d.Bucket),
				Delete: &s3types.Delete{Objects: ids[:n], Quiet: aws.Bool(true)}}); err != nil {
				errs = append(errs, err)
			}
			ids = ids[n:]
		}
	}
	if _, err := c.S3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(d.Bucket)}); err != nil {
		errs = append(errs, fmt.Errorf("delete bucket %s: %w", d.Bucket, err))
	}
	return errors.Join(errs...)
}
