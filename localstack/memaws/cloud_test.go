package memaws_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/localstack/memaws"
	"github.com/sluice-dev/sluice/shared/awsenv"
)

// Served on a socket, a Cloud answers the real SDK clients of another
// process as it answers them in-process: S3 (a ranged read of a checksummed
// upload), DynamoDB and SQS.
func TestCloudServedOverHTTP(t *testing.T) {
	srv := httptest.NewServer(memaws.New(memaws.Options{}))
	defer srv.Close()
	ctx := context.Background()
	c, err := awsenv.Load(ctx, awsenv.Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.S3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("served")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("served"), Key: aws.String("a/b"),
		Body: strings.NewReader("0123456789"), ChecksumAlgorithm: "SHA256"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("served"), Key: aws.String("a/b"), Range: aws.String("bytes=3-")})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if string(body) != "3456789" {
		t.Fatalf("ranged read %q", body)
	}
	if _, err := c.DynamoDB.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String("served"), BillingMode: dbtypes.BillingModePayPerRequest,
		KeySchema:            []dbtypes.KeySchemaElement{{AttributeName: aws.String("PK"), KeyType: dbtypes.KeyTypeHash}},
		AttributeDefinitions: []dbtypes.AttributeDefinition{{AttributeName: aws.String("PK"), AttributeType: dbtypes.ScalarAttributeTypeS}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("served"),
		Item: map[string]dbtypes.AttributeValue{"PK": &dbtypes.AttributeValueMemberS{Value: "x"}}}); err != nil {
		t.Fatal(err)
	}
	q, err := c.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("hello")}); err != nil {
		t.Fatal(err)
	}
	r, err := c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
	if err != nil || len(r.Messages) != 1 || aws.ToString(r.Messages[0].Body) != "hello" {
		t.Fatalf("receive: %v, %v", r, err)
	}
}
