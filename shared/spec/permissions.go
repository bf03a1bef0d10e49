package spec

import (
	"slices"
	"time"
)

// This file holds what only a real AWS deployment needs on top of the
// resources in spec.go: the deployment's bucket layout settings, each
// function's IAM permissions, the alarm thresholds and the cleaner's
// schedule. The CDK stack (infra/) grants exactly these and its tests
// assert them; the emulator does not enforce IAM, so a function that needs
// more than is written here fails only in AWS — add the action here first.

// Environment variables that tell functions and the CLI where blocks live
// in the bucket. They complement the Env* names in spec.go.
const (
	// EnvKeyPrefix is the key prefix under which blocks live ("" = the
	// bucket root, otherwise it ends with "/"), e.g. "prometheus/".
	EnvKeyPrefix = "SLUICE_PREFIX"
	// EnvLayout is the bucket layout: LayoutMultiTenant or
	// LayoutSingleTenant. Unset means LayoutMultiTenant.
	EnvLayout = "SLUICE_LAYOUT"
	// EnvTenant names the one tenant of a LayoutSingleTenant bucket.
	EnvTenant = "SLUICE_TENANT"
)

// Bucket layouts (docs/design.md §1).
const (
	// LayoutMultiTenant is <prefix><tenant>/<ULID>/... (Cortex, Mimir).
	LayoutMultiTenant = "multi-tenant"
	// LayoutSingleTenant is <prefix><ULID>/... (a Thanos bucket).
	LayoutSingleTenant = "single-tenant"
)

// SweepEvent is the payload of the scheduled event that invokes the cleaner
// for a sweep (docs/design.md §4.3: the cleaner runs per note and on a schedule).
const SweepEvent = `{"sluice":"sweep"}`

// RetentionEvent is the payload of the scheduled event that invokes the
// cleaner for a retention pass, on a schedule of its own.
const RetentionEvent = `{"sluice":"retention"}`

// DefaultRetentionInterval is how often the retention schedule runs.
const DefaultRetentionInterval = time.Hour

// BucketIndexEvent is the payload of the scheduled event that invokes the
// cleaner to ask for every tenant's bucket index (Cortex and Mimir
// buckets; nothing is done when SLUICE_BUCKET_INDEX is off).
const BucketIndexEvent = `{"sluice":"bucket-index"}`

// DefaultBucketIndexInterval is how often that schedule runs.
const DefaultBucketIndexInterval = 15 * time.Minute

// DefaultSweepInterval is how often the schedule invokes the cleaner.
const DefaultSweepInterval = 5 * time.Minute

// MetricsEvent is the payload of the scheduled event that invokes the
// cleaner for its metrics pass: every tenant's gauges (the oldest block
// waiting for compaction, what is quarantined, what is planned), emitted
// as CloudWatch metrics for the alarms.
const MetricsEvent = `{"sluice":"metrics"}`

// DefaultMetricsInterval is how often that schedule runs: the alarms on
// its gauges look at 5-minute periods.
const DefaultMetricsInterval = 5 * time.Minute

// Schedule is one scheduled invocation of the cleaner.
type Schedule struct {
	// Name is the rule's construct id in the stack.
	Name     string
	Event    string
	Interval time.Duration
	// Why is the rule's description.
	Why string
}

// Schedules are the cleaner's schedules, the sweep's every sweep. A pass
// whose feature is off (no retention, no bucket index) returns at once.
func Schedules(sweep time.Duration) []Schedule {
	return []Schedule{
		{Name: "CleanerSweep", Event: SweepEvent, Interval: sweep, Why: "Sluice cleaner sweep"},
		{Name: "CleanerRetention", Event: RetentionEvent, Interval: DefaultRetentionInterval, Why: "Sluice retention"},
		{Name: "CleanerBucketIndex", Event: BucketIndexEvent, Interval: DefaultBucketIndexInterval, Why: "Sluice bucket index"},
		{Name: "CleanerMetrics", Event: MetricsEvent, Interval: DefaultMetricsInterval, Why: "Sluice metrics"},
	}
}

// ObjectPattern is an IAM resource pattern for object keys, relative to the
// deployment's key prefix. The leading "*/" stands for "<tenant>/<ULID>/"
// in a multi-tenant bucket and "<ULID>/" in a single-tenant one.
type ObjectPattern string

// The files of a block (docs/design.md §1).
const (
	MetaObjects  ObjectPattern = "*/meta.json"
	IndexObjects ObjectPattern = "*/index"
	ChunkObjects ObjectPattern = "*/chunks/*"
	// TombstonesObjects: a plain Prometheus block may carry one; the
	// planner's LIST records it, compact may read it, the uploader deletes it.
	TombstonesObjects    ObjectPattern = "*/tombstones"
	DeletionMarkObjects  ObjectPattern = "*/deletion-mark.json"
	NoCompactMarkObjects ObjectPattern = "*/no-compact-mark.json"
)

// BucketIndexObjects is a tenant's bucket index (Cortex and Mimir
// buckets), which the uploader rewrites with If-Match on the ETag it
// replaces: the one object Sluice overwrites, and only conditionally.
const BucketIndexObjects ObjectPattern = "*/bucket-index.json.gz"

// GlobalMarkerObjects are a tenant's global markers in a Cortex or Mimir
// bucket (<tenant>/markers/<ULID>-deletion-mark.json), which the uploader
// writes beside a block's own mark and deletes with the block.
const GlobalMarkerObjects ObjectPattern = "*/markers/*-mark.json"

// OverridesObjects is the per-tenant runtime configuration
// (shared/overrides) at the prefix's root, which the planner and the
// cleaner read.
const OverridesObjects ObjectPattern = "sluice-overrides.yaml"

// AnyBlockObject is every object under a block's prefix, including files
// other writers leave there (an old Thanos index.cache.json): the
// uploader deletes a retired block's recorded versions whatever their
// names, and stray versions no record names.
const AnyBlockObject ObjectPattern = "*/*"

// BlockObjects is every file a block may have.
var BlockObjects = []ObjectPattern{MetaObjects, IndexObjects, ChunkObjects, TombstonesObjects, DeletionMarkObjects, NoCompactMarkObjects}

// S3 action sets. None is a wildcard: every action is spelled out.
var (
	// S3Read reads an object or its metadata, by key or by VersionId.
	// HeadObject is authorised by the same two actions.
	S3Read = []string{"s3:GetObject", "s3:GetObjectVersion"}
	// S3Write creates objects, single-part or multipart (CreateMultipartUpload,
	// UploadPart and CompleteMultipartUpload are authorised by s3:PutObject).
	S3Write = []string{"s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}
	// S3Delete removes an object version (docs/design.md §1: every DELETE names
	// a VersionId) or, for a key without versions, the object.
	S3Delete = []string{"s3:DeleteObject", "s3:DeleteObjectVersion"}
	// S3ListKeys lists keys. It is granted only with an s3:prefix condition
	// on the deployment's key prefix. Without it, reading a missing key
	// answers 403 instead of 404.
	S3ListKeys = []string{"s3:ListBucket"}
	// S3ListVersions lists object versions (ListObjectVersions), under the
	// same s3:prefix condition.
	S3ListVersions = []string{"s3:ListBucketVersions"}
)

// DynamoDB action sets on the one table. TransactWriteItems is authorised
// per item by PutItem, UpdateItem, DeleteItem and ConditionCheckItem;
// TransactGetItems by GetItem. Nobody scans: the cleaner's sweep queries
// its agenda (shared/records/agenda.go).
var (
	DynamoRead  = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}
	DynamoWrite = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"}
	// DynamoDelete is the cleaner's only: it removes agenda entries and
	// range-membership index items (records.DoneAgendaAll, StartDelete,
	// FinishVersion). Block, group and partition records end by state and
	// TTL, never by a delete.
	DynamoDelete = []string{"dynamodb:DeleteItem"}
)

// S3Grant allows Actions on the objects matching any of Objects.
type S3Grant struct {
	Actions []string
	Objects []ObjectPattern
	// OnlyIfNoneMatch makes s3:PutObject conditional on the request's
	// If-None-Match header (the s3:if-none-match condition key), as AWS
	// lets a policy enforce conditional writes: the role can create these
	// objects and never overwrite one. CreateMultipartUpload and
	// UploadPart carry no conditional header, so they are allowed by
	// s3:ObjectCreationOperation = false; CompleteMultipartUpload, which
	// creates the object, must carry If-None-Match like a PutObject.
	OnlyIfNoneMatch bool
	// Conditional makes s3:PutObject need one of If-None-Match or
	// If-Match (the s3:if-none-match and s3:if-match condition keys): the
	// role creates the object or replaces the version it read, never
	// overwrites blindly. Only the bucket index is written this way.
	Conditional bool
}

// Permissions is what one function may do beyond consuming its own queue
// (Queue.Consumer) and sending to Function.Sends.
type Permissions struct {
	// S3 are the object-level grants.
	S3 []S3Grant
	// S3List are the bucket-level list actions, scoped to the key prefix.
	S3List []string
	// DynamoDB are the item actions on the table.
	DynamoDB []string
}

// Permissions returns the IAM permissions of function id, fitted to what
// shared/pipeline calls:
//
//   - planner: GetObject of meta.json and ranged GETs of a block's index
//     and chunk segments (registration's checks); ListObjectVersions of
//     one block's prefix. Records: register, claim, create versions,
//     agenda entries, release quarantined blocks and groups.
//   - compact: reads source blocks by VersionId; creates its output's
//     index and chunks (single-part or multipart, only with If-None-Match:
//     never overwrites one), never meta.json or a marker: the uploader
//     publishes. Records: lease, commit, record a failed attempt.
//   - cleaner: ListObjectVersions under output keys for the orphan sweep;
//     reads no object but the runtime overrides and deletes none, it
//     sends DELETE ops. Records: every
//     transition after commit, and its agenda.
//   - uploader: the ONLY writer of meta.json and markers (PutObject only
//     with If-None-Match, HeadObject after a 412) and the ONLY deleter
//     (DeleteObject with a VersionId); it also rewrites a tenant's bucket
//     index (HeadObject, then PutObject with If-Match or If-None-Match). Records: reads a block's gen and
//     records what it published or marked; it never creates a record.
//
// Every function also holds s3:ListBucket under the prefix where it reads
// objects, so a missing key answers 404 rather than 403.
func (r Resources) Permissions(id FunctionID) Permissions {
	cat := func(sets ...[]string) []string {
		var out []string
		for _, s := range sets {
			out = append(out, s...)
		}
		return out
	}
	published := []ObjectPattern{MetaObjects, DeletionMarkObjects, NoCompactMarkObjects, GlobalMarkerObjects}
	switch id {
	case Planner:
		return Permissions{
			S3:       []S3Grant{{Actions: S3Read, Objects: append(slices.Clone(BlockObjects), OverridesObjects)}},
			S3List:   cat(S3ListKeys, S3ListVersions),
			DynamoDB: cat(DynamoRead, DynamoWrite),
		}
	case Compact:
		return Permissions{
			S3: []S3Grant{
				{Actions: S3Read, Objects: BlockObjects},
				{Actions: S3Write, Objects: []ObjectPattern{IndexObjects, ChunkObjects}, OnlyIfNoneMatch: true},
			},
			S3List:   S3ListKeys,
			DynamoDB: cat(DynamoRead, DynamoWrite),
		}
	case Cleaner:
		return Permissions{
			S3:       []S3Grant{{Actions: S3Read, Objects: []ObjectPattern{OverridesObjects}}},
			S3List:   cat(S3ListKeys, S3ListVersions),
			DynamoDB: cat(DynamoRead, DynamoWrite, DynamoDelete),
		}
	case Uploader:
		return Permissions{
			S3: []S3Grant{
				{Actions: S3Read, Objects: published},
				{Actions: S3Write, Objects: published, OnlyIfNoneMatch: true},
				{Actions: S3Delete, Objects: []ObjectPattern{AnyBlockObject}},
				{Actions: S3Read, Objects: []ObjectPattern{BucketIndexObjects}},
				{Actions: []string{"s3:PutObject"}, Objects: []ObjectPattern{BucketIndexObjects}, Conditional: true},
			},
			S3List:   S3ListKeys,
			DynamoDB: cat(DynamoRead, []string{"dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"}),
		}
	}
	panic("spec: unknown function " + string(id))
}

// AgeAlarm is the age of a queue's oldest message above which the queue's
// alarm fires: two visibility timeouts (a message that old has failed at
// least once or waits behind a backlog), and never less than 15 minutes.
func (q Queue) AgeAlarm() time.Duration {
	return max(15*time.Minute, 2*q.VisibilityTimeout)
}
