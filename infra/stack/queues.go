package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

// addQueues creates every queue of the spec with a dead-letter queue of the
// same kind. FIFO queues use explicit deduplication ids (never
// content-based, docs/design.md §4) and high-throughput mode: deduplication and
// throughput per message group.
func (s *Sluice) addQueues(r spec.Resources) {
	for _, q := range r.Queues {
		id := queueConstructID(q.ID)
		dlq := awssqs.NewQueue(s.Stack, jsii.String(id+"DLQ"), queueProps(q, r.DLQName(q)))
		props := queueProps(q, r.QueueName(q))
		props.VisibilityTimeout = awscdk.Duration_Seconds(jsii.Number(q.VisibilityTimeout.Seconds()))
		props.DeadLetterQueue = &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(float64(q.MaxReceiveCount))}
		s.Queues[q.ID] = awssqs.NewQueue(s.Stack, jsii.String(id), props)
		s.DLQs[q.ID] = dlq
	}
}

// queueProps are the properties a queue and its DLQ share.
func queueProps(q spec.Queue, name string) *awssqs.QueueProps {
	p := &awssqs.QueueProps{
		QueueName:       jsii.String(name),
		RetentionPeriod: awscdk.Duration_Seconds(jsii.Number(q.Retention.Seconds())),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
	}
	if q.FIFO {
		p.Fifo = jsii.Bool(true)
		p.ContentBasedDeduplication = jsii.Bool(false)
		p.DeduplicationScope = awssqs.DeduplicationScope_MESSAGE_GROUP
		p.FifoThroughputLimit = awssqs.FifoThroughputLimit_PER_MESSAGE_GROUP_ID
	}
	return p
}

// queueConstructID turns "compaction-jobs" into "CompactionJobs".
func queueConstructID(id spec.QueueID) string { return camel(string(id)) }

func camel(s string) string {
	out := make([]byte, 0, len(s))
	up := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '.' || c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}
