// Package metrics records what Sluice's functions do as CloudWatch metrics
// in the Embedded Metric Format (EMF): one structured log line per
// invocation and dimension set, which CloudWatch Logs turns into metrics
// with no PutMetricData call, no client and no extra request. The same
// names serve `sluice metrics`, which prints the gauges from the records
// in the Prometheus text format.
//
// A handler puts a Batch in its context (With), code anywhere below adds
// to the batch it finds there (From; a context without one records
// nothing), and the handler emits the batch once when it returns. Nothing
// is global: two handlers in one process keep separate batches.
package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every Sluice metric.
const Namespace = "Sluice"

// Unit is a CloudWatch metric unit.
type Unit string

// Units in use.
const (
	Count   Unit = "Count"
	Seconds Unit = "Seconds"
	Bytes   Unit = "Bytes"
)

// Kind says how values of one metric combine within a batch and how
// `sluice metrics` types it.
type Kind string

// Kinds.
const (
	// Counter values add up (a batch sums what one invocation did).
	Counter Kind = "counter"
	// Gauge values replace each other (the last one set wins).
	Gauge Kind = "gauge"
)

// Metric is one metric's definition. The names follow Thanos' and
// Cortex's compactor metrics where one exists, with a sluice_ prefix, so
// an operator of either finds the one they watch.
type Metric struct {
	Name string
	Unit Unit
	Kind Kind
	// Dims are the dimension names every value of the metric carries
	// (besides Deployment).
	Dims []string
	Help string
	// Like names the Thanos or Cortex metric it stands for, if any.
	Like string
}

// Dimension names.
const (
	DimDeployment = "Deployment"
	DimTenant     = "Tenant"
	DimTransition = "Transition"
	DimKind       = "Kind"
)

// The metrics. Counters are emitted by the functions as things happen;
// gauges by the cleaner's metrics pass (and by `sluice metrics`), read
// from the records.
var (
	Compactions = Metric{Name: "sluice_compact_group_compactions_total", Unit: Count, Kind: Counter, Dims: []string{DimTenant},
		Help: "Partition jobs that committed their output.", Like: "thanos_compact_group_compactions_total"}
	CompactionFailures = Metric{Name: "sluice_compact_group_compactions_failures_total", Unit: Count, Kind: Counter, Dims: []string{DimTenant},
		Help: "Partition job attempts that failed (recorded against their group).", Like: "thanos_compact_group_compactions_failures_total"}
	JobDuration = Metric{Name: "sluice_compact_job_duration_seconds", Unit: Seconds, Kind: Gauge, Dims: []string{DimTenant},
		Help: "Wall time of a partition job that committed: one value per job (a compact invocation runs one), CloudWatch keeps their distribution.", Like: "thanos_compact_group_compaction_duration_seconds"}
	BytesRead = Metric{Name: "sluice_compact_read_bytes_total", Unit: Bytes, Kind: Counter, Dims: []string{DimTenant},
		Help: "Bytes partition jobs read from the bucket."}
	BytesWritten = Metric{Name: "sluice_compact_written_bytes_total", Unit: Bytes, Kind: Counter, Dims: []string{DimTenant},
		Help: "Bytes of block files partition jobs wrote to the bucket."}
	SeriesCompacted = Metric{Name: "sluice_compact_series_total", Unit: Count, Kind: Counter, Dims: []string{DimTenant},
		Help: "Series in the outputs of committed partition jobs."}
	SamplesCompacted = Metric{Name: "sluice_compact_samples_total", Unit: Count, Kind: Counter, Dims: []string{DimTenant},
		Help: "Samples in the outputs of committed partition jobs."}
	ConditionLosses = Metric{Name: "sluice_condition_losses_total", Unit: Count, Kind: Counter, Dims: []string{DimTransition},
		Help: "Conditional writes and transactions whose condition did not hold: another actor moved first (expected, in moderation)."}
	Quarantines = Metric{Name: "sluice_quarantines_total", Unit: Count, Kind: Counter, Dims: []string{DimTenant, DimKind},
		Help: "Blocks (Kind=block) and groups (Kind=group) quarantined after repeated failures."}
	Rejections = Metric{Name: "sluice_rejected_uploads_total", Unit: Count, Kind: Counter, Dims: []string{DimTenant},
		Help: "Uploads registered REJECTED (a meta.json that cannot be read or used)."}
	OldestUncompacted = Metric{Name: "sluice_oldest_uncompacted_block_age_seconds", Unit: Seconds, Kind: Gauge, Dims: []string{DimTenant},
		Help: "Age of the tenant's oldest level-0 block still waiting for compaction, from its end (maxTime): the number that says compaction is falling behind.",
		Like: "cortex_compactor_last_successful_run_timestamp_seconds"}
	PlannedCompactions = Metric{Name: "sluice_remaining_planned_compactions", Unit: Count, Kind: Gauge, Dims: []string{DimTenant},
		Help: "Partitions of unfinished group versions not done yet.", Like: "cortex_compactor_remaining_planned_compactions"}
	QuarantinedBlocks = Metric{Name: "sluice_quarantined_blocks", Unit: Count, Kind: Gauge, Dims: []string{DimTenant},
		Help: "Blocks quarantined now ('sluice retry' releases them)."}
	QuarantinedGroups = Metric{Name: "sluice_quarantined_groups", Unit: Count, Kind: Gauge, Dims: []string{DimTenant},
		Help: "Groups quarantined now.", Like: "thanos_compact_halted"}
	GroupVersionChurn = Metric{Name: "sluice_unfinished_group_max_version", Unit: Count, Kind: Gauge, Dims: []string{DimTenant},
		Help: "Highest version number of an unfinished group: each version past the first was planned because the one before lost its condition (late blocks, a mark); a high value is one group losing its conditions repeatedly."}
	LiveBlocks = Metric{Name: "sluice_blocks_live", Unit: Count, Kind: Gauge, Dims: []string{DimTenant},
		Help: "LIVE blocks (what readers may query)."}
	DeadLetters = Metric{Name: "sluice_dead_letter_messages", Unit: Count, Kind: Gauge, Dims: []string{"Queue"},
		Help: "Messages in a queue's dead-letter queue (in AWS the alarm reads SQS's own metric)."}
)

// All lists every metric, for docs and `sluice metrics`.
func All() []Metric {
	return []Metric{Compactions, CompactionFailures, JobDuration, BytesRead, BytesWritten, SeriesCompacted, SamplesCompacted,
		ConditionLosses, Quarantines, Rejections, OldestUncompacted, PlannedCompactions, QuarantinedBlocks, QuarantinedGroups,
		GroupVersionChurn, LiveBlocks, DeadLetters}
}

// Batch collects one invocation's values. Its methods are safe for
// concurrent use and do nothing on a nil Batch.
type Batch struct {
	deployment string
	mu         sync.Mutex
	values     map[seriesKey]*value
}

type seriesKey struct {
	name string
	dims string // "k=v\x00k=v", in the metric's dimension order
}

type value struct {
	m    Metric
	dims []string // values, in m.Dims order
	v    float64
}

// NewBatch returns an empty batch for a deployment (its table name: the
// Deployment dimension, so several stacks in one account stay apart).
func NewBatch(deployment string) *Batch {
	return &Batch{deployment: deployment, values: map[seriesKey]*value{}}
}

// Add adds v to a counter, or sets a gauge, for the dimension values
// given in m.Dims order (missing ones are "").
func (b *Batch) Add(m Metric, v float64, dims ...string) {
	if b == nil {
		return
	}
	vals := make([]string, len(m.Dims))
	copy(vals, dims)
	k := seriesKey{name: m.Name, dims: strings.Join(vals, "\x00")}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, ok := b.values[k]
	if !ok {
		b.values[k] = &value{m: m, dims: vals, v: v}
		return
	}
	if m.Kind == Counter {
		cur.v += v
	} else {
		cur.v = v
	}
}

// Put adds values as Add does.
func (b *Batch) Put(vals ...Value) {
	for _, v := range vals {
		b.Add(v.Metric, v.V, v.Dims...)
	}
}

// Value is one recorded value, as Values returns it.
type Value struct {
	Metric Metric
	Dims   []string
	V      float64
}

// Values returns what the batch holds, sorted by name then dimensions.
func (b *Batch) Values() []Value {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Value, 0, len(b.values))
	for _, v := range b.values {
		out = append(out, Value{Metric: v.m, Dims: slices.Clone(v.dims), V: v.v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Metric.Name != out[j].Metric.Name {
			return out[i].Metric.Name < out[j].Metric.Name
		}
		return strings.Join(out[i].Dims, "\x00") < strings.Join(out[j].Dims, "\x00")
	})
	return out
}

// Emit writes the batch as EMF log lines, one per combination of
// dimension values (EMF puts the values of one line's dimensions at its
// top level, so two tenants cannot share a line), and empties it. Each
// line publishes its metrics twice: with the Deployment and the metric's
// own dimensions, and with Deployment alone, the total an alarm watches.
func (b *Batch) Emit(ctx context.Context, logger *slog.Logger, at time.Time) {
	if b == nil {
		return
	}
	vals := b.Values()
	b.mu.Lock()
	b.values = map[seriesKey]*value{}
	b.mu.Unlock()
	type lineKey struct{ names, values string }
	lines := map[lineKey][]Value{}
	var order []lineKey
	for _, v := range vals {
		k := lineKey{strings.Join(v.Metric.Dims, ","), strings.Join(v.Dims, "\x00")}
		if _, ok := lines[k]; !ok {
			order = append(order, k)
		}
		lines[k] = append(lines[k], v)
	}
	for _, k := range order {
		logger.LogAttrs(ctx, slog.LevelInfo, "metrics", line(b.deployment, lines[k], at)...)
	}
}

// line is one EMF record: the _aws directive, the dimension values and
// the metric values, all at the top level of the JSON object.
func line(deployment string, vals []Value, at time.Time) []slog.Attr {
	dimNames := append([]string{DimDeployment}, vals[0].Metric.Dims...)
	defs := make([]map[string]string, 0, len(vals))
	attrs := []slog.Attr{slog.String(DimDeployment, deployment)}
	for i, name := range vals[0].Metric.Dims {
		attrs = append(attrs, slog.String(name, vals[0].Dims[i]))
	}
	for _, v := range vals {
		defs = append(defs, map[string]string{"Name": v.Metric.Name, "Unit": string(v.Metric.Unit)})
		attrs = append(attrs, slog.Float64(v.Metric.Name, v.V))
	}
	sets := [][]string{dimNames}
	if len(dimNames) > 1 {
		sets = append(sets, []string{DimDeployment})
	}
	directive := map[string]any{
		"Timestamp": at.UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace":  Namespace,
			"Dimensions": sets,
			"Metrics":    defs,
		}},
	}
	return append([]slog.Attr{slog.Any("_aws", directive)}, attrs...)
}

type ctxKey struct{}

// With returns ctx carrying b.
func With(ctx context.Context, b *Batch) context.Context {
	return context.WithValue(ctx, ctxKey{}, b)
}

// From returns the batch ctx carries, or nil (which records nothing).
func From(ctx context.Context) *Batch {
	b, _ := ctx.Value(ctxKey{}).(*Batch)
	return b
}

// WritePrometheus writes values in the Prometheus text exposition format:
// each metric's HELP and TYPE once, then one sample per dimension set,
// dimensions as lower-case labels beside deployment.
func WritePrometheus(w io.Writer, deployment string, vals []Value) error {
	byName := map[string][]Value{}
	var names []string
	defs := map[string]Metric{}
	for _, v := range vals {
		if _, ok := byName[v.Metric.Name]; !ok {
			names = append(names, v.Metric.Name)
			defs[v.Metric.Name] = v.Metric
		}
		byName[v.Metric.Name] = append(byName[v.Metric.Name], v)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, name := range names {
		m := defs[name]
		fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(m.Help), name, m.Kind)
		for _, v := range byName[name] {
			labels := []string{fmt.Sprintf("deployment=%q", deployment)}
			for i, d := range m.Dims {
				labels = append(labels, fmt.Sprintf("%s=%q", strings.ToLower(d), v.Dims[i]))
			}
			fmt.Fprintf(&sb, "%s{%s} %s\n", name, strings.Join(labels, ","), strconv.FormatFloat(v.V, 'g', -1, 64))
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
