package stack

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

// addFunction creates function f with a role of its own that holds exactly
// spec.Permissions(f), its log group, and an event source on every queue
// that f consumes.
func (s *Sluice) addFunction(props Props, f spec.Function) {
	r := props.Resources
	id := camel(string(f.ID))
	name := r.FunctionName(f)
	logs := awslogs.NewLogGroup(s.Stack, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		LogGroupName: jsii.String("/aws/lambda/" + name),
		Retention:    retentions[props.LogRetentionDays],
		// Logs are diagnostics, not data; a retained group of the same
		// name would make the next deploy of the stack fail.
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	role := awsiam.NewRole(s.Stack, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Sluice " + string(f.ID) + ": least privilege, see shared/spec/permissions.go"),
	})
	for _, st := range s.statements(props, f, logs) {
		role.AddToPrincipalPolicy(st)
	}
	fn := awslambda.NewFunction(s.Stack, jsii.String(id), &awslambda.FunctionProps{
		FunctionName:         jsii.String(name),
		Description:          jsii.String("Sluice " + string(f.ID)),
		Runtime:              awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:         awslambda.Architecture_ARM_64(),
		Handler:              jsii.String("bootstrap"),
		Code:                 props.Code(f.ID),
		MemorySize:           jsii.Number(float64(f.MemoryMB)),
		Timeout:              awscdk.Duration_Seconds(jsii.Number(f.Timeout.Seconds())),
		EphemeralStorageSize: awscdk.Size_Mebibytes(jsii.Number(float64(f.EphemeralMB))),
		Environment:          ptr(s.functionEnv(props, f)),
		Role:                 role,
		LogGroup:             logs,
		// The pipeline is a loop by design: planner → compact → cleaner →
		// uploader → S3 event → planner for the next level, and the cleaner
		// re-notifies itself until a group is retired. Lambda's loop
		// detection would drop such chains after 16 hops; DLQs, receive
		// counts and generation checks bound them instead.
		RecursiveLoop: awslambda.RecursiveLoop_ALLOW,
	})
	for _, q := range r.Queues {
		if q.Consumer != f.ID {
			continue
		}
		src := &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(float64(q.BatchSize)),
			MaxConcurrency:          jsii.Number(float64(q.MaxConcurrency)),
			ReportBatchItemFailures: jsii.Bool(true),
		}
		if q.BatchingWindow > 0 {
			src.MaxBatchingWindow = awscdk.Duration_Seconds(jsii.Number(q.BatchingWindow.Seconds()))
		}
		fn.AddEventSource(awslambdaeventsources.NewSqsEventSource(s.Queues[q.ID], src))
	}
	s.Functions[f.ID] = fn
}

// functionEnv is f's environment: the stack's, and the Go runtime's soft
// memory limit from f's memory.
func (s *Sluice) functionEnv(props Props, f spec.Function) map[string]*string {
	e := s.env(props)
	e[spec.EnvGoMemLimit] = jsii.String(f.GoMemLimit())
	return e
}

// statements are f's IAM statements besides consuming its queue (which the
// event source grants): S3 and DynamoDB per spec.Permissions, sends per
// spec.Function.Sends, and writing its own log group.
func (s *Sluice) statements(props Props, f spec.Function, logs awslogs.LogGroup) []awsiam.PolicyStatement {
	perm := props.Resources.Permissions(f.ID)
	var out []awsiam.PolicyStatement
	// IAM refuses a policy whose statement ids repeat ("Statement IDs
	// (SID) in a single policy must be unique"), and two grants may allow
	// the same actions (the uploader reads block objects and the bucket
	// index): the second is numbered by its grant.
	based := map[string]bool{}
	s3Sid := func(g spec.S3Grant, i int) string {
		sid := s3Sid(g, i)
		if based[sid] {
			sid = fmt.Sprintf("%s%d", sid, i)
		}
		based[sid] = true
		return sid
	}
	for i, g := range perm.S3 {
		var objects []*string
		for _, o := range g.Objects {
			objects = append(objects, s.Bucket.ArnForObjects(jsii.String(props.KeyPrefix+string(o))))
		}
		if g.Conditional && slices.Equal(g.Actions, []string{"s3:PutObject"}) {
			// The bucket index: created with If-None-Match, or replacing
			// the version read with If-Match; never a blind overwrite.
			sid := s3Sid(g, i)
			out = append(out,
				allow(sid+"IfNoneMatch", g.Actions, objects, map[string]any{"Null": map[string]any{"s3:if-none-match": "false"}}),
				allow(sid+"IfMatch", g.Actions, objects, map[string]any{"Null": map[string]any{"s3:if-match": "false"}}))
			continue
		}
		if !g.OnlyIfNoneMatch || !slices.Contains(g.Actions, "s3:PutObject") {
			out = append(out, allow(s3Sid(g, i), g.Actions, objects, nil))
			continue
		}
		// AWS's pattern for enforcing conditional writes: PutObject (and
		// CompleteMultipartUpload) only with If-None-Match; the multipart
		// steps that take no conditional header by ObjectCreationOperation.
		sid := s3Sid(g, i)
		out = append(out,
			allow(sid+"IfNoneMatch", []string{"s3:PutObject"}, objects, map[string]any{"Null": map[string]any{"s3:if-none-match": "false"}}),
			allow(sid+"MultipartParts", []string{"s3:PutObject"}, objects, map[string]any{"Bool": map[string]any{"s3:ObjectCreationOperation": "false"}}))
		var rest []string
		for _, a := range g.Actions {
			if a != "s3:PutObject" {
				rest = append(rest, a)
			}
		}
		if len(rest) > 0 {
			out = append(out, allow(sid+"Multipart", rest, objects, nil))
		}
	}
	if len(perm.S3List) > 0 {
		out = append(out, allow("S3ListUnderPrefix", perm.S3List, []*string{s.Bucket.BucketArn()},
			map[string]any{"StringLike": map[string]any{"s3:prefix": []string{props.KeyPrefix + "*"}}}))
	}
	out = append(out, allow("DynamoDBItems", perm.DynamoDB, []*string{s.Table.TableArn()}, nil))
	if len(f.Sends) > 0 {
		var queues []*string
		for _, q := range f.Sends {
			queues = append(queues, s.Queues[q].QueueArn())
		}
		out = append(out, allow("SendToQueues", []string{"sqs:SendMessage"}, queues, nil))
	}
	out = append(out, allow("WriteOwnLogs", []string{"logs:CreateLogStream", "logs:PutLogEvents"},
		[]*string{logs.LogGroupArn()}, nil))
	return out
}

func allow(sid string, actions []string, resources []*string, conditions map[string]any) awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(sid),
		Effect:     awsiam.Effect_ALLOW,
		Actions:    jsii.Strings(actions...),
		Resources:  &resources,
		Conditions: &conditions,
	})
}

// s3Sid names an S3 grant by what it allows.
func s3Sid(g spec.S3Grant, i int) string {
	switch {
	case slices.Contains(g.Actions, "s3:DeleteObjectVersion"):
		return "S3DeleteBlockObjects"
	case slices.Contains(g.Actions, "s3:PutObject"):
		return "S3WriteObjects"
	case slices.Equal(g.Actions, spec.S3Read):
		return "S3ReadBlockObjects"
	}
	return fmt.Sprintf("S3Objects%d", i)
}

// addSchedule invokes the cleaner every sc.Interval with sc.Event as its
// payload: the sweep, retention, the bucket index and the metrics pass
// each run on a schedule of their own, not only when something compacts.
// A missed invocation is made up by the next one.
func (s *Sluice) addSchedule(sc spec.Schedule) {
	var payload map[string]any
	if err := json.Unmarshal([]byte(sc.Event), &payload); err != nil {
		panic(fmt.Sprintf("schedule %s: event %s: %v", sc.Name, sc.Event, err))
	}
	minutes := sc.Interval.Minutes()
	target := awseventstargets.NewLambdaFunction(s.Functions[spec.Cleaner], &awseventstargets.LambdaFunctionProps{
		Event:         awsevents.RuleTargetInput_FromObject(payload),
		RetryAttempts: jsii.Number(2),
		MaxEventAge:   awscdk.Duration_Minutes(jsii.Number(minutes)),
	})
	awsevents.NewRule(s.Stack, jsii.String(sc.Name), &awsevents.RuleProps{
		Description: jsii.String(sc.Why + ": " + sc.Event),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(minutes))),
		Targets:     &[]awsevents.IRuleTarget{target},
	})
}

func ptr[T any](v T) *T { return &v }
