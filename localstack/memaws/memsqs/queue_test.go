package memsqs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func TestCreateQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("jobs", map[string]string{"VisibilityTimeout": "60"})
	if want := "http://sqs.memaws.local/000000000000/jobs"; url != want {
		t.Fatalf("QueueUrl = %s, want %s", url, want)
	}
	e.fifoQueue("ordered.fifo", nil)

	tests := []struct {
		name  string
		queue string
		attrs map[string]string
		code  string // "" for success
		check func(error) bool
	}{
		{"same attributes: the existing queue", "jobs", map[string]string{"VisibilityTimeout": "60"}, "", nil},
		{"attributes left out are not compared", "jobs", nil, "", nil},
		{"a default named explicitly that the queue has", "jobs", map[string]string{"DelaySeconds": "0"}, "", nil},
		{"different attribute", "jobs", map[string]string{"VisibilityTimeout": "30"}, "QueueAlreadyExists", isType[*types.QueueNameExists]},
		{"FIFO name without FifoQueue", "plain.fifo", nil, "InvalidParameterValue", nil},
		{"FifoQueue without .fifo", "plain", map[string]string{"FifoQueue": "true"}, "InvalidParameterValue", nil},
		{"bad characters", "a b", nil, "InvalidParameterValue", nil},
		{"name too long", strings.Repeat("q", 81), nil, "InvalidParameterValue", nil},
		{"FIFO attribute on a standard queue", "std", map[string]string{"ContentBasedDeduplication": "true"}, "InvalidAttributeName", isType[*types.InvalidAttributeName]},
		{"unknown attribute", "std", map[string]string{"Colour": "blue"}, "InvalidAttributeName", isType[*types.InvalidAttributeName]},
		{"read-only attribute", "std", map[string]string{"QueueArn": "arn:x"}, "InvalidAttributeName", nil},
		{"visibility out of range", "std", map[string]string{"VisibilityTimeout": "43201"}, "InvalidAttributeValue", isType[*types.InvalidAttributeValue]},
		{"retention out of range", "std", map[string]string{"MessageRetentionPeriod": "59"}, "InvalidAttributeValue", nil},
		{"not a number", "std", map[string]string{"DelaySeconds": "soon"}, "InvalidAttributeValue", nil},
		{"high throughput needs group scope", "ht.fifo", map[string]string{"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId", "DeduplicationScope": "queue"}, "InvalidAttributeValue", nil},
		{"high throughput", "ht.fifo", map[string]string{"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId", "DeduplicationScope": "messageGroup"}, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(tc.queue), Attributes: tc.attrs})
			if tc.code == "" {
				if err != nil {
					t.Fatalf("CreateQueue: %v", err)
				}
				if !strings.HasSuffix(aws.ToString(out.QueueUrl), "/"+tc.queue) {
					t.Fatalf("QueueUrl = %s", aws.ToString(out.QueueUrl))
				}
				return
			}
			if got := errorCode(err); got != tc.code {
				t.Fatalf("CreateQueue error %v: code %q, want %q", err, got, tc.code)
			}
			if tc.check != nil && !tc.check(err) {
				t.Fatalf("CreateQueue error %v (%T) is not of the SDK's typed error", err, err)
			}
		})
	}
}

func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, n := range []string{"b-events", "a-jobs", "a-jobs-dlq", "c.fifo"} {
		attrs := map[string]string{}
		if strings.HasSuffix(n, ".fifo") {
			attrs["FifoQueue"] = "true"
		}
		e.createQueue(n, attrs)
	}

	got, err := e.c.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("a-jobs")})
	if err != nil || aws.ToString(got.QueueUrl) != "http://sqs.memaws.local/000000000000/a-jobs" {
		t.Fatalf("GetQueueUrl = %v, %v", got, err)
	}
	_, err = e.c.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
	if !isType[*types.QueueDoesNotExist](err) || errorCode(err) != "AWS.SimpleQueueService.NonExistentQueue" {
		t.Fatalf("GetQueueUrl of a missing queue: %v (%s), want QueueDoesNotExist", err, errorCode(err))
	}

	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a-jobs", "a-jobs-dlq", "b-events", "c.fifo"}},
		{"a-", []string{"a-jobs", "a-jobs-dlq"}},
		{"z", nil},
	} {
		out, err := e.c.ListQueues(e.ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(tc.prefix)})
		if err != nil {
			t.Fatalf("ListQueues %q: %v", tc.prefix, err)
		}
		var names []string
		for _, u := range out.QueueUrls {
			names = append(names, u[strings.LastIndex(u, "/")+1:])
		}
		if strings.Join(names, ",") != strings.Join(tc.want, ",") {
			t.Errorf("ListQueues %q = %v, want %v", tc.prefix, names, tc.want)
		}
	}
	// Pages.
	var paged []string
	p := sqs.NewListQueuesPaginator(e.c, &sqs.ListQueuesInput{MaxResults: aws.Int32(3)})
	for p.HasMorePages() {
		out, err := p.NextPage(e.ctx)
		if err != nil {
			t.Fatalf("ListQueues page: %v", err)
		}
		paged = append(paged, out.QueueUrls...)
	}
	if len(paged) != 4 {
		t.Errorf("paged ListQueues gave %d URLs, want 4: %v", len(paged), paged)
	}

	url := "http://sqs.memaws.local/000000000000/b-events"
	e.send(url, "x")
	if _, err := e.c.DeleteQueue(e.ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if _, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("y")}); !isType[*types.QueueDoesNotExist](err) {
		t.Fatalf("send to a deleted queue: %v, want QueueDoesNotExist", err)
	}
	_, err = e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("b-events")})
	if !isType[*types.QueueDeletedRecently](err) {
		t.Fatalf("recreate at once: %v, want QueueDeletedRecently", err)
	}
	e.advance(61 * time.Second)
	e.createQueue("b-events", nil)
	if n := e.attributes(url, types.QueueAttributeNameApproximateNumberOfMessages)["ApproximateNumberOfMessages"]; n != "0" {
		t.Fatalf("the new incarnation has %s messages", n)
	}
}

func TestQueueAttributes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	std := e.createQueue("std", map[string]string{"DelaySeconds": "0", "VisibilityTimeout": "45"})
	fifo := e.fifoQueue("f.fifo", map[string]string{"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"})

	a := e.attributes(std, types.QueueAttributeNameAll)
	for k, want := range map[string]string{
		"QueueArn":                              "arn:aws:sqs:us-east-1:000000000000:std",
		"VisibilityTimeout":                     "45",
		"MessageRetentionPeriod":                "345600",
		"DelaySeconds":                          "0",
		"ReceiveMessageWaitTimeSeconds":         "0",
		"MaximumMessageSize":                    "262144",
		"ApproximateNumberOfMessages":           "0",
		"ApproximateNumberOfMessagesNotVisible": "0",
		"ApproximateNumberOfMessagesDelayed":    "0",
		"CreatedTimestamp":                      "1795867200",
		"LastModifiedTimestamp":                 "1795867200",
	} {
		if a[k] != want {
			t.Errorf("standard %s = %q, want %q", k, a[k], want)
		}
	}
	for _, k := range []string{"FifoQueue", "ContentBasedDeduplication", "RedrivePolicy", "Policy"} {
		if v, ok := a[k]; ok {
			t.Errorf("standard queue has %s = %q", k, v)
		}
	}
	f := e.attributes(fifo, types.QueueAttributeNameAll)
	for k, want := range map[string]string{
		"FifoQueue": "true", "ContentBasedDeduplication": "true",
		"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId",
	} {
		if f[k] != want {
			t.Errorf("FIFO %s = %q, want %q", k, f[k], want)
		}
	}
	// A FIFO attribute named on a standard queue is just absent (Sluice's
	// runner asks for FifoQueue on every queue).
	if v, ok := e.attributes(std, types.QueueAttributeNameFifoQueue)["FifoQueue"]; ok {
		t.Errorf("standard FifoQueue = %q", v)
	}
	if _, err := e.c.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(std),
		AttributeNames: []types.QueueAttributeName{"Colour"}}); !isType[*types.InvalidAttributeName](err) {
		t.Errorf("unknown attribute: %v, want InvalidAttributeName", err)
	}

	// Counts: visible, in flight, delayed.
	e.send(std, "visible")
	e.send(std, "in flight")
	if _, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(std), MessageBody: aws.String("delayed"), DelaySeconds: 60}); err != nil {
		t.Fatal(err)
	}
	e.receive(std, 1)
	a = e.attributes(std, types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed)
	if a["ApproximateNumberOfMessages"] != "1" || a["ApproximateNumberOfMessagesNotVisible"] != "1" || a["ApproximateNumberOfMessagesDelayed"] != "1" {
		t.Errorf("counts = %v, want 1 visible, 1 in flight, 1 delayed", a)
	}

	e.advance(10 * time.Second)
	if _, err := e.c.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(std),
		Attributes: map[string]string{"VisibilityTimeout": "120", "Policy": `{"Version":"2012-10-17"}`}}); err != nil {
		t.Fatalf("SetQueueAttributes: %v", err)
	}
	a = e.attributes(std, types.QueueAttributeNameAll)
	if a["VisibilityTimeout"] != "120" || a["Policy"] != `{"Version":"2012-10-17"}` || a["LastModifiedTimestamp"] != "1795867210" {
		t.Errorf("after SetQueueAttributes: %v", a)
	}
	for _, bad := range []map[string]string{
		{"FifoQueue": "true"},
		{"ContentBasedDeduplication": "true"},
		{"ReceiveMessageWaitTimeSeconds": "21"},
		{"Policy": "{not json"},
	} {
		if _, err := e.c.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(std), Attributes: bad}); err == nil {
			t.Errorf("SetQueueAttributes %v succeeded", bad)
		}
	}
}

func TestPurgeAndRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("q", map[string]string{"MessageRetentionPeriod": "60"})
	e.send(url, "a")
	e.send(url, "b")
	e.receive(url, 1)
	if _, err := e.c.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatalf("PurgeQueue: %v", err)
	}
	if got := e.receive(url, 10); len(got) != 0 {
		t.Fatalf("after purge: received %v", bodies(got))
	}
	if _, err := e.c.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); !isType[*types.PurgeQueueInProgress](err) {
		t.Fatalf("second purge within 60 s: %v, want PurgeQueueInProgress", err)
	}

	// Retention: 60 s after the send, in flight or not, the message is gone.
	e.send(url, "old")
	e.advance(30 * time.Second)
	e.send(url, "young")
	if got := e.receive(url, 1); len(got) != 1 || aws.ToString(got[0].Body) != "old" {
		t.Fatalf("received %v, want old", bodies(got))
	}
	e.advance(30 * time.Second)
	a := e.attributes(url, types.QueueAttributeNameAll)
	if a["ApproximateNumberOfMessages"] != "1" || a["ApproximateNumberOfMessagesNotVisible"] != "0" {
		t.Fatalf("after 60 s: %v, want only young left", a)
	}
	e.advance(30 * time.Second)
	if got := e.receive(url, 10); len(got) != 0 {
		t.Fatalf("after 90 s: received %v", bodies(got))
	}
}

func TestTags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("t"), Tags: map[string]string{"team": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	url := out.QueueUrl
	if _, err := e.c.TagQueue(e.ctx, &sqs.TagQueueInput{QueueUrl: url, Tags: map[string]string{"env": "test"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.UntagQueue(e.ctx, &sqs.UntagQueueInput{QueueUrl: url, TagKeys: []string{"team"}}); err != nil {
		t.Fatal(err)
	}
	tags, err := e.c.ListQueueTags(e.ctx, &sqs.ListQueueTagsInput{QueueUrl: url})
	if err != nil || len(tags.Tags) != 1 || tags.Tags["env"] != "test" {
		t.Fatalf("ListQueueTags = %v, %v", tags, err)
	}
}
