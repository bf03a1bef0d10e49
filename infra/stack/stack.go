package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

// Sluice is the built stack and the constructs a caller may want to extend.
type Sluice struct {
	Stack     awscdk.Stack
	Bucket    awss3.IBucket
	Table     awsdynamodb.Table
	Queues    map[spec.QueueID]awssqs.Queue
	DLQs      map[spec.QueueID]awssqs.Queue
	Functions map[spec.FunctionID]awslambda.Function
	Alarms    awssns.Topic
}

// New adds the Sluice stack to scope. stackProps may be nil: the stack is
// then environment-agnostic, so synthesis needs no credentials.
func New(scope constructs.Construct, id string, props Props, stackProps *awscdk.StackProps) (*Sluice, error) {
	props = props.withDefaults()
	if err := props.validate(); err != nil {
		return nil, fmt.Errorf("stack %s: %w", id, err)
	}
	s := &Sluice{
		Stack:     awscdk.NewStack(scope, jsii.String(id), stackProps),
		Queues:    map[spec.QueueID]awssqs.Queue{},
		DLQs:      map[spec.QueueID]awssqs.Queue{},
		Functions: map[spec.FunctionID]awslambda.Function{},
	}
	r := props.Resources
	awscdk.Tags_Of(s.Stack).Add(jsii.String("sluice:deployment"), jsii.String(r.Prefix), nil)

	s.addBucket(props)
	s.addQueues(r)
	s.notifyBlockEvents(props)
	s.addTable(r)
	for _, f := range r.Functions {
		s.addFunction(props, f)
	}
	for _, sc := range spec.Schedules(props.SweepInterval) {
		s.addSchedule(sc)
	}
	s.addAlarms(r)
	s.addMetricAlarms(r, props)
	s.addDashboard(r)
	s.addOutputs(props)
	return s, nil
}

// env is every function's environment: where the resources are and how
// the bucket is laid out. Every function learns every queue URL (a URL is
// not a permission: IAM grants sends per spec.Function.Sends).
func (s *Sluice) env(props Props) map[string]*string {
	e := map[string]*string{
		spec.EnvBucket:    s.Bucket.BucketName(),
		spec.EnvTable:     s.Table.TableName(),
		spec.EnvKeyPrefix: jsii.String(props.KeyPrefix),
		spec.EnvLayout:    jsii.String(props.Layout),
	}
	if props.Tenant != "" {
		e[spec.EnvTenant] = jsii.String(props.Tenant)
	}
	for _, q := range props.Resources.Queues {
		e[spec.QueueURLEnv(q.ID)] = s.Queues[q.ID].QueueUrl()
	}
	for k, v := range props.Resources.JobLimits() {
		e[k] = jsii.String(v)
	}
	for k, v := range props.Env {
		e[k] = jsii.String(v)
	}
	return e
}

func (s *Sluice) addTable(r spec.Resources) {
	s.Table = awsdynamodb.NewTable(s.Stack, jsii.String("State"), &awsdynamodb.TableProps{
		TableName:    jsii.String(r.TableName()),
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(r.Table.PartitionKey), Type: awsdynamodb.AttributeType_STRING},
		SortKey:      &awsdynamodb.Attribute{Name: jsii.String(r.Table.SortKey), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		TimeToLiveAttribute: jsii.String(r.Table.TTLAttribute),
		// The records are the truth about which objects are live: a
		// deleted stack must not take them along.
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
}
