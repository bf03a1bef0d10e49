// Package config loads a function's configuration from the environment,
// in one place, with every default documented. A zero or unset value means
// the documented default, never "off".
package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/shared/stream"
)

// Config is what every Sluice function and the CLI need to know.
type Config struct {
	// Bucket holds the blocks (SLUICE_BUCKET, required).
	Bucket string
	// Table is the state table (SLUICE_TABLE, required).
	Table string
	// Queues are the queue URLs (SLUICE_*_URL). A function needs only the
	// ones it sends to; a send to a missing one fails with a clear error.
	Queues messages.Queues
	// Layout is where blocks live in the bucket (SLUICE_PREFIX,
	// SLUICE_LAYOUT, SLUICE_TENANT for a single-tenant bucket).
	Layout blockkey.Layout
	// ReplicaLabels are the external labels by which replicas of one
	// producer differ (SLUICE_REPLICA_LABELS, comma-separated, like
	// Thanos' --deduplication.replica-label; "none" for none). Blocks that
	// differ only in them are one stream: compacted together, duplicates
	// removed, the labels dropped from the output. Default for a
	// multi-tenant (Cortex, Mimir) bucket: __ingester_id__ and __org_id__,
	// the two labels Cortex's and Mimir's ingesters write (Mimir's
	// compactor drops both before grouping, Cortex's the first; __org_id__
	// is the tenant, so it never tells two streams apart). Default for a
	// single-tenant (Thanos) bucket: none, as in Thanos.
	ReplicaLabels []string
	// Policy is the planning policy. SLUICE_RANGES ("12h,24h"),
	// SLUICE_CLOSE_DELAY (1h), SLUICE_UPLOAD_WAIT (10m; 0 for none),
	// SLUICE_MAX_SERIES_PER_PARTITION (2000000),
	// SLUICE_MAX_INDEX_BYTES_PER_PARTITION (2 GiB), SLUICE_PARTITIONING
	// (auto: one block per group in a single-tenant bucket unless a hard
	// limit forces partitions, by the limits in a multi-tenant one; single;
	// limits). Job sizing (planning.Size): SLUICE_SCRATCH_BYTES (8 GiB),
	// SLUICE_JOB_MEMORY_BYTES (3.5 GiB: the compact function's 4 GiB less
	// 512 MiB),
	// SLUICE_JOB_THROUGHPUT (bytes/s, 24 MiB), SLUICE_JOB_TIMEOUT (the
	// compact function's timeout, 15m; Policy.JobTimeout is that less
	// DeadlineMargin), SLUICE_SERIES_CHURN (0.2). Splitting big level-0
	// blocks on arrival: SLUICE_SPLIT_BYTES (256 MiB; "never" turns it
	// off). Thanos' downsampling: SLUICE_DOWNSAMPLE (false; true needs a
	// top level of at least the raw span, e.g. SLUICE_RANGES=8h,48h,336h),
	// SLUICE_DOWNSAMPLE_RAW_SPAN (40h) and SLUICE_DOWNSAMPLE_5M_SPAN (240h).
	Policy planning.Policy
	// DeletionDelay is how long a retired source stays readable, with its
	// deletion mark, before it is deleted (SLUICE_DELETION_DELAY, default
	// 48h as Thanos' --delete-delay).
	DeletionDelay time.Duration
	// LeaseDuration is how long a compaction job holds its partition
	// (SLUICE_LEASE_DURATION, default 20m: longer than the compact
	// function's 15 min timeout, so a live job never loses its lease).
	LeaseDuration time.Duration
	// StuckAfter is how long a planned version may make no progress (no
	// lease, commit or transition) before the sweep supersedes it
	// (SLUICE_STUCK_AFTER, default 3h: longer than a job's five receives
	// of at most 15 minutes each plus their redrives, so only a version
	// whose jobs are truly gone — DLQ'd or never sent — is superseded).
	// A version still CLAIMING is superseded once its planner's
	// invocation is over (records.Group.ClaimUntil), or after this if
	// that is sooner.
	StuckAfter time.Duration
	// RedriveAfter is how long a partition may sit PENDING or with an
	// expired lease before the sweep re-sends its job
	// (SLUICE_REDRIVE_AFTER, default 30m).
	RedriveAfter time.Duration
	// OrphanDelay is when the second orphan sweep of a final version runs,
	// after the longest a job can run (SLUICE_ORPHAN_DELAY, default 30m).
	OrphanDelay time.Duration
	// ScratchDir is where the compact function works (SLUICE_SCRATCH_DIR,
	// default os.TempDir()).
	ScratchDir string
	// DownloadParallelism bounds concurrent object downloads
	// (SLUICE_DOWNLOAD_PARALLELISM, default 8).
	DownloadParallelism int
	// UploadParallelism bounds the compact function's concurrent uploads
	// of an output's files (SLUICE_UPLOAD_PARALLELISM, default 4).
	UploadParallelism int
	// SweepParallelism bounds the sweep's concurrent deletions of retired
	// blocks (SLUICE_SWEEP_PARALLELISM, default 8). The explorer sets all
	// three to 1, so every handler makes one AWS call at a time.
	SweepParallelism int
	// MaxJobAttempts is how many failed attempts a version's jobs may
	// make — counted across redeliveries, re-drives and versions over the
	// same sources — before the cleaner quarantines the source the last
	// failure blamed, or the group (SLUICE_MAX_JOB_ATTEMPTS, default 3).
	MaxJobAttempts int
	// Retention is how long blocks are kept, by resolution; zero keeps
	// them for ever (SLUICE_RETENTION for raw blocks, SLUICE_RETENTION_5M
	// and SLUICE_RETENTION_1H for Thanos' downsampled ones; Prometheus
	// durations such as 90d or 1y).
	Retention Retention
	// BucketIndex is which bucket index Sluice keeps per tenant at
	// <tenant>/bucket-index.json.gz, for Cortex and Mimir store-gateways
	// and queriers (SLUICE_BUCKET_INDEX: "cortex", "mimir", or "" / "off"
	// for none, the default; a Thanos bucket needs none and refuses one).
	BucketIndex string
	// BucketIndexInterval is how often every tenant's index is looked at
	// even when nothing asked for it: new uploads show up then, and an
	// unchanged index is kept fresh (SLUICE_BUCKET_INDEX_INTERVAL, default
	// 15m, as the Cortex and Mimir compactors' cleanup interval). In AWS
	// the schedule is spec.DefaultBucketIndexInterval, which this must
	// match: it is set only for a local pipeline.
	BucketIndexInterval time.Duration
	// BucketIndexMaxAge bounds how old an unchanged index gets: a
	// scheduled pass keeps an index that says what the records say only
	// while it will still be younger than this at the next pass
	// (SLUICE_BUCKET_INDEX_MAX_AGE, default 40m). Mimir's queriers refuse
	// an index older than their max stale period (1h by default). At the
	// defaults a pass rewrites an unchanged index once it is 25 minutes
	// old — every other pass, the cut-off halfway between two — so it is
	// never older than 40 minutes when passes run on time, and under the
	// hour with one pass missed.
	BucketIndexMaxAge time.Duration
	// OverridesTTL is how long a function instance keeps the per-tenant
	// runtime overrides it read before reading them again
	// (SLUICE_OVERRIDES_TTL, default 1m).
	OverridesTTL time.Duration
	// RetentionInterval is how often retention runs, on its own schedule
	// (SLUICE_RETENTION_INTERVAL, default 1h).
	RetentionInterval time.Duration
	// MetricsInterval is how often the cleaner's metrics pass emits every
	// tenant's gauges (SLUICE_METRICS_INTERVAL, default 5m; the stack's
	// schedule is spec.DefaultMetricsInterval).
	MetricsInterval time.Duration
	// DeadlineMargin is how long before its function's deadline a job
	// stops, records its attempt as failed and commits nothing
	// (SLUICE_DEADLINE_MARGIN, default 1m: enough to record the failure
	// and tell the cleaner).
	DeadlineMargin time.Duration
}

// EnvRetention names raw blocks' retention (Config.Retention); _5M and
// _1H after it name the downsampled resolutions'.
const EnvRetention = "SLUICE_RETENTION"

// Retention is how long blocks of each resolution are kept after their
// end (maxTime), as Thanos' --retention.resolution-raw, -5m and -1h; zero
// keeps them for ever.
type Retention struct {
	Raw, FiveMinutes, OneHour time.Duration
}

// Of is the retention of blocks at resolution res (ms; 0 for raw), zero
// when they are kept for ever or res is none of Thanos' three.
func (r Retention) Of(res int64) time.Duration {
	switch res {
	case 0:
		return r.Raw
	case 5 * 60 * 1000:
		return r.FiveMinutes
	case 60 * 60 * 1000:
		return r.OneHour
	}
	return 0
}

// Enabled reports whether any resolution has a retention.
func (r Retention) Enabled() bool { return r.Raw > 0 || r.FiveMinutes > 0 || r.OneHour > 0 }

// EnvBucketIndex names the bucket index setting (Config.BucketIndex).
const EnvBucketIndex = "SLUICE_BUCKET_INDEX"

// EnvReplicaLabels names the replica labels (Config.ReplicaLabels).
const EnvReplicaLabels = "SLUICE_REPLICA_LABELS"

// EnvPartitioning chooses when a group's output is partitioned
// (Policy.SingleBlock).
const EnvPartitioning = "SLUICE_PARTITIONING"

// The values of SLUICE_PARTITIONING.
const (
	// PartitioningAuto: single in a single-tenant (Thanos) bucket, limits
	// in a multi-tenant (Cortex, Mimir) one, whose compactors know
	// partitions.
	PartitioningAuto = "auto"
	// PartitioningSingle: one block per group unless one job cannot hold
	// it.
	PartitioningSingle = "single"
	// PartitioningLimits: partition whenever SLUICE_MAX_SERIES_PER_PARTITION
	// or SLUICE_MAX_INDEX_BYTES_PER_PARTITION says so.
	PartitioningLimits = "limits"
)

// DefaultMultiTenantReplicaLabels are the replica labels of a multi-tenant
// bucket unless SLUICE_REPLICA_LABELS says otherwise.
func DefaultMultiTenantReplicaLabels() []string { return []string{"__ingester_id__", "__org_id__"} }

// FromEnv loads the configuration from the process environment.
func FromEnv() (Config, error) { return Load(os.Getenv) }

// Load loads the configuration through getenv (tests pass a map's lookup).
func Load(getenv func(string) string) (Config, error) {
	c := Config{
		Bucket: getenv(spec.EnvBucket),
		Table:  getenv(spec.EnvTable),
		Queues: messages.Queues{
			BlockEvents:    getenv(spec.EnvBlockEvents),
			CompactionJobs: getenv(spec.EnvJobsQueue),
			CleanerEvents:  getenv(spec.EnvCleanerQueue),
			BlockOps:       getenv(spec.EnvBlockOps),
		},
		ScratchDir: getenv("SLUICE_SCRATCH_DIR"),
	}
	var errs []string
	if c.Bucket == "" {
		errs = append(errs, spec.EnvBucket+" is not set")
	}
	if c.Table == "" {
		errs = append(errs, spec.EnvTable+" is not set")
	}
	c.Layout.Prefix = getenv(spec.EnvKeyPrefix)
	switch l := getenv(spec.EnvLayout); l {
	case "", spec.LayoutMultiTenant:
	case spec.LayoutSingleTenant:
		c.Layout.SingleTenant = getenv("SLUICE_TENANT")
		if c.Layout.SingleTenant == "" {
			errs = append(errs, "SLUICE_TENANT must name the tenant of a single-tenant bucket")
		}
	default:
		errs = append(errs, fmt.Sprintf("%s=%q: want %s or %s", spec.EnvLayout, l, spec.LayoutMultiTenant, spec.LayoutSingleTenant))
	}
	switch v := strings.TrimSpace(getenv(EnvReplicaLabels)); {
	case v == "" && c.Layout.SingleTenant == "":
		c.ReplicaLabels = DefaultMultiTenantReplicaLabels()
	case v == "" || v == "none":
	default:
		c.ReplicaLabels = stream.ParseReplicaLabels(v)
	}
	dur := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Sprintf("%s=%q is not a positive duration", name, v))
			return def
		}
		return d
	}
	num := func(name string) uint64 {
		v := getenv(name)
		if v == "" {
			return 0
		}
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q is not a whole number", name, v))
		}
		return x
	}
	if r := getenv("SLUICE_RANGES"); r != "" {
		for _, part := range strings.Split(r, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(part))
			if err != nil {
				errs = append(errs, fmt.Sprintf("SLUICE_RANGES=%q: %v", r, err))
				break
			}
			c.Policy.Ranges = append(c.Policy.Ranges, d)
		}
	}
	c.Policy.CloseDelay = dur("SLUICE_CLOSE_DELAY", 0)
	// Any zero duration ("0", "0s", "0m") turns the wait off: unset is the
	// default, not none.
	if d, err := time.ParseDuration(getenv("SLUICE_UPLOAD_WAIT")); err == nil && d == 0 {
		c.Policy.UploadWait = planning.NoUploadWait
	} else {
		c.Policy.UploadWait = dur("SLUICE_UPLOAD_WAIT", 0)
	}
	c.Policy.MaxSeriesPerPartition = num("SLUICE_MAX_SERIES_PER_PARTITION")
	c.Policy.MaxIndexBytesPerPartition = num("SLUICE_MAX_INDEX_BYTES_PER_PARTITION")
	c.Policy.ScratchBytes = num(spec.EnvScratchBytes)
	c.Policy.MemoryBytes = num(spec.EnvJobMemoryBytes)
	c.Policy.Throughput = num("SLUICE_JOB_THROUGHPUT")
	c.Policy.JobTimeout = dur(spec.EnvJobTimeout, 0)
	if v := getenv("SLUICE_SERIES_CHURN"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			errs = append(errs, fmt.Sprintf("SLUICE_SERIES_CHURN=%q: want a fraction in (0, 1]", v))
		}
		c.Policy.SeriesChurn = f
	}
	switch v := getenv("SLUICE_SPLIT_BYTES"); v {
	case "":
	case "never":
		c.Policy.SplitBytes = planning.NeverSplit
	default:
		if c.Policy.SplitBytes = num("SLUICE_SPLIT_BYTES"); c.Policy.SplitBytes == 0 {
			errs = append(errs, fmt.Sprintf("SLUICE_SPLIT_BYTES=%q: want a size in bytes above 0, or never", v))
		}
	}
	switch v := getenv("SLUICE_DOWNSAMPLE"); v {
	case "", "false":
	case "true":
		c.Policy.Downsample = true
	default:
		errs = append(errs, fmt.Sprintf("SLUICE_DOWNSAMPLE=%q: want true or false", v))
	}
	c.Policy.DownsampleRawSpan = dur("SLUICE_DOWNSAMPLE_RAW_SPAN", 0)
	c.Policy.DownsampleFiveMinuteSpan = dur("SLUICE_DOWNSAMPLE_5M_SPAN", 0)
	switch v := getenv(EnvPartitioning); v {
	case "", PartitioningAuto:
		c.Policy.SingleBlock = c.Layout.SingleTenant != ""
	case PartitioningSingle:
		c.Policy.SingleBlock = true
	case PartitioningLimits:
	default:
		errs = append(errs, fmt.Sprintf("%s=%q: want %s, %s or %s", EnvPartitioning, v, PartitioningAuto, PartitioningSingle, PartitioningLimits))
	}
	c.Policy = c.Policy.Defaults()
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	c.DeletionDelay = dur("SLUICE_DELETION_DELAY", 48*time.Hour)
	c.LeaseDuration = dur("SLUICE_LEASE_DURATION", 20*time.Minute)
	c.StuckAfter = dur("SLUICE_STUCK_AFTER", 3*time.Hour)
	c.RedriveAfter = dur("SLUICE_REDRIVE_AFTER", 30*time.Minute)
	c.OrphanDelay = dur("SLUICE_ORPHAN_DELAY", 30*time.Minute)
	if c.ScratchDir == "" {
		c.ScratchDir = os.TempDir()
	}
	c.DownloadParallelism = int(num("SLUICE_DOWNLOAD_PARALLELISM"))
	if c.DownloadParallelism == 0 {
		c.DownloadParallelism = 8
	}
	c.UploadParallelism = int(num("SLUICE_UPLOAD_PARALLELISM"))
	if c.UploadParallelism == 0 {
		c.UploadParallelism = 4
	}
	c.SweepParallelism = int(num("SLUICE_SWEEP_PARALLELISM"))
	if c.SweepParallelism == 0 {
		c.SweepParallelism = 8
	}
	c.MaxJobAttempts = int(num("SLUICE_MAX_JOB_ATTEMPTS"))
	if c.MaxJobAttempts == 0 {
		c.MaxJobAttempts = 3
	}
	c.DeadlineMargin = dur("SLUICE_DEADLINE_MARGIN", time.Minute)
	keep := func(name string) time.Duration {
		v := getenv(name)
		if v == "" || v == "0" {
			return 0
		}
		d, err := model.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Sprintf("%s=%q is not a retention (a duration such as 90d, 2w or 1y; 0 keeps blocks for ever)", name, v))
			return 0
		}
		return time.Duration(d)
	}
	c.Retention = Retention{Raw: keep(EnvRetention), FiveMinutes: keep(EnvRetention + "_5M"), OneHour: keep(EnvRetention + "_1H")}
	c.RetentionInterval = dur("SLUICE_RETENTION_INTERVAL", time.Hour)
	c.MetricsInterval = dur("SLUICE_METRICS_INTERVAL", 5*time.Minute)
	c.OverridesTTL = dur("SLUICE_OVERRIDES_TTL", time.Minute)
	switch v := getenv(EnvBucketIndex); v {
	case "", "off":
	case "cortex", "mimir":
		if c.Layout.SingleTenant != "" {
			errs = append(errs, fmt.Sprintf("%s=%q: a single-tenant (Thanos) bucket has no bucket index; Thanos lists the bucket", EnvBucketIndex, v))
		}
		c.BucketIndex = v
	default:
		errs = append(errs, fmt.Sprintf("%s=%q: want cortex, mimir or off", EnvBucketIndex, v))
	}
	c.BucketIndexInterval = dur("SLUICE_BUCKET_INDEX_INTERVAL", spec.DefaultBucketIndexInterval)
	c.BucketIndexMaxAge = dur("SLUICE_BUCKET_INDEX_MAX_AGE", 40*time.Minute)
	// A job works until DeadlineMargin before its function's deadline
	// (Compact.workContext): that is the time the planner sizes it for, as
	// the job itself does from its context.
	if c.Policy.JobTimeout <= c.DeadlineMargin {
		errs = append(errs, fmt.Sprintf("%s=%v is not longer than the %v deadline margin", spec.EnvJobTimeout, c.Policy.JobTimeout, c.DeadlineMargin))
	}
	c.Policy.JobTimeout -= c.DeadlineMargin
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("config: %s", strings.Join(errs, "; "))
	}
	return c, nil
}
