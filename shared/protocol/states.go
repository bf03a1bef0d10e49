package protocol

// BlockState is a block's place in its life.
type BlockState string

// Block states.
const (
	// BlockLive: readable and, when published and unclaimed, plannable.
	BlockLive BlockState = "LIVE"
	// BlockClaimed: a source of one group version (claimedBy).
	BlockClaimed BlockState = "CLAIMED"
	// BlockRetiring: its group completed; a deletion mark is (being) written
	// and it is deleted after the deletion delay.
	BlockRetiring BlockState = "RETIRING"
	// BlockDeleted: its objects are deleted (or being deleted).
	BlockDeleted BlockState = "DELETED"
	// BlockPending: an output of a version that has not completed yet.
	BlockPending BlockState = "PENDING"
	// BlockDiscarded: an output of a superseded version; its objects are
	// deleted.
	BlockDiscarded BlockState = "DISCARDED"
	// BlockRejected: an upload that cannot be compacted (corrupt meta.json,
	// missing files). It is never touched; `sluice status` shows the reason.
	BlockRejected BlockState = "REJECTED"
	// BlockQuarantined: a source that compaction failed on, again and
	// again, for a reason that names it (corrupt index or chunks, files
	// gone). It stays readable and is never a source again until `sluice
	// retry` releases it; Sluice writes a no-compact-mark.json for it, as
	// Thanos and Cortex do, so their tools leave it alone too.
	BlockQuarantined BlockState = "QUARANTINED"
)

// Final reports whether no transition leaves s: a block read in a final
// state is in it forever.
func (s BlockState) Final() bool { return s == BlockDeleted || s == BlockDiscarded }

// GroupState is the state of a group's current version.
type GroupState string

// Group version states.
const (
	GroupClaiming   GroupState = "CLAIMING"
	GroupPlanned    GroupState = "PLANNED"
	GroupComplete   GroupState = "COMPLETE"
	GroupRetired    GroupState = "RETIRED"
	GroupSuperseded GroupState = "SUPERSEDED"
	// GroupQuarantined: the version's jobs failed MaxJobAttempts times for
	// a reason that names no source block. Its sources stay claimed (and
	// readable) and no new version is planned until `sluice retry`.
	GroupQuarantined GroupState = "QUARANTINED"
)

// Unfinished reports whether a version in this state blocks a new version.
func (s GroupState) Unfinished() bool {
	return s == GroupClaiming || s == GroupPlanned || s == GroupComplete
}

// PartitionState is a partition's place in its version.
type PartitionState string

// Partition states.
const (
	PartitionPending PartitionState = "PENDING"
	PartitionRunning PartitionState = "RUNNING"
	PartitionDone    PartitionState = "DONE"
)
