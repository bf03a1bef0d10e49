package stack

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

type obj = map[string]any
type arr = []any

// like matches an object that has at least o's keys; inside arrays the
// assertions library otherwise compares objects exactly.
func like(o obj) assertions.Matcher { return assertions.Match_ObjectLike(&o) }

func TestCreatedBucketIsVersionedPrivateEncryptedRetainedAndTLSOnly(t *testing.T) {
	d := synth(t, "created")
	check(t, "bucket", func() {
		d.tmpl.ResourceCountIs(jsii.String("AWS::S3::Bucket"), jsii.Number(1))
		d.tmpl.HasResource(jsii.String("AWS::S3::Bucket"), obj{
			"DeletionPolicy":      "Retain",
			"UpdateReplacePolicy": "Retain",
			"Properties": obj{
				"VersioningConfiguration": obj{"Status": "Enabled"},
				"BucketEncryption": obj{"ServerSideEncryptionConfiguration": arr{
					obj{"ServerSideEncryptionByDefault": obj{"SSEAlgorithm": "AES256"}},
				}},
				"PublicAccessBlockConfiguration": obj{
					"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
				},
				"OwnershipControls": obj{"Rules": arr{obj{"ObjectOwnership": "BucketOwnerEnforced"}}},
				"LifecycleConfiguration": obj{"Rules": assertions.Match_ArrayWith(&arr{
					like(obj{"Status": "Enabled", "AbortIncompleteMultipartUpload": obj{"DaysAfterInitiation": 3}}),
					like(obj{"Status": "Enabled", "NoncurrentVersionExpiration": obj{"NoncurrentDays": 45}}),
				})},
			},
		})
	})
	bucket := d.cfn.ofType("AWS::S3::Bucket")[0]
	if got := render(d.cfn.Resources[bucket].Properties["BucketName"]); got != "sluice-blocks-${AWS::AccountId}-${AWS::Region}" {
		t.Errorf("bucket name %q: want the spec's name made unique by account and region", got)
	}
	check(t, "TLS-only bucket policy", func() {
		d.tmpl.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), obj{
			"Bucket": ref(bucket),
			"PolicyDocument": obj{"Statement": assertions.Match_ArrayWith(&arr{like(obj{
				"Effect":    "Deny",
				"Action":    "s3:*",
				"Principal": obj{"AWS": "*"},
				"Condition": obj{"Bool": obj{"aws:SecureTransport": "false"}},
			})})},
		})
	})
}

func TestImportedBucketIsNotCreatedButStillNotifies(t *testing.T) {
	d := synth(t, "imported")
	check(t, "no bucket of our own", func() {
		d.tmpl.ResourceCountIs(jsii.String("AWS::S3::Bucket"), jsii.Number(0))
		d.tmpl.ResourceCountIs(jsii.String("AWS::S3::BucketPolicy"), jsii.Number(0))
	})
	check(t, "unmanaged notification merges into the bucket's configuration", func() {
		d.tmpl.HasResourceProperties(jsii.String("Custom::S3BucketNotifications"), obj{
			"BucketName": "existing-bucket",
			"Managed":    false,
		})
	})
}

func TestMetaJSONUnderThePrefixNotifiesBlockEvents(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		blockEvents := d.queueID(t, d.props.Resources.Queue(spec.BlockEvents))
		var configs arr
		for _, suffix := range []string{"meta.json", "-mark.json"} {
			rules := arr{obj{"Name": "suffix", "Value": suffix}}
			if d.props.KeyPrefix != "" {
				rules = append(rules, obj{"Name": "prefix", "Value": d.props.KeyPrefix})
			}
			configs = append(configs, obj{
				"Events":   arr{"s3:ObjectCreated:*"},
				"Filter":   obj{"Key": obj{"FilterRules": rules}},
				"QueueArn": getAtt(blockEvents, "Arn"),
			})
		}
		check(t, "notifications: meta.json and the marks", func() {
			d.tmpl.ResourceCountIs(jsii.String("Custom::S3BucketNotifications"), jsii.Number(1))
			d.tmpl.HasResourceProperties(jsii.String("Custom::S3BucketNotifications"), obj{
				"NotificationConfiguration": obj{"QueueConfigurations": configs},
			})
		})
		check(t, "S3 may send to block-events, from this bucket only", func() {
			d.tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), obj{
				"Queues": arr{ref(blockEvents)},
				"PolicyDocument": obj{"Statement": assertions.Match_ArrayWith(&arr{like(obj{
					"Effect":    "Allow",
					"Principal": obj{"Service": "s3.amazonaws.com"},
					"Action":    assertions.Match_ArrayWith(&arr{"sqs:SendMessage"}),
					"Condition": obj{"ArnLike": obj{"aws:SourceArn": assertions.Match_AnyValue()}},
				})})},
			})
		})
		if d.props.KeyPrefix != "prom/" && d.name == "imported" {
			t.Errorf("prefix %q: want prom/ (normalised)", d.props.KeyPrefix)
		}
	})
}

func TestQueuesAndDLQsFollowTheSpec(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		r := d.props.Resources
		check(t, "queue count", func() {
			d.tmpl.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(float64(2*len(r.Queues))))
		})
		for _, q := range r.Queues {
			dlq := d.dlqID(t, q)
			kind := obj{"FifoQueue": assertions.Match_Absent()}
			if q.FIFO {
				kind = obj{
					"FifoQueue":                 true,
					"ContentBasedDeduplication": false,
					"DeduplicationScope":        "messageGroup",
					"FifoThroughputLimit":       "perMessageGroupId",
				}
			}
			main := obj{
				"QueueName":              r.QueueName(q),
				"VisibilityTimeout":      q.VisibilityTimeout.Seconds(),
				"MessageRetentionPeriod": q.Retention.Seconds(),
				"SqsManagedSseEnabled":   true,
				"RedrivePolicy":          obj{"deadLetterTargetArn": getAtt(dlq, "Arn"), "maxReceiveCount": q.MaxReceiveCount},
			}
			dead := obj{
				"QueueName":              r.DLQName(q),
				"MessageRetentionPeriod": q.Retention.Seconds(),
				"SqsManagedSseEnabled":   true,
				"RedrivePolicy":          assertions.Match_Absent(),
			}
			for k, v := range kind {
				main[k], dead[k] = v, v
			}
			check(t, string(q.ID), func() { d.tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), main) })
			check(t, string(q.ID)+" DLQ of the same kind", func() { d.tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), dead) })

			// The AWS rules, checked on the template itself rather than
			// on the spec's arithmetic.
			p := d.cfn.Resources[d.queueID(t, q)].Properties
			vis, _ := p["VisibilityTimeout"].(float64)
			if want := 6 * r.Function(q.Consumer).Timeout.Seconds(); vis < want {
				t.Errorf("%s: visibility %vs < 6 × %s timeout = %vs", q.ID, vis, q.Consumer, want)
			}
			redrive, _ := p["RedrivePolicy"].(map[string]any)
			if n, _ := redrive["maxReceiveCount"].(float64); n < 5 {
				t.Errorf("%s: maxReceiveCount %v < 5", q.ID, n)
			}
			if q.FIFO != strings.HasSuffix(render(p["QueueName"]), ".fifo") {
				t.Errorf("%s: name %v and FIFO=%v disagree", q.ID, p["QueueName"], q.FIFO)
			}
		}
		// Every queue refuses plain HTTP.
		for _, id := range d.cfn.ofType("AWS::SQS::Queue") {
			check(t, id+" TLS only", func() {
				d.tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), obj{
					"Queues": arr{ref(id)},
					"PolicyDocument": obj{"Statement": assertions.Match_ArrayWith(&arr{like(obj{
						"Effect": "Deny", "Action": "sqs:*",
						"Condition": obj{"Bool": obj{"aws:SecureTransport": "false"}},
					})})},
				})
			})
		}
	})
}

func TestTableIsOnDemandWithPITRAndTTLAndRetained(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		tb := d.props.Resources.Table
		check(t, "table", func() {
			d.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(1))
			d.tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), obj{
				"DeletionPolicy":      "Retain",
				"UpdateReplacePolicy": "Retain",
				"Properties": obj{
					"TableName":   d.props.Resources.TableName(),
					"BillingMode": "PAY_PER_REQUEST",
					"KeySchema": arr{
						obj{"AttributeName": tb.PartitionKey, "KeyType": "HASH"},
						obj{"AttributeName": tb.SortKey, "KeyType": "RANGE"},
					},
					"AttributeDefinitions": arr{
						obj{"AttributeName": tb.PartitionKey, "AttributeType": "S"},
						obj{"AttributeName": tb.SortKey, "AttributeType": "S"},
					},
					"PointInTimeRecoverySpecification": obj{"PointInTimeRecoveryEnabled": true},
					"TimeToLiveSpecification":          obj{"AttributeName": tb.TTLAttribute, "Enabled": true},
				},
			})
		})
	})
}

// wantEnv is the environment every function gets, rendered.
func (d *deployment) wantEnv(t *testing.T) map[string]string {
	r := d.props.Resources
	bucket := "existing-bucket"
	if d.props.BucketName == "" {
		bucket = "${" + d.cfn.ofType("AWS::S3::Bucket")[0] + "}"
	}
	env := map[string]string{
		spec.EnvBucket:    bucket,
		spec.EnvTable:     "${" + d.tableID(t) + "}",
		spec.EnvKeyPrefix: d.props.KeyPrefix,
		spec.EnvLayout:    d.props.Layout,
	}
	if d.props.Tenant != "" {
		env[spec.EnvTenant] = d.props.Tenant
	}
	for _, q := range r.Queues {
		env[spec.QueueURLEnv(q.ID)] = "${" + d.queueID(t, q) + "}"
	}
	// Jobs are sized by the compact function: its /tmp less 2 GiB, its
	// memory less 512 MiB, its timeout (10 GiB, 4 GiB and 15 minutes in
	// the default spec).
	compact := r.Function(spec.Compact)
	env[spec.EnvScratchBytes] = fmt.Sprint(uint64(compact.EphemeralMB-2048) << 20)
	env[spec.EnvJobMemoryBytes] = fmt.Sprint(uint64(compact.MemoryMB-512) << 20)
	env[spec.EnvJobTimeout] = compact.Timeout.String()
	for k, v := range d.props.Env {
		env[k] = v
	}
	return env
}

func TestFunctionsFollowTheSpec(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		r := d.props.Resources
		check(t, "function count (four plus CDK's notification handler)", func() {
			d.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(float64(len(r.Functions)+1)))
		})
		env := d.wantEnv(t)
		for _, f := range r.Functions {
			id := d.functionID(t, f)
			check(t, string(f.ID), func() {
				d.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj{
					"FunctionName":     r.FunctionName(f),
					"Runtime":          "provided.al2023",
					"Architectures":    arr{"arm64"},
					"Handler":          "bootstrap",
					"MemorySize":       f.MemoryMB,
					"Timeout":          f.Timeout.Seconds(),
					"EphemeralStorage": obj{"Size": f.EphemeralMB},
					"RecursiveLoop":    "Allow",
					"LoggingConfig":    obj{"LogGroup": assertions.Match_AnyValue()},
				})
			})
			p := d.cfn.Resources[id].Properties
			vars, _ := p["Environment"].(map[string]any)["Variables"].(map[string]any)
			got := map[string]string{}
			for k, v := range vars {
				got[k] = render(v)
			}
			want := maps.Clone(env)
			want[spec.EnvGoMemLimit] = f.GoMemLimit()
			if !mapsEqual(got, want) {
				t.Errorf("%s environment:\n got %v\nwant %v", f.ID, got, want)
			}
			logs := render(p["LoggingConfig"].(map[string]any)["LogGroup"])
			lg := strings.TrimSuffix(strings.TrimPrefix(logs, "${"), "}")
			if name := render(d.cfn.Resources[lg].Properties["LogGroupName"]); name != "/aws/lambda/"+r.FunctionName(f) {
				t.Errorf("%s logs to %q", f.ID, name)
			}
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestEachQueueFeedsItsConsumerWithPartialBatchFailures(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		r := d.props.Resources
		check(t, "one event source per queue", func() {
			d.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::EventSourceMapping"), jsii.Number(float64(len(r.Queues))))
		})
		for _, q := range r.Queues {
			check(t, string(q.ID), func() {
				want := obj{
					"EventSourceArn":        getAtt(d.queueID(t, q), "Arn"),
					"FunctionName":          ref(d.functionID(t, r.Function(q.Consumer))),
					"BatchSize":             q.BatchSize,
					"FunctionResponseTypes": arr{"ReportBatchItemFailures"},
					"ScalingConfig":         obj{"MaximumConcurrency": q.MaxConcurrency},
				}
				if q.BatchingWindow > 0 {
					want["MaximumBatchingWindowInSeconds"] = q.BatchingWindow.Seconds()
				}
				d.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), want)
			})
			if q.ID == spec.BlockEvents && q.BatchingWindow != spec.PlannerBatchingWindow {
				t.Errorf("%s: batching window %v, want the planner's %v", q.ID, q.BatchingWindow, spec.PlannerBatchingWindow)
			}
			if q.BatchingWindow > 0 && (q.FIFO || q.BatchingWindow > 5*time.Minute || q.VisibilityTimeout < 6*r.Function(q.Consumer).Timeout+q.BatchingWindow) {
				t.Errorf("%s: batching window %v on a FIFO queue, over Lambda's 5 minutes, or not within the visibility timeout %v", q.ID, q.BatchingWindow, q.VisibilityTimeout)
			}
			if q.FIFO && q.BatchSize > 10 {
				t.Errorf("%s: FIFO batch size %d > 10", q.ID, q.BatchSize)
			}
		}
	})
}

// TestCleanerSchedules: each of the cleaner's passes runs on a schedule
// of its own — the sweep every props.SweepInterval, retention hourly, the
// bucket index every quarter hour (Mimir's queriers refuse an index over
// an hour old), the metrics pass every 5 minutes (the alarms' period) —
// and EventBridge may invoke the cleaner.
func TestCleanerSchedules(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		cleaner := d.functionID(t, d.props.Resources.Function(spec.Cleaner))
		cases := []struct {
			event, rate string
		}{
			{spec.SweepEvent, "rate(5 minutes)"},
			{spec.RetentionEvent, "rate(1 hour)"},
			{spec.BucketIndexEvent, "rate(15 minutes)"},
			{spec.MetricsEvent, "rate(5 minutes)"},
		}
		check(t, "one rule per schedule", func() {
			d.tmpl.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(float64(len(cases))))
		})
		for _, c := range cases {
			check(t, c.event, func() {
				d.tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), obj{
					"ScheduleExpression": c.rate,
					"State":              "ENABLED",
					"Targets": arr{obj{
						"Arn":   getAtt(cleaner, "Arn"),
						"Input": c.event,
					}},
				})
			})
		}
		check(t, "permission", func() {
			d.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), obj{
				"Action":       "lambda:InvokeFunction",
				"FunctionName": getAtt(cleaner, "Arn"),
				"Principal":    "events.amazonaws.com",
			})
		})
	})
}

func TestAlarmsOnEveryDLQAndOnTheAgeOfEveryQueue(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		r := d.props.Resources
		topic := d.cfn.ofType("AWS::SNS::Topic")
		if len(topic) != 1 {
			t.Fatalf("alarm topics: %v", topic)
		}
		check(t, "alarm count", func() {
			// Two per queue, and four on Sluice's own metrics
			// (TestAlarmsOnSluicesMetrics).
			d.tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(float64(2*len(r.Queues)+4)))
		})
		for _, q := range r.Queues {
			check(t, string(q.ID)+" DLQ not empty", func() {
				d.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj{
					"Namespace":          "AWS/SQS",
					"MetricName":         "ApproximateNumberOfMessagesVisible",
					"Dimensions":         arr{obj{"Name": "QueueName", "Value": getAtt(d.dlqID(t, q), "QueueName")}},
					"Statistic":          "Maximum",
					"Threshold":          0,
					"ComparisonOperator": "GreaterThanThreshold",
					"AlarmActions":       arr{ref(topic[0])},
				})
			})
			check(t, string(q.ID)+" oldest message", func() {
				d.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj{
					"Namespace":          "AWS/SQS",
					"MetricName":         "ApproximateAgeOfOldestMessage",
					"Dimensions":         arr{obj{"Name": "QueueName", "Value": getAtt(d.queueID(t, q), "QueueName")}},
					"Threshold":          q.AgeAlarm().Seconds(),
					"ComparisonOperator": "GreaterThanThreshold",
					"AlarmActions":       arr{ref(topic[0])},
				})
			})
		}
	})
}

func TestOutputsNameEverythingAndTheCLISettings(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		r := d.props.Resources
		keys := []string{"BucketName", "TableName", "AlarmTopicArn", OutputEnv}
		for _, q := range r.Queues {
			keys = append(keys, queueConstructID(q.ID)+"QueueUrl", queueConstructID(q.ID)+"DLQUrl")
		}
		for _, k := range keys {
			check(t, "output "+k, func() { d.tmpl.HasOutput(jsii.String(k), obj{"Value": assertions.Match_AnyValue()}) })
		}
		for _, q := range r.Queues {
			if got, want := render(d.cfn.Outputs[queueConstructID(q.ID)+"DLQUrl"].Value), "${"+d.dlqID(t, q)+"}"; got != want {
				t.Errorf("%s DLQ url output %q, want %q", q.ID, got, want)
			}
		}
		// SluiceEnv is "NAME=value NAME=value ...", exactly the functions'
		// environment, so `export $(…)` configures the CLI.
		got := map[string]string{}
		for _, kv := range strings.Fields(render(d.cfn.Outputs[OutputEnv].Value)) {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		if want := d.wantEnv(t); !mapsEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", OutputEnv, got, want)
		}
	})
}

// TestAlarmsOnSluicesMetrics: what needs a human raises an alarm from the
// functions' EMF metrics, over the whole deployment (the Deployment
// dimension alone, the table's name as the functions know it): falling
// behind past 2h for two periods, anything quarantined, a group re-planned
// to version 5. And one dashboard graphs them with the DLQs.
func TestAlarmsOnSluicesMetrics(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		topic := d.cfn.ofType("AWS::SNS::Topic")
		table := ref(d.tableID(t))
		cases := []struct {
			metric    string
			threshold float64
			op        string
			periods   int
		}{
			{"sluice_oldest_uncompacted_block_age_seconds", 7200, "GreaterThanThreshold", 2},
			{"sluice_quarantined_blocks", 0, "GreaterThanThreshold", 1},
			{"sluice_quarantined_groups", 0, "GreaterThanThreshold", 1},
			{"sluice_unfinished_group_max_version", 5, "GreaterThanOrEqualToThreshold", 1},
		}
		for _, c := range cases {
			check(t, c.metric, func() {
				d.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj{
					"Namespace":          "Sluice",
					"MetricName":         c.metric,
					"Dimensions":         arr{obj{"Name": "Deployment", "Value": table}},
					"Statistic":          "Maximum",
					"Period":             300,
					"Threshold":          c.threshold,
					"ComparisonOperator": c.op,
					"EvaluationPeriods":  c.periods,
					"TreatMissingData":   "notBreaching",
					"AlarmActions":       arr{ref(topic[0])},
				})
			})
		}
		dash := d.cfn.ofType("AWS::CloudWatch::Dashboard")
		if len(dash) != 1 {
			t.Fatalf("dashboards: %v, want one", dash)
		}
		body := render(d.cfn.Resources[dash[0]].Properties["DashboardBody"])
		for _, want := range []string{"sluice_compact_group_compactions_total", "sluice_compact_group_compactions_failures_total",
			"sluice_oldest_uncompacted_block_age_seconds", "sluice_condition_losses_total", "sluice_quarantined_blocks",
			"sluice_remaining_planned_compactions", "sluice_compact_read_bytes_total", "ApproximateNumberOfMessagesVisible",
			`"Deployment","${` + d.tableID(t) + `}"`} {
			if !strings.Contains(body, want) {
				t.Errorf("dashboard body lacks %s:\n%s", want, body)
			}
		}
	})
}
