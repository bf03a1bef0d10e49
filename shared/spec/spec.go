// Package spec is the one description of every AWS resource Sluice needs.
//
// The local provisioner (localstack/provision) and the CDK stack (infra/)
// both read it, so the emulator and a real deployment cannot drift: a queue's
// visibility timeout, its DLQ and redrive count, the table's key schema and
// the bucket's notification filter are written down here once.
package spec

import (
	"fmt"
	"time"
)

// QueueID names a queue by its role in the pipeline.
type QueueID string

// The four queues of docs/design.md §2.
const (
	// BlockEvents receives S3 ObjectCreated events for */meta.json. S3 cannot
	// notify a FIFO queue, so this one is standard.
	BlockEvents QueueID = "block-events"
	// CompactionJobs carries one job per group version partition;
	// MessageGroupId is the output block key.
	CompactionJobs QueueID = "compaction-jobs"
	// CleanerEvents carries "look at group g" notifications;
	// MessageGroupId is tenant/group.
	CleanerEvents QueueID = "cleaner-events"
	// BlockOps carries PUBLISH / MARK / DELETE per block key;
	// MessageGroupId is the block key <tenant>/<ULID>.
	BlockOps QueueID = "block-ops"
)

// FunctionID names a Lambda function.
type FunctionID string

// The four functions of docs/design.md §2.
const (
	Planner  FunctionID = "planner"
	Compact  FunctionID = "compact"
	Cleaner  FunctionID = "cleaner"
	Uploader FunctionID = "uploader"
)

// Queue describes one queue and its dead-letter queue.
type Queue struct {
	ID QueueID
	// FIFO queues use explicit deduplication ids (never content-based) and
	// high-throughput mode (deduplication and throughput per message group).
	FIFO bool
	// Consumer is the function that the queue feeds.
	Consumer FunctionID
	// VisibilityTimeout is at least 6 × the consumer's timeout plus its
	// batching window, as AWS recommends for Lambda event sources.
	VisibilityTimeout time.Duration
	// MaxReceiveCount is how often a message is received before it is
	// moved to the DLQ: 5, or 10 for a FIFO queue read in batches. There a
	// message is also received, and returned unprocessed, each time an
	// earlier message of its group in the same batch fails (Lambda's
	// contract for FIFO batches), so 5 receives could send to the DLQ an
	// op that never failed itself more than once or twice (chaos seed 2
	// in make test, 2026-12-03: a PUBLISH op of a block since deleted).
	MaxReceiveCount int
	// BatchSize is the event source's batch size (≤ 10 for FIFO).
	BatchSize int
	// BatchingWindow is how long Lambda gathers a standard queue's
	// messages into one batch before invoking its consumer (0 to 5
	// minutes; 0 invokes as soon as any is there). The planner's is
	// PlannerBatchingWindow. The local event source runner does not wait:
	// it hands over what one receive returns, as a window of 0 does.
	BatchingWindow time.Duration
	// MaxConcurrency caps concurrent invocations from this queue (≥ 2).
	MaxConcurrency int
	// Retention is how long messages (and DLQ messages) are kept.
	Retention time.Duration
}

// Function describes one Lambda function.
type Function struct {
	ID FunctionID
	// Timeout of one invocation.
	Timeout time.Duration
	// MemoryMB of the function.
	MemoryMB int
	// EphemeralMB is /tmp size: the compact function downloads sources and
	// writes its output there.
	EphemeralMB int
	// Sends lists the queues the function may send to; the CDK stack grants
	// exactly these.
	Sends []QueueID
}

// Table describes the one DynamoDB table of docs/design.md §3.
type Table struct {
	PartitionKey string
	SortKey      string
	// TTLAttribute holds an epoch-seconds expiry for records that may be
	// forgotten (retired blocks, finished groups' partitions).
	TTLAttribute string
}

// Bucket describes the block bucket's notification and versioning needs.
type Bucket struct {
	// Versioned must be true: every DELETE names a VersionId (docs/design.md §1).
	Versioned bool
	// NotifySuffixes are the key suffixes whose ObjectCreated events reach
	// BlockEvents, one notification each: meta.json (a block is complete)
	// and -mark.json (a deletion or no-compact mark, Sluice's own or
	// another tool's, which the planner honours). No suffix is a suffix of
	// another, as S3 requires of configurations that share an event type.
	NotifySuffixes []string
}

// Resources is the whole set, named under one prefix.
type Resources struct {
	// Prefix is prepended to every physical name, so several stacks (or
	// several tests) share one account or one emulator.
	Prefix    string
	Bucket    Bucket
	Table     Table
	Queues    []Queue
	Functions []Function
}

// Default returns the resources of a Sluice deployment named prefix.
func Default(prefix string) Resources {
	fns := []Function{
		{ID: Planner, Timeout: 60 * time.Second, MemoryMB: 512, EphemeralMB: 512,
			Sends: []QueueID{CompactionJobs, CleanerEvents, BlockOps}},
		{ID: Compact, Timeout: 900 * time.Second, MemoryMB: 4096, EphemeralMB: 10240,
			Sends: []QueueID{CleanerEvents}},
		{ID: Cleaner, Timeout: 120 * time.Second, MemoryMB: 512, EphemeralMB: 512,
			Sends: []QueueID{BlockEvents, CompactionJobs, CleanerEvents, BlockOps}},
		{ID: Uploader, Timeout: 60 * time.Second, MemoryMB: 256, EphemeralMB: 512,
			Sends: []QueueID{CleanerEvents}},
	}
	r := Resources{
		Prefix:    prefix,
		Bucket:    Bucket{Versioned: true, NotifySuffixes: []string{"meta.json", "-mark.json"}},
		Table:     Table{PartitionKey: "PK", SortKey: "SK", TTLAttribute: "expiresAt"},
		Functions: fns,
	}
	q := func(id QueueID, fifo bool, fn FunctionID, batch, conc int, window time.Duration) Queue {
		return Queue{
			ID: id, FIFO: fifo, Consumer: fn,
			VisibilityTimeout: 6*r.Function(fn).Timeout + window,
			MaxReceiveCount:   maxReceiveCount(fifo, batch),
			BatchSize:         batch,
			BatchingWindow:    window,
			MaxConcurrency:    conc,
			Retention:         14 * 24 * time.Hour,
		}
	}
	r.Queues = []Queue{
		q(BlockEvents, false, Planner, 10, 10, PlannerBatchingWindow),
		q(CompactionJobs, true, Compact, 1, 50, 0),
		q(CleanerEvents, true, Cleaner, 10, 5, 0),
		q(BlockOps, true, Uploader, 10, 20, 0),
	}
	return r
}

// PlannerBatchingWindow is the block-events queue's batching window. The
// planner plans each group a batch asks for once, after registering every
// block of the batch (docs/protocol.md, "A batch plans each group once"):
// the replicas of one Prometheus and the ingesters of one Cortex or Mimir
// tenant cut the same 2h block at the same boundary and ship it close
// together, and a version's partition outputs are published together, so
// gathering them costs one planning of their range where each event alone
// costs one (a read of the heads above, a Query of the range's members and
// a read of its blocks). Twenty seconds is nothing beside a range that
// waits hours to be covered; it is added to each hop from a cleaner's
// re-plan to the next level's jobs.
const PlannerBatchingWindow = 20 * time.Second

// maxReceiveCount is Queue.MaxReceiveCount's default.
func maxReceiveCount(fifo bool, batch int) int {
	if fifo && batch > 1 {
		return 10
	}
	return 5
}

// Function returns the function with id; it panics on an unknown id, which
// is a programming error (ids are the constants above).
func (r Resources) Function(id FunctionID) Function {
	for _, f := range r.Functions {
		if f.ID == id {
			return f
		}
	}
	panic(fmt.Sprintf("spec: unknown function %q", id))
}

// Queue returns the queue with id; it panics on an unknown id.
func (r Resources) Queue(id QueueID) Queue {
	for _, q := range r.Queues {
		if q.ID == id {
			return q
		}
	}
	panic(fmt.Sprintf("spec: unknown queue %q", id))
}

// BucketName is the physical name of a bucket that Sluice creates.
func (r Resources) BucketName() string { return r.Prefix + "-blocks" }

// TableName is the physical name of the table.
func (r Resources) TableName() string { return r.Prefix + "-state" }

// QueueName is the physical name of a queue (".fifo" appended for FIFO).
func (r Resources) QueueName(q Queue) string {
	n := r.Prefix + "-" + string(q.ID)
	if q.FIFO {
		n += ".fifo"
	}
	return n
}

// DLQName is the physical name of a queue's dead-letter queue, of the same
// kind as the queue.
func (r Resources) DLQName(q Queue) string {
	n := r.Prefix + "-" + string(q.ID) + "-dlq"
	if q.FIFO {
		n += ".fifo"
	}
	return n
}

// GoMemLimit is the soft memory limit the Go runtime of f is given
// (GOMEMLIMIT, as "<n>MiB"): its memory less a tenth (at least 64 MiB). The
// collector then works harder as the heap nears the function's memory
// rather than letting it grow to twice what is live, which is what jobs
// are sized by (planning.JobMemory).
func (f Function) GoMemLimit() string {
	return fmt.Sprintf("%dMiB", f.MemoryMB-max(f.MemoryMB/10, 64))
}

// EnvGoMemLimit is the Go runtime's own setting, given per function.
const EnvGoMemLimit = "GOMEMLIMIT"

// FunctionName is the physical name of a function.
func (r Resources) FunctionName(f Function) string { return r.Prefix + "-" + string(f.ID) }

// Environment variable names through which functions and the CLI learn the
// resources. One place, so the CDK stack, the provisioner and
// shared/config agree.
const (
	EnvBucket       = "SLUICE_BUCKET"
	EnvTable        = "SLUICE_TABLE"
	EnvBlockEvents  = "SLUICE_BLOCK_EVENTS_URL"
	EnvJobsQueue    = "SLUICE_COMPACTION_JOBS_URL"
	EnvCleanerQueue = "SLUICE_CLEANER_EVENTS_URL"
	EnvBlockOps     = "SLUICE_BLOCK_OPS_URL"
)

// Job limits: what one compaction job may use, which the planner sizes
// partitions by and every job checks itself against (planning.Size).
const (
	EnvScratchBytes   = "SLUICE_SCRATCH_BYTES"
	EnvJobMemoryBytes = "SLUICE_JOB_MEMORY_BYTES"
	EnvJobTimeout     = "SLUICE_JOB_TIMEOUT"
)

// ScratchHeadroomMB is the part of the compact function's /tmp a job's
// scratch budget leaves free (the runtime's own files, slack);
// MemoryHeadroomMB the part of its memory a job's estimate leaves to the
// Go collector (live bytes are what a job is sized by; the heap grows
// past them before a collection).
const (
	ScratchHeadroomMB = 2048
	MemoryHeadroomMB  = 512
)

// JobLimits are the job-limit settings that follow from the compact
// function's spec: its /tmp less ScratchHeadroomMB, its memory less
// MemoryHeadroomMB, and its timeout. The CDK stack gives them to every
// function, so the planner sizes jobs by the function that runs them.
func (r Resources) JobLimits() map[string]string {
	f := r.Function(Compact)
	return map[string]string{
		EnvScratchBytes:   fmt.Sprint(uint64(max(f.EphemeralMB-ScratchHeadroomMB, 512)) << 20),
		EnvJobMemoryBytes: fmt.Sprint(uint64(max(f.MemoryMB-MemoryHeadroomMB, 128)) << 20),
		EnvJobTimeout:     f.Timeout.String(),
	}
}

// QueueURLEnv is the environment variable that carries a queue's URL.
func QueueURLEnv(id QueueID) string {
	switch id {
	case BlockEvents:
		return EnvBlockEvents
	case CompactionJobs:
		return EnvJobsQueue
	case CleanerEvents:
		return EnvCleanerQueue
	case BlockOps:
		return EnvBlockOps
	}
	panic(fmt.Sprintf("spec: unknown queue %q", id))
}
