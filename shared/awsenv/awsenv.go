// Package awsenv builds the AWS SDK clients every Sluice component uses,
// the same way in Lambda, in the CLI and in tests.
//
// The endpoint comes from the SDK's own AWS_ENDPOINT_URL (the emulator sets
// it to http://127.0.0.1:4566); when an endpoint is set, S3 is addressed
// path-style, which LocalStack and moto need.
package awsenv

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Clients holds one client per service.
type Clients struct {
	Config   aws.Config
	S3       *s3.Client
	SQS      *sqs.Client
	DynamoDB *dynamodb.Client
}

// Options tune how clients are built. The zero value is right for Lambda.
type Options struct {
	// Endpoint overrides AWS_ENDPOINT_URL when non-empty.
	Endpoint string
	// Counter, when non-nil, counts every request by service and operation.
	Counter *RequestCounter
	// MaxAttempts overrides the SDK's retry attempts when > 0.
	MaxAttempts int
	// HTTPClient, when non-nil, carries every request instead of the
	// SDK's default client: the fast test tier's in-memory AWS
	// (localstack/memaws) answers requests this way, without a socket.
	HTTPClient aws.HTTPClient
}

// Load builds clients from the environment. Outside AWS with an endpoint set
// and no credentials in the environment, it uses the emulator's dummy
// credentials and region, so a fresh machine needs no ~/.aws.
func Load(ctx context.Context, opts Options) (*Clients, error) {
	endpoint := opts.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	var loaders []func(*config.LoadOptions) error
	if endpoint != "" {
		loaders = append(loaders, config.WithBaseEndpoint(endpoint))
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
			loaders = append(loaders, config.WithCredentialsProvider(aws.CredentialsProviderFunc(
				func(context.Context) (aws.Credentials, error) {
					return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "sluice-emulator"}, nil
				})))
		}
		if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
			loaders = append(loaders, config.WithRegion("us-east-1"))
		}
	}
	if opts.MaxAttempts > 0 {
		loaders = append(loaders, config.WithRetryMaxAttempts(opts.MaxAttempts))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loaders...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if opts.HTTPClient != nil {
		// Set after loading: the loader would wrap a CA bundle from the
		// environment (AWS_CA_BUNDLE) around the SDK's own client only.
		cfg.HTTPClient = opts.HTTPClient
	}
	if opts.Counter != nil {
		opts.Counter.Attach(&cfg)
	}
	return &Clients{
		Config: cfg,
		S3: s3.NewFromConfig(cfg, func(o *s3.Options) {
			o.UsePathStyle = endpoint != ""
			// Emulators return no response checksums; the SDK would log a
			// line for every GetObject. Integrity is checked by size (and,
			// for uploads, by ETag) in shared/blockstore.
			o.DisableLogOutputChecksumValidationSkipped = endpoint != ""
		}),
		SQS:      sqs.NewFromConfig(cfg),
		DynamoDB: dynamodb.NewFromConfig(cfg),
	}, nil
}
