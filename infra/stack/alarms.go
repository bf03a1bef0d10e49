package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

// addAlarms raises an alarm when any DLQ holds a message (a message there
// has failed maxReceiveCount times and needs `sluice status` and a replay)
// and when a queue's oldest message is older than spec.Queue.AgeAlarm.
// Every alarm notifies one SNS topic; subscribe to it to be told.
func (s *Sluice) addAlarms(r spec.Resources) {
	s.Alarms = awssns.NewTopic(s.Stack, jsii.String("AlarmTopic"), &awssns.TopicProps{
		TopicName: jsii.String(r.Prefix + "-alarms"),
	})
	action := awscloudwatchactions.NewSnsAction(s.Alarms)
	for _, q := range r.Queues {
		id := queueConstructID(q.ID)
		dlq := awscloudwatch.NewAlarm(s.Stack, jsii.String(id+"DLQNotEmpty"), &awscloudwatch.AlarmProps{
			AlarmName:        jsii.String(r.DLQName(q) + "-not-empty"),
			AlarmDescription: jsii.String(fmt.Sprintf("Sluice: messages of %s failed %d times; inspect with `sluice status`", q.ID, q.MaxReceiveCount)),
			Metric: s.DLQs[q.ID].MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
				Statistic: jsii.String("Maximum"),
				Period:    awscdk.Duration_Minutes(jsii.Number(5)),
			}),
			Threshold:          jsii.Number(0),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		dlq.AddAlarmAction(action)
		age := s.ageAlarm(r, q, s.Queues[q.ID])
		age.AddAlarmAction(action)
	}
}

// ageAlarm fires when queue's oldest message is older than q.AgeAlarm().
func (s *Sluice) ageAlarm(r spec.Resources, q spec.Queue, queue awssqs.Queue) awscloudwatch.Alarm {
	limit := q.AgeAlarm()
	return awscloudwatch.NewAlarm(s.Stack, jsii.String(queueConstructID(q.ID)+"OldestMessage"), &awscloudwatch.AlarmProps{
		AlarmName:        jsii.String(r.QueueName(q) + "-oldest-message"),
		AlarmDescription: jsii.String(fmt.Sprintf("Sluice: a message of %s is older than %d minutes (backlog or repeated failures)", q.ID, int(limit.Minutes()))),
		Metric: queue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
			Statistic: jsii.String("Maximum"),
			Period:    awscdk.Duration_Minutes(jsii.Number(5)),
		}),
		Threshold:          jsii.Number(limit.Seconds()),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
}
