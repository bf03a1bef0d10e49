package memsqs_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/localstack/memaws/memsqs"
)

// The real SDK client, served in-process.
func Example() {
	srv := memsqs.New(memsqs.Options{})
	c := sqs.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: inProcess{srv}},
		BaseEndpoint: aws.String("http://sqs.memaws.local"),
	})
	ctx := context.Background()
	q, _ := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs.fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}})
	sent, _ := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("compact team-b"), MessageGroupId: aws.String("team-b")})
	got, _ := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
	fmt.Println(aws.ToString(q.QueueUrl))
	fmt.Println(aws.ToString(sent.MessageId), aws.ToString(sent.SequenceNumber))
	fmt.Println(aws.ToString(got.Messages[0].Body))
	// Output:
	// http://sqs.memaws.local/000000000000/jobs.fifo
	// 00000000-0000-4000-8000-000000000001 00000000000000000001
	// compact team-b
}
