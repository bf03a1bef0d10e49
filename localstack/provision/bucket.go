package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/spec"
)

// notificationID names the bucket's queue notification for suffix i
// (the first keeps the name of the one notification of earlier versions).
func notificationID(i int) string {
	if i == 0 {
		return "sluice-block-events"
	}
	return fmt.Sprintf("sluice-block-events-%d", i)
}

// provisionBucket converges the bucket: created, versioned, and notifying
// ObjectCreated:* of keys ending in each of NotifySuffixes to the
// block-events queue.
func provisionBucket(ctx context.Context, c *awsenv.Clients, r spec.Resources, eventsURL, eventsARN string) error {
	name := r.BucketName()
	in := &s3.CreateBucketInput{Bucket: aws.String(name)}
	if region := c.Config.Region; region != "" && region != "us-east-1" {
		in.CreateBucketConfiguration = &s3types.CreateBucketConfiguration{
			LocationConstraint: s3types.BucketLocationConstraint(region),
		}
	}
	if _, err := c.S3.CreateBucket(ctx, in); err != nil {
		var owned *s3types.BucketAlreadyOwnedByYou
		if !errors.As(err, &owned) {
			return fmt.Errorf("bucket %s: create: %w", name, err)
		}
	}
	if r.Bucket.Versioned {
		if _, err := c.S3.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{
			Bucket:                  aws.String(name),
			VersioningConfiguration: &s3types.VersioningConfiguration{Status: s3types.BucketVersioningStatusEnabled},
		}); err != nil {
			return fmt.Errorf("bucket %s: enable versioning: %w", name, err)
		}
	}
	if err := allowBucketToNotify(ctx, c.SQS, eventsURL, eventsARN, name); err != nil {
		return err
	}
	return ensureNotification(ctx, c.S3, name, eventsARN, r.Bucket.NotifySuffixes)
}

// allowBucketToNotify sets the queue policy real S3 needs to send to the
// queue (the emulators do not check it, but the provisioner should produce
// what works in AWS too).
func allowBucketToNotify(ctx context.Context, c *sqs.Client, queueURL, queueARN, bucket string) error {
	policy, err := json.Marshal(map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Sid":       "S3BlockEvents",
			"Effect":    "Allow",
			"Principal": map[string]string{"Service": "s3.amazonaws.com"},
			"Action":    "sqs:SendMessage",
			"Resource":  queueARN,
			"Condition": map[string]any{"ArnLike": map[string]string{"aws:SourceArn": "arn:aws:s3:::" + bucket}},
		}},
	})
	if err != nil {
		return fmt.Errorf("queue %s: policy: %w", queueURL, err)
	}
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(queueURL),
		Attributes: map[string]string{"Policy": string(policy)},
	}); err != nil {
		return fmt.Errorf("queue %s: allow bucket %s to send: %w", queueURL, bucket, err)
	}
	return nil
}

// ensureNotification puts the notification configuration unless the bucket
// already has exactly it: every put makes S3 send an s3:TestEvent, which a
// re-provision should not add to the queue.
func ensureNotification(ctx context.Context, c *s3.Client, bucket, queueARN string, suffixes []string) error {
	if len(suffixes) == 0 {
		suffixes = []string{""}
	}
	var want []s3types.QueueConfiguration
	for i, suffix := range suffixes {
		q := s3types.QueueConfiguration{
			Id:       aws.String(notificationID(i)),
			QueueArn: aws.String(queueARN),
			Events:   []s3types.Event{"s3:ObjectCreated:*"},
		}
		if suffix != "" {
			q.Filter = &s3types.NotificationConfigurationFilter{Key: &s3types.S3KeyFilter{
				FilterRules: []s3types.FilterRule{{Name: s3types.FilterRuleNameSuffix, Value: aws.String(suffix)}},
			}}
		}
		want = append(want, q)
	}
	got, err := c.GetBucketNotificationConfiguration(ctx, &s3.GetBucketNotificationConfigurationInput{Bucket: aws.String(bucket)})
	if err != nil {
		var api smithy.APIError
		if !errors.As(err, &api) {
			return fmt.Errorf("bucket %s: get notification: %w", bucket, err)
		}
		// An emulator that cannot read it back: put it anyway.
	} else if sameNotification(got.QueueConfigurations, want) && len(got.TopicConfigurations) == 0 && len(got.LambdaFunctionConfigurations) == 0 {
		return nil
	}
	if _, err := c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{
		Bucket:                    aws.String(bucket),
		NotificationConfiguration: &s3types.NotificationConfiguration{QueueConfigurations: want},
	}); err != nil {
		return fmt.Errorf("bucket %s: put notification to %s: %w", bucket, queueARN, err)
	}
	return nil
}

func sameNotification(got, want []s3types.QueueConfiguration) bool {
	type norm struct {
		id, arn string
		events  []s3types.Event
		rules   map[string]string
	}
	n := func(qs []s3types.QueueConfiguration) []norm {
		out := make([]norm, 0, len(qs))
		for _, q := range qs {
			x := norm{id: aws.ToString(q.Id), arn: aws.ToString(q.QueueArn), events: q.Events, rules: map[string]string{}}
			if q.Filter != nil && q.Filter.Key != nil {
				for _, fr := range q.Filter.Key.FilterRules {
					// S3 answers "Suffix" where the request said "suffix".
					x.rules[strings.ToLower(string(fr.Name))] = aws.ToString(fr.Value)
				}
			}
			out = append(out, x)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
		return out
	}
	return reflect.DeepEqual(n(got), n(want))
}
