package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/s3event"
)

func removeTable(ctx context.Context, c *awsenv.Clients, table string) error {
	_, err := c.DynamoDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	var nf *dbtypes.ResourceNotFoundException
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("delete table %s: %w", table, err)
	}
	return nil
}

// removeBucket deletes every object version and delete marker, then the
// bucket.
func removeBucket(ctx context.Context, c *awsenv.Clients, bucket string) error {
	p := s3.NewListObjectVersionsPaginator(c.S3, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			var api smithy.APIError
			if errors.As(err, &api) && api.ErrorCode() == "NoSuchBucket" {
				return nil
			}
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
			if _, err := c.S3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(bucket),
				Delete: &s3types.Delete{Objects: ids[:n], Quiet: aws.Bool(true)}}); err != nil {
				return fmt.Errorf("delete objects of %s: %w", bucket, err)
			}
			ids = ids[n:]
		}
	}
	if _, err := c.S3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("delete bucket %s: %w", bucket, err)
	}
	return nil
}

// metaKeyOf returns the meta.json key an S3 notification names.
func metaKeyOf(body string) (string, bool) {
	objs, err := s3event.Decode([]byte(body))
	if err != nil {
		return "", false
	}
	for _, o := range objs {
		if strings.HasSuffix(o.Key, "/meta.json") {
			return o.Key, true
		}
	}
	return "", false
}
