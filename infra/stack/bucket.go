package stack

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
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

// notifyBlockEvents sends ObjectCreated for <prefix>…meta.json and
// <prefix>…-mark.json to the block-events queue. For an imported bucket
// CDK's notifications custom resource merges this configuration into the
// bucket's existing one.
func (s *Sluice) notifyBlockEvents(props Props) {
	dest := awss3notifications.NewSqsDestination(s.Queues[spec.BlockEvents])
	for _, suffix := range props.Resources.Bucket.NotifySuffixes {
		filter := &awss3.NotificationKeyFilter{Suffix: jsii.String(suffix)}
		if props.KeyPrefix != "" {
			filter.Prefix = jsii.String(props.KeyPrefix)
		}
		s.Bucket.AddEventNotification(awss3.EventType_OBJECT_CREATED, dest, filter)
	}
	s.scopeNotificationsHandler()
}

// notificationsHandlerPrefix is the id CDK gives the singleton function
// behind bucket notifications (a custom resource).
const notificationsHandlerPrefix = "BucketNotificationsHandler"

// scopeNotificationsHandler narrows the role CDK creates for its bucket
// notifications handler. CDK scopes its s3:PutBucketNotification to the
// bucket, but attaches AWSLambdaBasicExecutionRole, which lets it write
// every log group of the account; it gets this stack's Lambda log groups
// instead. (Its function's name is generated, so the group is named by
// the stack's prefix: naming the function itself would make the role
// depend on the function that depends on it.)
func (s *Sluice) scopeNotificationsHandler() {
	for _, c := range *s.Stack.Node().Children() {
		if !strings.HasPrefix(*c.Node().Id(), notificationsHandlerPrefix) {
			continue
		}
		role := c.Node().TryFindChild(jsii.String("Role"))
		if role == nil {
			continue
		}
		cfn, ok := role.Node().DefaultChild().(awsiam.CfnRole)
		if !ok {
			panic("stack: the bucket notifications handler's role is not a CfnRole; CDK changed")
		}
		cfn.AddPropertyDeletionOverride(jsii.String("ManagedPolicyArns"))
		logs := awscdk.Fn_Join(jsii.String(""), &[]*string{
			jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":logs:"), awscdk.Aws_REGION(), jsii.String(":"),
			awscdk.Aws_ACCOUNT_ID(), jsii.String(":log-group:/aws/lambda/"), awscdk.Aws_STACK_NAME(), jsii.String("-*"),
		})
		cfn.AddPropertyOverride(jsii.String("Policies"), []map[string]any{{
			"PolicyName": "WriteStackLambdaLogs",
			"PolicyDocument": map[string]any{
				"Version": "2012-10-17",
				"Statement": []map[string]any{{
					"Sid": "WriteStackLambdaLogs", "Effect": "Allow",
					"Action":   []string{"logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"},
					"Resource": []any{logs, awscdk.Fn_Join(jsii.String(""), &[]*string{logs, jsii.String(":*")})},
				}},
			},
		}})
	}
}
