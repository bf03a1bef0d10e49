package provision_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/oklog/ulid/v2"
	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/s3event"
	"github.com/sluice-dev/sluice/shared/spec"
)

// TestProvisionIsIdempotentAndNotifies: provisioning twice changes nothing
// (and adds no second s3:TestEvent), and a shipper's PUT of
// <tenant>/<ULID>/meta.json reaches block-events as an event that
// s3event.Decode and blockkey.Parse understand. Other files of the block do
// not notify.
func TestProvisionIsIdempotentAndNotifies(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	d := env.Deployment

	again, err := provision.Provision(ctx, env.Clients, d.Resources)
	if err != nil {
		t.Fatalf("second Provision: %v", err)
	}
	if !maps.Equal(again.Env(), d.Env()) || !maps.Equal(again.DLQURLs, d.DLQURLs) {
		t.Errorf("second Provision returned %+v, first %+v", again, d)
	}
	if n, err := eventsource.Pending(ctx, env.Clients.SQS, d.QueueURLs[spec.BlockEvents]); err != nil || n != 0 {
		t.Errorf("block-events holds %d messages (%v) after a re-provision, want 0 (no second s3:TestEvent)", n, err)
	}

	id := ulid.Make()
	const tenant = "team-a"
	prefix := tenant + "/" + id.String() + "/"
	for _, file := range []string{"chunks/000001", "index", "meta.json"} {
		out, err := env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(d.Bucket), Key: aws.String(prefix + file),
			Body: strings.NewReader(`{"ulid":"` + id.String() + `"}`), IfNoneMatch: aws.String("*"),
		})
		if err != nil {
			t.Fatalf("put %s: %v", prefix+file, err)
		}
		if aws.ToString(out.VersionId) == "" {
			t.Errorf("put %s: no VersionId: the bucket is not versioned", prefix+file)
		}
	}

	msgs, err := env.Clients.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(d.QueueURLs[spec.BlockEvents]), MaxNumberOfMessages: 10, WaitTimeSeconds: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs.Messages) != 1 {
		t.Fatalf("block-events got %d messages, want 1 (meta.json only)", len(msgs.Messages))
	}
	records, err := s3event.Decode([]byte(aws.ToString(msgs.Messages[0].Body)))
	if err != nil {
		t.Fatalf("decode %s: %v", aws.ToString(msgs.Messages[0].Body), err)
	}
	if len(records) != 1 || records[0].Bucket != d.Bucket || records[0].Key != prefix+"meta.json" {
		t.Fatalf("decoded %+v, want one record for %s/%smeta.json", records, d.Bucket, prefix)
	}
	k, err := blockkey.Parse(records[0].Key, blockkey.Layout{})
	if err != nil {
		t.Fatalf("parse %q: %v", records[0].Key, err)
	}
	if k.Tenant != tenant || k.Block != id || k.File != blockkey.MetaFile {
		t.Errorf("parsed %+v, want tenant %s block %s meta.json", k, tenant, id)
	}
	t.Logf("event: %+v", records[0])
}

// TestDeploymentFromEnv round-trips a deployment through its environment.
func TestDeploymentFromEnv(t *testing.T) {
	r := spec.Default("demo")
	d := provision.Deployment{
		Resources: r, Bucket: r.BucketName(), Table: r.TableName(),
		QueueURLs: map[spec.QueueID]string{}, DLQURLs: map[spec.QueueID]string{},
	}
	for _, q := range r.Queues {
		d.QueueURLs[q.ID] = "http://127.0.0.1:4566/123456789012/" + r.QueueName(q)
		d.DLQURLs[q.ID] = "http://127.0.0.1:4566/123456789012/" + r.DLQName(q)
	}
	for k, v := range d.Env() {
		t.Setenv(k, v)
	}
	got, err := provision.DeploymentFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if got.Bucket != d.Bucket || got.Table != d.Table || got.Resources.Prefix != "demo" ||
		!maps.Equal(got.QueueURLs, d.QueueURLs) || !maps.Equal(got.DLQURLs, d.DLQURLs) {
		t.Errorf("DeploymentFromEnv = %+v, want %+v", got, d)
	}

	t.Setenv(spec.EnvJobsQueue, "")
	_, err = provision.DeploymentFromEnv()
	if !errors.Is(err, provision.ErrMissingEnv) || !strings.Contains(err.Error(), spec.EnvJobsQueue) {
		t.Errorf("without %s: %v, want an error naming it", spec.EnvJobsQueue, err)
	}
}

func TestValidatePrefix(t *testing.T) {
	for prefix, ok := range map[string]bool{
		"sluice": true, "t-abc-123": true, strings.Repeat("a", 55): true,
		"": false, "-x": false, "Upper": false, "under_score": false, "dot.ted": false, strings.Repeat("a", 56): false,
	} {
		if err := provision.ValidatePrefix(prefix); (err == nil) != ok {
			t.Errorf("ValidatePrefix(%q) = %v, want ok=%v", prefix, err, ok)
		}
	}
}
