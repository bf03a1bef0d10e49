package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3notifications"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

// addBucket imports props.BucketName or creates a versioned, encrypted,
// private, TLS-only bucket that the stack never deletes.
func (s *Sluice) addBucket(props Props) {
	if props.BucketName != "" {
		s.Bucket = awss3.Bucket_FromBucketName(s.Stack, jsii.String("Blocks"), jsii.String(props.BucketName))
		return
	}
	r := props.Resources
	// Bucket names are global: the account and region make the spec's
	// name unique.
	name := awscdk.Fn_Join(jsii.String("-"), &[]*string{
		jsii.String(r.BucketName()), awscdk.Aws_ACCOUNT_ID(), awscdk.Aws_REGION(),
	})
	s.Bucket = awss3.NewBucket(s.Stack, jsii.String("Blocks"), &awss3.BucketProps{
		BucketName:        name,
		Versioned:         jsii.Bool(r.Bucket.Versioned),
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		EnforceSSL:        jsii.Bool(true),
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id:                                  jsii.String("abort-incomplete-multipart"),
			AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(float64(props.AbortMultipartDays))),
		}, {
			Id:                          jsii.String("expire-noncurrent-versions"),
			NoncurrentVersionExpiration: awscdk.Duration_Days(jsii.Number(float64(props.NoncurrentVersionDays))),
			// A delete marker left with no versions behind it is clutter.
			ExpiredObjectDeleteMarker: jsii.Bool(true),
		}},
		// The blocks are the user's data.
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
}

// notifyBlockEvents sends ObjectCreated for <prefix>…meta.json to the
// block-events queue. For an imported bucket CDK's notifications custom
// resource merges this configuration into the bucket's existing one.
func (s *Sluice) notifyBlockEvents(props Props) {
	filter := &awss3.NotificationKeyFilter{Suffix: jsii.String(props.Resources.Bucket.NotifySuffix)}
	if props.KeyPrefix != "" {
		filter.Prefix = jsii.String(props.KeyPrefix)
	}
	s.Bucket.AddEventNotification(awss3.EventType_OBJECT_CREATED,
		awss3notifications.NewSqsDestination(s.Queues[spec.BlockEvents]), filter)
}
