package envtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/awsenv"
)

// teardown deletes a test deployment, so a long-running emulator does not
// accumulate every test's resources. It tries everything and joins errors.
func teardown(ctx context.Context, c *awsenv.Clients, d provision.Deployment) error {
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
	if err := emptyBucket(ctx, c.S3, d.Bucket); err != nil {
		errs = append(errs, err)
	} else if _, err := c.S3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(d.Bucket)}); err != nil {
		errs = append(errs, fmt.Errorf("delete bucket %s: %w", d.Bucket, err))
	}
	return errors.Join(errs...)
}

// emptyBucket deletes every object version and delete marker.
func emptyBucket(ctx context.Context, c *s3.Client, bucket string) error {
	p := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list versions of %s: %w", bucket, err)
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
			if _, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{
				Bucket: aws.String(bucket),
				Delete: &s3types.Delete{Objects: ids[:n], Quiet: aws.Bool(true)},
			}); err != nil {
				return fmt.Errorf("delete objects of %s: %w", bucket, err)
			}
			ids = ids[n:]
		}
	}
	return nil
}
