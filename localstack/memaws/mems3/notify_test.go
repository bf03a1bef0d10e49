package mems3_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

const (
	blocksARN   = "arn:aws:sqs:us-east-1:000000000000:blocks"
	removalsARN = "arn:aws:sqs:us-east-1:000000000000:removals"
)

type message struct {
	arn  string
	body []byte
}

// sink is a Notify that keeps what it is given, as a queue would.
type sink struct {
	mu   sync.Mutex
	msgs []message
	fail func(arn string, body []byte) error
}

func (s *sink) notify(_ context.Context, arn string, body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(arn, body); err != nil {
			return err
		}
	}
	s.msgs = append(s.msgs, message{arn, body})
	return nil
}

func (s *sink) take() []message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.msgs
	s.msgs = nil
	return out
}

// records parses messages as the project's consumers do.
func records(t *testing.T, msgs []message) []events.S3EventRecord {
	t.Helper()
	var out []events.S3EventRecord
	for _, m := range msgs {
		var ev events.S3Event
		if err := json.Unmarshal(m.body, &ev); err != nil {
			t.Fatalf("event body %s: %v", m.body, err)
		}
		if len(ev.Records) != 1 {
			t.Fatalf("event body with %d records: %s", len(ev.Records), m.body)
		}
		out = append(out, ev.Records...)
	}
	return out
}

func suffixRule(v string) *s3types.NotificationConfigurationFilter {
	return &s3types.NotificationConfigurationFilter{Key: &s3types.S3KeyFilter{
		FilterRules: []s3types.FilterRule{{Name: s3types.FilterRuleNameSuffix, Value: aws.String(v)}}}}
}

func prefixRule(v string) *s3types.NotificationConfigurationFilter {
	return &s3types.NotificationConfigurationFilter{Key: &s3types.S3KeyFilter{
		FilterRules: []s3types.FilterRule{{Name: s3types.FilterRuleNamePrefix, Value: aws.String(v)}}}}
}

func (f *fixture) putNotification(t *testing.T, qs ...s3types.QueueConfiguration) error {
	t.Helper()
	_, err := f.c.PutBucketNotificationConfiguration(t.Context(), &s3.PutBucketNotificationConfigurationInput{
		Bucket: aws.String(f.bucket), NotificationConfiguration: &s3types.NotificationConfiguration{QueueConfigurations: qs}})
	return err
}

func TestNotifications(t *testing.T) {
	t.Parallel()
	q := &sink{}
	clock := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	f := newFixture(t, mems3.Options{Notify: q.notify, Clock: func() time.Time { return clock }, MinPartSize: testMinPart}, true)
	ctx := t.Context()

	err := f.putNotification(t,
		s3types.QueueConfiguration{Id: aws.String("blocks"), QueueArn: aws.String(blocksARN), Events: []s3types.Event{"s3:ObjectCreated:*"}, Filter: suffixRule("meta.json")},
		s3types.QueueConfiguration{Id: aws.String("removals"), QueueArn: aws.String(removalsARN), Events: []s3types.Event{"s3:ObjectRemoved:*"}, Filter: prefixRule("logs/")},
	)
	if err != nil {
		t.Fatalf("PutBucketNotificationConfiguration: %v", err)
	}
	var arns []string
	for _, m := range q.take() {
		var te struct{ Service, Event, Time, Bucket, RequestId, HostId string }
		if err := json.Unmarshal(m.body, &te); err != nil || te.Event != "s3:TestEvent" || te.Service != "Amazon S3" ||
			te.Bucket != f.bucket || te.Time != "2026-03-04T05:06:07.008Z" || te.RequestId == "" || te.HostId == "" {
			t.Fatalf("test event %s: %v", m.body, err)
		}
		arns = append(arns, m.arn)
	}
	if !slices.Equal(arns, []string{blocksARN, removalsARN}) {
		t.Fatalf("test events went to %v", arns)
	}
	got, err := f.c.GetBucketNotificationConfiguration(ctx, &s3.GetBucketNotificationConfigurationInput{Bucket: aws.String(f.bucket)})
	if err != nil || len(got.QueueConfigurations) != 2 || got.QueueConfigurations[0].Filter.Key.FilterRules[0].Name != "Suffix" ||
		aws.ToString(got.QueueConfigurations[1].Filter.Key.FilterRules[0].Value) != "logs/" {
		t.Fatalf("GetBucketNotificationConfiguration: %v %+v", err, got)
	}

	// Creations.
	key := "dir/a b+c=d/meta.json"
	put := f.put(t, key, "{}")
	f.put(t, "dir/a b/data.bin", "not notified")
	id, done := uploadParts(t, f, "mp/meta.json", s3types.ChecksumAlgorithmSha256, testParts(testMinPart, 1))
	if _, err := f.complete(t, "mp/meta.json", id, done); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("copy/meta.json"),
		CopySource: aws.String(url.PathEscape(f.bucket + "/" + key))}); err != nil {
		t.Fatal(err)
	}
	msgs := q.take()
	recs := records(t, msgs)
	if len(recs) != 3 {
		t.Fatalf("%d creation events, want 3: %v", len(recs), recs)
	}
	r := recs[0]
	if r.EventVersion != "2.1" || r.EventSource != "aws:s3" || r.AWSRegion != "us-east-1" || r.EventName != "ObjectCreated:Put" ||
		!r.EventTime.Equal(clock.Truncate(time.Millisecond)) || r.S3.SchemaVersion != "1.0" || r.S3.ConfigurationID != "blocks" ||
		r.S3.Bucket.Name != f.bucket || r.S3.Bucket.Arn != "arn:aws:s3:::"+f.bucket || r.S3.Object.Size != 2 ||
		r.S3.Object.ETag != strings.Trim(aws.ToString(put.ETag), `"`) || r.S3.Object.VersionID != aws.ToString(put.VersionId) ||
		r.ResponseElements["x-amz-request-id"] == "" || r.RequestParameters.SourceIPAddress != "127.0.0.1" || msgs[0].arn != blocksARN {
		t.Fatalf("PutObject event: %+v", r)
	}
	if r.S3.Object.Key != "dir/a+b%2Bc%3Dd/meta.json" || r.S3.Object.URLDecodedKey != key {
		t.Fatalf("event key %q (decoded %q), want S3's form encoding of %q", r.S3.Object.Key, r.S3.Object.URLDecodedKey, key)
	}
	if unescaped, _ := url.QueryUnescape(r.S3.Object.Key); unescaped != key {
		t.Fatalf("url.QueryUnescape(%q) = %q", r.S3.Object.Key, unescaped)
	}
	if recs[1].EventName != "ObjectCreated:CompleteMultipartUpload" || recs[2].EventName != "ObjectCreated:Copy" {
		t.Fatalf("event names %q %q", recs[1].EventName, recs[2].EventName)
	}

	// Removals: a marker, a version, and DeleteObjects; only under logs/.
	f.put(t, "logs/1", "x")
	v2 := aws.ToString(f.put(t, "logs/2", "y").VersionId)
	if _, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("logs/1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("logs/2"), VersionId: aws.String(v2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(f.bucket), Delete: &s3types.Delete{
		Objects: []s3types.ObjectIdentifier{{Key: aws.String("logs/3")}}}}); err != nil {
		t.Fatal(err)
	}
	msgs = q.take()
	recs = records(t, msgs)
	var names []string
	for i, r := range recs {
		names = append(names, r.EventName+" "+r.S3.Object.Key)
		if msgs[i].arn != removalsARN || r.S3.ConfigurationID != "removals" {
			t.Fatalf("removal event to %s config %s", msgs[i].arn, r.S3.ConfigurationID)
		}
		var body struct {
			Records []struct {
				S3 struct {
					Object map[string]any `json:"object"`
				} `json:"s3"`
			}
		}
		if err := json.Unmarshal(msgs[i].body, &body); err != nil {
			t.Fatal(err)
		}
		obj := body.Records[0].S3.Object
		if _, ok := obj["size"]; ok {
			t.Fatalf("removal event has a size: %s", msgs[i].body)
		}
		if _, ok := obj["eTag"]; ok {
			t.Fatalf("removal event has an eTag: %s", msgs[i].body)
		}
	}
	want := []string{"ObjectRemoved:DeleteMarkerCreated logs/1", "ObjectRemoved:Delete logs/2", "ObjectRemoved:DeleteMarkerCreated logs/3"}
	if !slices.Equal(names, want) {
		t.Fatalf("removal events %v, want %v", names, want)
	}
	if f.srv.DroppedNotifications() != 0 {
		t.Fatalf("%d dropped", f.srv.DroppedNotifications())
	}

	// A failing queue drops events (and counts them); a queue that cannot
	// take the test event fails the configuration, which stays as it was.
	q.fail = func(string, []byte) error { return errors.New("queue unavailable") }
	f.put(t, "z/meta.json", "{}")
	if n := f.srv.DroppedNotifications(); n != 1 {
		t.Fatalf("DroppedNotifications %d, want 1", n)
	}
	err = f.putNotification(t, s3types.QueueConfiguration{QueueArn: aws.String(blocksARN), Events: []s3types.Event{"s3:ObjectCreated:*"}})
	wantError(t, "configuration with an unreachable queue", err, "InvalidArgument", 400)
	if got, _ := f.c.GetBucketNotificationConfiguration(ctx, &s3.GetBucketNotificationConfigurationInput{Bucket: aws.String(f.bucket)}); len(got.QueueConfigurations) != 2 {
		t.Fatalf("configuration changed by a failed put: %+v", got.QueueConfigurations)
	}
	q.fail = nil
}

func TestNotificationConfigurationValidation(t *testing.T) {
	t.Parallel()
	q := &sink{}
	f := newFixture(t, mems3.Options{Notify: q.notify}, false)
	created := []s3types.Event{"s3:ObjectCreated:*"}
	cases := []struct {
		name string
		qs   []s3types.QueueConfiguration
		ok   bool
	}{
		{"overlapping prefixes", []s3types.QueueConfiguration{
			{QueueArn: aws.String(blocksARN), Events: created, Filter: prefixRule("a/")},
			{QueueArn: aws.String(removalsARN), Events: []s3types.Event{"s3:ObjectCreated:Put"}, Filter: prefixRule("a/b")},
		}, false},
		{"disjoint suffixes", []s3types.QueueConfiguration{
			{QueueArn: aws.String(blocksARN), Events: created, Filter: suffixRule(".json")},
			{QueueArn: aws.String(removalsARN), Events: created, Filter: suffixRule(".bin")},
		}, true},
		{"different event types", []s3types.QueueConfiguration{
			{QueueArn: aws.String(blocksARN), Events: created},
			{QueueArn: aws.String(blocksARN), Events: []s3types.Event{"s3:ObjectRemoved:*"}},
		}, true},
		{"unknown event", []s3types.QueueConfiguration{{QueueArn: aws.String(blocksARN), Events: []s3types.Event{"s3:ObjectCreated:Nope"}}}, false},
		{"bad ARN", []s3types.QueueConfiguration{{QueueArn: aws.String("blocks"), Events: created}}, false},
	}
	for _, c := range cases {
		err := f.putNotification(t, c.qs...)
		if c.ok && err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !c.ok {
			wantError(t, c.name, err, "InvalidArgument", 400)
		}
	}
}

// Events reach Notify in commit order, and a write is answered only after
// its events were delivered, also when writers race.
func TestNotificationCommitOrder(t *testing.T) {
	t.Parallel()
	q := &sink{}
	f := newFixture(t, mems3.Options{Notify: q.notify}, true)
	if err := f.putNotification(t, s3types.QueueConfiguration{QueueArn: aws.String(blocksARN), Events: []s3types.Event{"s3:ObjectCreated:*"}}); err != nil {
		t.Fatal(err)
	}
	q.take()
	delivered := func(vid string) bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, m := range q.msgs {
			if strings.Contains(string(m.body), `"versionId":"`+vid+`"`) {
				return true
			}
		}
		return false
	}
	const writers, writes, keys = 16, 8, 3
	var wg sync.WaitGroup
	errs := make(chan error, writers*writes)
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				key := fmt.Sprintf("k%d", (w+i)%keys)
				out, err := f.tryPut(t.Context(), key, fmt.Sprintf("%d/%d", w, i))
				if err != nil {
					errs <- err
					return
				}
				if !delivered(aws.ToString(out.VersionId)) {
					errs <- fmt.Errorf("PutObject %s answered before its event was delivered", aws.ToString(out.VersionId))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recs := records(t, q.take())
	if len(recs) != writers*writes {
		t.Fatalf("%d events for %d writes", len(recs), writers*writes)
	}
	perKey := map[string][]string{}
	for i, r := range recs {
		if i > 0 && r.S3.Object.Sequencer <= recs[i-1].S3.Object.Sequencer {
			t.Fatalf("sequencer %s delivered after %s", r.S3.Object.Sequencer, recs[i-1].S3.Object.Sequencer)
		}
		perKey[r.S3.Object.Key] = append(perKey[r.S3.Object.Key], r.S3.Object.VersionID)
	}
	for key, delivered := range perKey {
		vs, err := f.c.ListObjectVersions(t.Context(), &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket), Prefix: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		var committed []string
		for _, v := range slices.Backward(vs.Versions) {
			committed = append(committed, aws.ToString(v.VersionId))
		}
		if !slices.Equal(delivered, committed) {
			t.Fatalf("%s: events in order %v, versions committed in order %v", key, delivered, committed)
		}
	}
}
