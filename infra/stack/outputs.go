package stack

import (
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// OutputEnv is the key of the output that holds the `sluice` CLI settings:
// space-separated NAME=value pairs, ready for `export`.
const OutputEnv = "SluiceEnv"

// addOutputs names every resource a user or the CLI needs.
func (s *Sluice) addOutputs(props Props) {
	out := func(key, desc string, v *string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(key), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	out("BucketName", "bucket that holds the blocks", s.Bucket.BucketName())
	out("TableName", "DynamoDB table of block, group and partition records", s.Table.TableName())
	out("AlarmTopicArn", "SNS topic every Sluice alarm notifies; subscribe to it", s.Alarms.TopicArn())
	for _, q := range props.Resources.Queues {
		id := queueConstructID(q.ID)
		out(id+"QueueUrl", string(q.ID)+" queue", s.Queues[q.ID].QueueUrl())
		out(id+"DLQUrl", string(q.ID)+" dead-letter queue", s.DLQs[q.ID].QueueUrl())
	}

	env := s.env(props)
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]*string, 0, 2*len(names))
	for i, k := range names {
		sep := " "
		if i == 0 {
			sep = ""
		}
		parts = append(parts, jsii.String(sep+k+"="), env[k])
	}
	out(OutputEnv, "sluice CLI settings: export these", awscdk.Fn_Join(jsii.String(""), &parts))
}
