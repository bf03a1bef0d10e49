package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/spec"
)

// sluiceMetric is one of the functions' EMF metrics (shared/metrics) over
// the whole deployment: the dimension set with Deployment alone, which
// every line also publishes, so an alarm sees every tenant at once.
func (s *Sluice) sluiceMetric(m metrics.Metric, statistic string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(metrics.Namespace),
		MetricName:    jsii.String(m.Name),
		DimensionsMap: &map[string]*string{metrics.DimDeployment: s.Table.TableName()},
		Statistic:     jsii.String(statistic),
		Period:        awscdk.Duration_Minutes(jsii.Number(5)),
	})
}

// addMetricAlarms raises what needs a human, from the functions' own
// metrics: compaction falling behind, anything quarantined, one group
// re-planned again and again. (The DLQ alarms read SQS's metrics.)
func (s *Sluice) addMetricAlarms(r spec.Resources, props Props) {
	action := awscloudwatchactions.NewSnsAction(s.Alarms)
	alarms := []struct {
		id, name, why string
		m             metrics.Metric
		threshold     float64
		op            awscloudwatch.ComparisonOperator
		periods       float64
	}{
		{"FallingBehind", "falling-behind",
			fmt.Sprintf("Sluice: a tenant's oldest level-0 block has been due for compaction over %v; `sluice status` shows its groups", props.BehindAlarmAfter),
			metrics.OldestUncompacted, props.BehindAlarmAfter.Seconds(), awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 2},
		{"QuarantinedBlocks", "quarantined-blocks",
			"Sluice: a block is quarantined (compaction failed on it again and again); `sluice status` gives the reason, `sluice retry` releases it",
			metrics.QuarantinedBlocks, 0, awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1},
		{"QuarantinedGroups", "quarantined-groups",
			"Sluice: a group is quarantined (its jobs failed for a reason that names no block); `sluice status` gives the reason, `sluice retry` releases it",
			metrics.QuarantinedGroups, 0, awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1},
		{"GroupChurn", "group-churn",
			fmt.Sprintf("Sluice: an unfinished group reached version %d: it keeps losing its conditions and being re-planned (late blocks, marks, failing jobs); `sluice status` shows its history", props.ChurnAlarmVersion),
			metrics.GroupVersionChurn, float64(props.ChurnAlarmVersion), awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1},
	}
	for _, a := range alarms {
		awscloudwatch.NewAlarm(s.Stack, jsii.String(a.id), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(r.Prefix + "-" + a.name),
			AlarmDescription:   jsii.String(a.why),
			Metric:             s.sluiceMetric(a.m, "Maximum"),
			Threshold:          jsii.Number(a.threshold),
			ComparisonOperator: a.op,
			EvaluationPeriods:  jsii.Number(a.periods),
			// No data is no tenant with anything to report, or the
			// metrics pass not running: the sweep's schedule alarms on
			// the queues' age catch a cleaner that stopped.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		}).AddAlarmAction(action)
	}
}

// addDashboard is one CloudWatch dashboard: what compacts, what falls
// behind, what is lost to whom, and the queues.
func (s *Sluice) addDashboard(r spec.Resources) {
	graph := func(title string, ms ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: &ms, Width: jsii.Number(8), Height: jsii.Number(6),
		})
	}
	// A label makes CDK render a metric as metric math, which an alarm
	// does not need; the graphs get theirs here.
	labelled := func(m metrics.Metric, statistic string) awscloudwatch.IMetric {
		return s.sluiceMetric(m, statistic).With(&awscloudwatch.MetricOptions{Label: jsii.String(m.Name + " " + statistic)})
	}
	sum := func(m metrics.Metric) awscloudwatch.IMetric { return labelled(m, "Sum") }
	maxOf := func(m metrics.Metric) awscloudwatch.IMetric { return labelled(m, "Maximum") }
	var dlqs []awscloudwatch.IMetric
	for _, q := range r.Queues {
		dlqs = append(dlqs, s.DLQs[q.ID].MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Statistic: jsii.String("Maximum"), Period: awscdk.Duration_Minutes(jsii.Number(5)),
			Label: jsii.String(r.DLQName(q)),
		}))
	}
	d := awscloudwatch.NewDashboard(s.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String(r.Prefix),
	})
	d.AddWidgets(
		graph("Compactions and failures", sum(metrics.Compactions), sum(metrics.CompactionFailures)),
		graph("Oldest level-0 block overdue (s)", maxOf(metrics.OldestUncompacted)),
		graph("Planned partitions", maxOf(metrics.PlannedCompactions)),
	)
	d.AddWidgets(
		graph("Condition losses", sum(metrics.ConditionLosses)),
		graph("Quarantined", maxOf(metrics.QuarantinedBlocks), maxOf(metrics.QuarantinedGroups), sum(metrics.Quarantines)),
		graph("Job duration (s)", labelled(metrics.JobDuration, "p90"), maxOf(metrics.JobDuration)),
	)
	d.AddWidgets(
		graph("Bytes read and written", sum(metrics.BytesRead), sum(metrics.BytesWritten)),
		graph("Series and samples compacted", sum(metrics.SeriesCompacted), sum(metrics.SamplesCompacted)),
		graph("Dead-letter queues", dlqs...),
	)
}
