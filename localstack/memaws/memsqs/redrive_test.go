package memsqs_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func TestRedrive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fifo  bool
		count string // maxReceiveCount as the policy writes it
	}{
		{"standard, count as a string", false, `"2"`},
		{"FIFO, count as a number", true, `2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			suffix, attrs := "", map[string]string{}
			if tc.fifo {
				suffix, attrs = ".fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
			}
			dlq := e.createQueue("jobs-dlq"+suffix, attrs)
			dlqARN := e.attributes(dlq, types.QueueAttributeNameQueueArn)["QueueArn"]
			policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%s}`, dlqARN, tc.count)
			withPolicy := map[string]string{"RedrivePolicy": policy, "VisibilityTimeout": "10"}
			for k, v := range attrs {
				withPolicy[k] = v
			}
			src := e.createQueue("jobs"+suffix, withPolicy)
			if got := e.attributes(src, types.QueueAttributeNameRedrivePolicy)["RedrivePolicy"]; got != policy {
				t.Errorf("RedrivePolicy = %s, want %s", got, policy)
			}

			in := &sqs.SendMessageInput{QueueUrl: aws.String(src), MessageBody: aws.String("poison"),
				MessageAttributes: map[string]types.MessageAttributeValue{"tenant": strAttr("String", "b")}}
			if tc.fifo {
				in.MessageGroupId = aws.String("g")
			}
			sent, err := e.c.SendMessage(e.ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			e.advance(time.Minute)
			for i := 1; i <= 2; i++ {
				got := e.receive(src, 1)
				if len(got) != 1 || got[0].Attributes["ApproximateReceiveCount"] != fmt.Sprint(i) {
					t.Fatalf("receive %d: %+v", i, got)
				}
				e.advance(10 * time.Second)
			}
			// The third receive would exceed maxReceiveCount: the message
			// moves to the dead-letter queue instead.
			if got := e.receive(src, 1); len(got) != 0 {
				t.Fatalf("receive 3 from the source returned %v", bodies(got))
			}
			if n := e.attributes(src, types.QueueAttributeNameAll); n["ApproximateNumberOfMessages"] != "0" || n["ApproximateNumberOfMessagesNotVisible"] != "0" {
				t.Fatalf("source still holds messages: %v", n)
			}
			got := e.receive(dlq, 1)
			if len(got) != 1 {
				t.Fatal("nothing on the dead-letter queue")
			}
			m := got[0]
			if aws.ToString(m.Body) != "poison" || aws.ToString(m.MessageId) != aws.ToString(sent.MessageId) ||
				aws.ToString(m.MessageAttributes["tenant"].StringValue) != "b" || aws.ToString(m.MD5OfMessageAttributes) != aws.ToString(sent.MD5OfMessageAttributes) {
				t.Errorf("dead-lettered message: %+v", m)
			}
			a := m.Attributes
			if a["ApproximateReceiveCount"] != "1" {
				t.Errorf("receive count on the DLQ = %s, want it restarted", a["ApproximateReceiveCount"])
			}
			if a["SentTimestamp"] != "1795867200000" {
				t.Errorf("SentTimestamp = %s, want the original send's", a["SentTimestamp"])
			}
			if srcARN := e.attributes(src, types.QueueAttributeNameQueueArn)["QueueArn"]; a["DeadLetterQueueSourceArn"] != srcARN {
				t.Errorf("DeadLetterQueueSourceArn = %s, want %s", a["DeadLetterQueueSourceArn"], srcARN)
			}
			if tc.fifo && a["MessageGroupId"] != "g" {
				t.Errorf("MessageGroupId = %s, want g", a["MessageGroupId"])
			}

			sources, err := e.c.ListDeadLetterSourceQueues(e.ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(dlq)})
			if err != nil || len(sources.QueueUrls) != 1 || sources.QueueUrls[0] != src {
				t.Errorf("ListDeadLetterSourceQueues = %v, %v", sources, err)
			}
		})
	}
}

func TestRedrivePolicyValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stdDLQ := e.createQueue("dlq", nil)
	fifoDLQ := e.fifoQueue("dlq.fifo", nil)
	arn := func(url string) string { return e.attributes(url, types.QueueAttributeNameQueueArn)["QueueArn"] }
	policy := func(target string, count any) string {
		b, _ := json.Marshal(map[string]any{"deadLetterTargetArn": target, "maxReceiveCount": count})
		return string(b)
	}
	tests := []struct {
		name   string
		fifo   bool
		policy string
		ok     bool
	}{
		{"standard to standard", false, policy(arn(stdDLQ), 3), true},
		{"standard to FIFO", false, policy(arn(fifoDLQ), 3), false},
		{"FIFO to standard", true, policy(arn(stdDLQ), 3), false},
		{"FIFO to FIFO", true, policy(arn(fifoDLQ), "3"), true},
		{"missing target", false, policy("arn:aws:sqs:us-east-1:000000000000:nope", 3), false},
		{"count 0", false, policy(arn(stdDLQ), 0), false},
		{"count 1001", false, policy(arn(stdDLQ), 1001), false},
		{"not JSON", false, "{", false},
		{"removed", false, "", true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, attrs := fmt.Sprintf("src%d", i), map[string]string{"RedrivePolicy": tc.policy}
			if tc.fifo {
				name += ".fifo"
				attrs["FifoQueue"] = "true"
			}
			_, err := e.c.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
			if tc.ok != (err == nil) {
				t.Fatalf("CreateQueue with RedrivePolicy %s: %v", tc.policy, err)
			}
			if err != nil && errorCode(err) != "InvalidParameterValue" {
				t.Errorf("error code %s, want InvalidParameterValue", errorCode(err))
			}
		})
	}
}
