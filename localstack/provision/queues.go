package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/sluice-dev/sluice/shared/spec"
)

// provisionQueue converges q's DLQ and then q itself (whose redrive policy
// names the DLQ). It returns q's URL and ARN and the DLQ's URL.
func provisionQueue(ctx context.Context, c *sqs.Client, r spec.Resources, q spec.Queue) (queueURL, queueARN, dlqURL string, err error) {
	dlqAttrs := queueAttributes(q)
	dlqURL, err = ensureQueue(ctx, c, r.DLQName(q), q.FIFO, dlqAttrs)
	if err != nil {
		return "", "", "", err
	}
	dlqARN, err := queueArn(ctx, c, dlqURL)
	if err != nil {
		return "", "", "", err
	}
	redrive, err := json.Marshal(struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     string `json:"maxReceiveCount"`
	}{dlqARN, strconv.Itoa(q.MaxReceiveCount)})
	if err != nil {
		return "", "", "", fmt.Errorf("queue %s: redrive policy: %w", r.QueueName(q), err)
	}
	attrs := queueAttributes(q)
	attrs[string(sqstypes.QueueAttributeNameRedrivePolicy)] = string(redrive)
	queueURL, err = ensureQueue(ctx, c, r.QueueName(q), q.FIFO, attrs)
	if err != nil {
		return "", "", "", err
	}
	queueARN, err = queueArn(ctx, c, queueURL)
	if err != nil {
		return "", "", "", err
	}
	return queueURL, queueARN, dlqURL, nil
}

// queueAttributes are the mutable attributes of q (and of its DLQ): FIFO
// queues deduplicate by explicit id per message group, with throughput per
// message group (high-throughput mode), as spec.Queue documents.
func queueAttributes(q spec.Queue) map[string]string {
	a := map[string]string{
		string(sqstypes.QueueAttributeNameVisibilityTimeout):      seconds(q.VisibilityTimeout),
		string(sqstypes.QueueAttributeNameMessageRetentionPeriod): seconds(q.Retention),
	}
	if q.FIFO {
		a[string(sqstypes.QueueAttributeNameContentBasedDeduplication)] = "false"
		a[string(sqstypes.QueueAttributeNameDeduplicationScope)] = "messageGroup"
		a[string(sqstypes.QueueAttributeNameFifoThroughputLimit)] = "perMessageGroupId"
	}
	return a
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

// ensureQueue creates the queue or, when it exists, sets attrs on it.
// CreateQueue alone is not idempotent: it fails when an existing queue's
// attributes differ, e.g. after a spec change.
func ensureQueue(ctx context.Context, c *sqs.Client, name string, fifo bool, attrs map[string]string) (string, error) {
	got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err == nil {
		return setAttributes(ctx, c, name, aws.ToString(got.QueueUrl), attrs)
	}
	var missing *sqstypes.QueueDoesNotExist
	if !errors.As(err, &missing) {
		return "", fmt.Errorf("queue %s: get URL: %w", name, err)
	}
	create := map[string]string{}
	for k, v := range attrs {
		create[k] = v
	}
	if fifo {
		create[string(sqstypes.QueueAttributeNameFifoQueue)] = "true"
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: create})
	if err != nil {
		var exists *sqstypes.QueueNameExists
		if !errors.As(err, &exists) {
			return "", fmt.Errorf("queue %s: create: %w", name, err)
		}
		// A concurrent provisioner created it first: converge on it.
		got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return "", fmt.Errorf("queue %s: get URL after a concurrent create: %w", name, err)
		}
		return setAttributes(ctx, c, name, aws.ToString(got.QueueUrl), attrs)
	}
	return aws.ToString(out.QueueUrl), nil
}

func setAttributes(ctx context.Context, c *sqs.Client, name, url string, attrs map[string]string) (string, error) {
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: attrs}); err != nil {
		return "", fmt.Errorf("queue %s: set attributes: %w", name, err)
	}
	return url, nil
}

func queueArn(ctx context.Context, c *sqs.Client, url string) (string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", fmt.Errorf("queue %s: get ARN: %w", url, err)
	}
	arn := out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", fmt.Errorf("queue %s: the emulator returned no QueueArn", url)
	}
	return arn, nil
}
