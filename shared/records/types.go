// Package records holds Sluice's state in DynamoDB: blocks, group versions,
// partitions and the agenda, and every transition between their states.
//
// Every exported method that changes state is ONE conditional write or ONE
// transaction whose condition names the state it leaves and the version or
// generation it expects (docs/design.md §3). A lost condition is an expected
// outcome and comes back as *ConditionLostError, never as a string to match.
package records

import (
	"time"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/stream"
)

// ObjectVersion is one S3 object version that a record names.
type ObjectVersion struct {
	RelPath   string `dynamodbav:"rel"`
	VersionID string `dynamodbav:"vid"`
	Size      int64  `dynamodbav:"size"`
	ETag      string `dynamodbav:"etag,omitempty"`
	// Checksum is the SHA-256 S3 keeps for a version Sluice wrote (see
	// blockstore.Uploaded.Checksum).
	Checksum string `dynamodbav:"sha256,omitempty"`
}

// Block is one block of one tenant.
type Block struct {
	Tenant string `dynamodbav:"tenant"`
	ID     string `dynamodbav:"id"`
	MinT   int64  `dynamodbav:"minT"`
	MaxT   int64  `dynamodbav:"maxT"`
	// Stream is the stream.ID of the block's producer ("" for a REJECTED
	// upload whose meta.json could not be read): blocks of different
	// streams never share a group.
	Stream string `dynamodbav:"stream,omitempty"`
	// Level is Sluice's level: 0 for uploads, the group's level for outputs.
	Level int                 `dynamodbav:"level"`
	State protocol.BlockState `dynamodbav:"state"`
	// Gen increases on every state transition; block ops carry it.
	Gen        int64  `dynamodbav:"gen"`
	ClaimedBy  string `dynamodbav:"claimedBy,omitempty"`
	ProducedBy string `dynamodbav:"producedBy,omitempty"`
	// Files are the block's index and chunks with their VersionIds.
	Files []ObjectVersion `dynamodbav:"files"`
	// Superseded are versions of an upload's files that the record does
	// not name, found at registration (the block was uploaded more than
	// once before its first notification was handled) or replaced when
	// `sluice retry` released it after a re-upload. They are deleted by a
	// DELETE_STRAY op, sent again on every duplicate notification and
	// every redelivered retry, so a registration or a release that dies
	// before sending it loses nothing.
	Superseded []ObjectVersion `dynamodbav:"superseded,omitempty"`
	// Meta is the meta.json body: read at registration for uploads, the
	// body the uploader publishes for outputs.
	Meta string `dynamodbav:"meta"`
	// MetaParts is how many part items hold Meta, compressed, when it is
	// too large for the block item (0: Meta is in the item); the store
	// fills Meta from them on every read.
	MetaParts     int    `dynamodbav:"metaParts,omitempty"`
	MetaVersionID string `dynamodbav:"metaVid,omitempty"`
	MarkVersionID string `dynamodbav:"markVid,omitempty"`
	// GlobalMarkVersionID is the version of the global deletion marker,
	// <tenant>/markers/<ULID>-deletion-mark.json, that the uploader writes
	// beside the block's own in a Cortex or Mimir bucket (and deletes with
	// the block).
	GlobalMarkVersionID string `dynamodbav:"gmVid,omitempty"`
	// NoCompactMarkVersionID is the no-compact-mark.json version Sluice
	// wrote for a QUARANTINED block, or another tool's that registration
	// found or a later notification brought (then NoCompactMarkOurs is
	// false and a release leaves it alone).
	NoCompactMarkVersionID string `dynamodbav:"ncVid,omitempty"`
	NoCompactMarkOurs      bool   `dynamodbav:"ncOurs,omitempty"`
	// GlobalNoCompactVersionID is the global no-compact marker
	// (<tenant>/markers/<ULID>-no-compact-mark.json) Sluice wrote beside
	// its own no-compact mark in a Cortex or Mimir bucket.
	GlobalNoCompactVersionID string `dynamodbav:"gncVid,omitempty"`
	Published                bool   `dynamodbav:"published"`
	NoCompact                bool   `dynamodbav:"noCompact,omitempty"`
	Series                   uint64 `dynamodbav:"series"`
	Samples                  uint64 `dynamodbav:"samples"`
	IndexBytes               uint64 `dynamodbav:"indexBytes"`
	// PartitionCount/PartitionID come from the block's own partition_info
	// (0 when unpartitioned); compaction skips sources that hold no series
	// of its partition.
	PartitionCount int `dynamodbav:"pcount,omitempty"`
	PartitionID    int `dynamodbav:"pid,omitempty"`
	// EmptyPartitions are partitions of PartitionCount that hold none of
	// the series of the block's data (its compaction sources) and have no
	// block: the version that made the block found them empty, or made it
	// from a block that had such partitions. The cleaner records them when
	// it activates the block; planning counts them as held (a downsampled
	// range is merged only when every partition of its sources is held,
	// and a partition's downsample replaces a coarser one only when the
	// partitions it does not hold are held).
	EmptyPartitions []int  `dynamodbav:"emptyParts,omitempty"`
	Reason          string `dynamodbav:"reason,omitempty"`
	// RetireAt is when the sweep next looks at a RETIRING block (unix ms):
	// until its mark is recorded, when a MARK still missing is sent again;
	// once it is, when the block may be deleted (the mark's time plus the
	// deletion delay).
	RetireAt int64 `dynamodbav:"retireAt,omitempty"`
	// MarkedAt is when the deletion mark was recorded (ms); the deletion
	// delay runs from then.
	MarkedAt int64 `dynamodbav:"markedAt,omitempty"`
	// Downsampled is the resolution (ms) this block's downsample was
	// published at, or found already held by blocks of that resolution; 0
	// while none is. Retention never deletes a block that is due a
	// downsample and lacks it (protocol.ExpireDownsampled).
	Downsampled int64 `dynamodbav:"downsampled,omitempty"`
	// Arrived is when the block was registered or committed (ms); a
	// split's partitions carry their source's (a range's readiness counts
	// arrivals).
	Arrived int64 `dynamodbav:"arrived"`
	// PublishedAt is when the block was complete in the bucket (ms): for an
	// upload, its meta.json's last-modified time, from the LIST at
	// registration; for one of Sluice's own blocks, when the uploader
	// recorded the meta.json it wrote; for a block `sluice retry` released,
	// the release. The bucket index's uploaded_at is taken from it, as
	// Cortex's and Mimir's updaters take it from meta.json: their queriers
	// give store-gateways a grace from it to load the block before a
	// query that misses it fails.
	PublishedAt int64 `dynamodbav:"publishedAt,omitempty"`
	UpdatedAt   int64 `dynamodbav:"updatedAt"`
}

// Key is the block's key in the bucket: <tenant>/<ULID>.
func (b Block) Key() string { return b.Tenant + "/" + b.ID }

// AllVersions lists every object version the block's record names,
// meta.json first (a reader must stop seeing the block before its files go),
// its marks last. A no-compact mark is named whoever wrote it: a deleted
// block goes with its whole directory, as Thanos deletes one.
func (b Block) AllVersions() []ObjectVersion {
	var out []ObjectVersion
	if b.MetaVersionID != "" {
		out = append(out, ObjectVersion{RelPath: "meta.json", VersionID: b.MetaVersionID})
	}
	out = append(out, b.Files...)
	if b.MarkVersionID != "" {
		out = append(out, ObjectVersion{RelPath: "deletion-mark.json", VersionID: b.MarkVersionID})
	}
	if b.NoCompactMarkVersionID != "" {
		out = append(out, ObjectVersion{RelPath: "no-compact-mark.json", VersionID: b.NoCompactMarkVersionID})
	}
	return out
}

// Names reports whether the record names this object version.
func (b Block) Names(relPath, versionID string) bool {
	for _, v := range b.AllVersions() {
		if v.RelPath == relPath && v.VersionID == versionID {
			return true
		}
	}
	return false
}

// Group is a group's head record: its current version and that version's
// plan. Earlier versions live on in their partition items.
type Group struct {
	Tenant     string              `dynamodbav:"tenant"`
	Key        planning.GroupKey   `dynamodbav:"-"`
	KeyString  string              `dynamodbav:"group"`
	Version    int64               `dynamodbav:"version"`
	State      protocol.GroupState `dynamodbav:"state"`
	CreatedAt  int64               `dynamodbav:"createdAt"` // ms, of this version
	UpdatedAt  int64               `dynamodbav:"updatedAt"` // ms, last transition
	Partitions int                 `dynamodbav:"partitions"`
	Sources    []string            `dynamodbav:"sources"`
	// EverCompleted is set once any version completed: a late block then
	// goes to this level (planning.Target).
	EverCompleted bool `dynamodbav:"everCompleted,omitempty"`
	// Failures counts the failed job attempts of this version — a job's
	// own error, or a lease that expired under a job that died — and of
	// the versions before it over the same sources. At MaxJobAttempts the
	// cleaner quarantines the source a failure blamed (the last to blame
	// one: LastErrorBlock stays when a later failure blames none), or the
	// group. The last failure's text and kind are kept for status.
	Failures       int         `dynamodbav:"failures,omitempty"`
	LastError      string      `dynamodbav:"lastError,omitempty"`
	LastErrorBlock string      `dynamodbav:"lastErrorBlock,omitempty"`
	LastErrorKind  FailureKind `dynamodbav:"lastErrorKind,omitempty"`
	// Reason says why a version was superseded or quarantined.
	Reason string `dynamodbav:"reason,omitempty"`
	// QuarantinedSource is the source block the version's failures
	// quarantined, superseding it (QuarantineSource). A next version over
	// the same sources holds that block again, which only `sluice retry`
	// makes a source again: the failures that blamed it are not carried.
	QuarantinedSource string `dynamodbav:"quarantinedSource,omitempty"`
	// History summarises the versions before this one (the newest
	// MaxHistory), so status can tell why a group is at its version.
	History []VersionSummary `dynamodbav:"history,omitempty"`
	// ClaimUntil (ms) is when the invocation of the planner that created
	// this version ends. Only that planner claims its sources and moves
	// the version on, so one still CLAIMING after then was abandoned
	// (ClaimAbandoned). Zero on versions written before it was recorded.
	ClaimUntil int64 `dynamodbav:"claimUntil,omitempty"`
}

// MaxInvocation is the longest a Lambda invocation runs (its timeout's
// upper bound): the claim deadline of a planner whose context has none,
// and of a version recorded without one.
const MaxInvocation = 15 * time.Minute

// ClaimAbandoned reports whether g is a version still CLAIMING whose
// planner's invocation has ended: nobody will claim its sources or plan
// it, and superseding it (fenced: a claim or a plan of it after that is
// lost) lets the group be planned again.
func (g Group) ClaimAbandoned(now time.Time) bool {
	if g.State != protocol.GroupClaiming {
		return false
	}
	until := g.ClaimUntil
	if until == 0 {
		until = g.CreatedAt + MaxInvocation.Milliseconds()
	}
	return now.UnixMilli() > until
}

// MaxHistory bounds Group.History.
const MaxHistory = 8

// VersionSummary is how an earlier version of a group ended.
type VersionSummary struct {
	Version        int64               `dynamodbav:"v"`
	State          protocol.GroupState `dynamodbav:"state"`
	Sources        int                 `dynamodbav:"sources"`
	Partitions     int                 `dynamodbav:"partitions,omitempty"`
	Failures       int                 `dynamodbav:"failures,omitempty"`
	LastErrorKind  FailureKind         `dynamodbav:"kind,omitempty"`
	LastErrorBlock string              `dynamodbav:"block,omitempty"`
	Reason         string              `dynamodbav:"reason,omitempty"`
}

// Summary is g as a history entry.
func (g Group) Summary() VersionSummary {
	return VersionSummary{Version: g.Version, State: g.State, Sources: len(g.Sources), Partitions: g.Partitions, Failures: g.Failures,
		LastErrorKind: g.LastErrorKind, LastErrorBlock: g.LastErrorBlock, Reason: g.Reason}
}

// NextHistory is the history a version after g carries: g's, with g.
func (g Group) NextHistory() []VersionSummary {
	h := append(append([]VersionSummary(nil), g.History...), g.Summary())
	if len(h) > MaxHistory {
		h = h[len(h)-MaxHistory:]
	}
	return h
}

// FailureKind classifies a failed job attempt.
type FailureKind string

// Failure kinds.
const (
	// FailureSource: a source block is to blame (LastErrorBlock).
	FailureSource FailureKind = "source"
	// FailureDeadline: the job ran out of its function's time.
	FailureDeadline FailureKind = "deadline"
	// FailureDied: the job's lease expired without a commit or a report.
	FailureDied FailureKind = "died"
	// FailureNotDeterministic: an attempt found its output keys holding
	// other bytes; the version is superseded so the next one writes under
	// new output ULIDs.
	FailureNotDeterministic FailureKind = "not-deterministic"
	// FailureDoesNotFit: a job's estimate (planning.Estimate) was over its
	// function's limits before it read anything, and more partitions
	// would fit; the version is superseded and re-planned with twice as
	// many.
	FailureDoesNotFit FailureKind = "does-not-fit"
	// FailureTooBig: as FailureDoesNotFit, but no partition count fits
	// (sources too big to read whole); the group is quarantined at once.
	FailureTooBig FailureKind = "too-big"
	// FailureOther: any other error of the job's own work.
	FailureOther FailureKind = "error"
)

// Failure is one failed job attempt, as RecordFailure records it.
type Failure struct {
	Kind    FailureKind
	Block   string // the blamed source's ULID, for FailureSource
	Message string
}

// Ref names the group's version as a protocol.VersionRef does: the value
// of a source's claimedBy and in every log line about it.
func (g Group) Ref() string {
	return protocol.VersionRef{Tenant: g.Tenant, Group: g.Key, Version: g.Version}.String()
}

// partitionRef names partition p of version v.
func partitionRef(tenant string, g planning.GroupKey, v int64, p int) string {
	return protocol.PartitionRef{VersionRef: protocol.VersionRef{Tenant: tenant, Group: g, Version: v}, Partition: p}.String()
}

// Partition is partition p of version v of a group.
type Partition struct {
	Tenant     string                  `dynamodbav:"tenant"`
	Group      string                  `dynamodbav:"group"`
	Version    int64                   `dynamodbav:"version"`
	Index      int                     `dynamodbav:"partition"`
	State      protocol.PartitionState `dynamodbav:"state"`
	LeaseOwner string                  `dynamodbav:"leaseOwner,omitempty"`
	LeaseUntil int64                   `dynamodbav:"leaseUntil,omitempty"` // ms
	Attempt    int                     `dynamodbav:"attempt"`
	// CreatedAt is the version's creation time (ms); with (tenant, group,
	// version, partition) it derives the output ULID, so an old version's
	// output keys are known after the head moved on.
	CreatedAt int64 `dynamodbav:"createdAt"`
	// Output is the output block's ULID ("" until DONE, and for an empty
	// partition).
	Output    string `dynamodbav:"output,omitempty"`
	Empty     bool   `dynamodbav:"empty,omitempty"`
	UpdatedAt int64  `dynamodbav:"updatedAt"`
	// Failures and LastError count and tell this partition's failed
	// attempts (the group head counts them for the version).
	Failures  int    `dynamodbav:"failures,omitempty"`
	LastError string `dynamodbav:"lastError,omitempty"`
}

// StreamRecord is what `sluice status` and the compact function know of a
// stream: its labels (without the replica labels) and resolution, which
// every output of the stream carries in thanos.labels and
// thanos.downsample.resolution. Written with the stream's first block.
type StreamRecord struct {
	Tenant     string            `dynamodbav:"tenant"`
	ID         string            `dynamodbav:"id"`
	Labels     map[string]string `dynamodbav:"labels"`
	Resolution int64             `dynamodbav:"resolution"`
}

// Stream returns the stream the record describes.
func (r StreamRecord) Stream() stream.Stream {
	labels := r.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return stream.Stream{Labels: labels, Resolution: r.Resolution}
}
