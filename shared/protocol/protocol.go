// Package protocol owns Sluice's state machine, as data: the states of
// blocks, group versions and partitions, every transition between them,
// and what each transition's condition requires of the item it writes and
// of the other items of its transaction.
//
// It is the one place the protocol is written down. shared/records builds
// every DynamoDB condition from it and tags every write with the Change it
// makes; the tests' Monitor judges those typed changes by it (never by
// parsing expressions); docs/protocol.md's transition table is checked
// against Table by a test. Like etcd's raft, it knows nothing of storage
// or the network: no AWS, no I/O.
package protocol

import (
	"fmt"
	"slices"
)

// Item is the kind of record a transition writes.
type Item string

// Items.
const (
	ItemBlock     Item = "block"
	ItemVersion   Item = "version" // a group's head: its current version
	ItemPartition Item = "partition"
)

// Require is one thing a transition's condition demands of its item,
// besides the state it leaves.
type Require string

// What a condition can require of its own item.
const (
	// Absent: the item does not exist yet (a create).
	Absent Require = "absent"
	// AtVersion: the head is at the version the writer acts on.
	AtVersion Require = "at version"
	// AtGen: the block is at the gen the writer read.
	AtGen Require = "at gen"
	// LeaseHolder: the partition's lease is the writer's.
	LeaseHolder Require = "lease holder"
	// LeaseExpired: the partition is held by the holder the writer read,
	// whose lease ran out before the writer's now.
	LeaseExpired Require = "lease expired"
	// ClaimedByWriter: the block is claimed by the version the writer acts for.
	ClaimedByWriter Require = "claimed by the version"
	// Unclaimed: no version claims the block.
	Unclaimed Require = "unclaimed"
	// Published: the block's meta.json is in the bucket.
	Published Require = "published"
	// ProducedByWriter: the block is an output of the partition the writer
	// acts for.
	ProducedByWriter Require = "produced by the partition"
	// MarkRecorded: the block's deletion mark is recorded.
	MarkRecorded Require = "deletion mark recorded"
	// NoCompactMarkNamed: the block's record names the no-compact mark the
	// writer removed.
	NoCompactMarkNamed Require = "no-compact mark named"
	// NoOtherMark: the block's record names no deletion mark, or the one
	// the writer records. A duplicate MARK op that read the record before
	// its twin recorded Sluice's mark finds the mark in place and records
	// whatever version is current, which may be another tool's written
	// beside Sluice's in the gap; without this it would replace the
	// recorded version, leaving Sluice's named by nothing.
	NoOtherMark Require = "no other deletion mark recorded"
	// BelowMaxFailures: the version's jobs have failed fewer times than the
	// attempt limit.
	BelowMaxFailures Require = "failures below the limit"
	// Compactable: the block carries no no-compact mark (its own, from
	// registration, or another tool's, noted since). Without it on the
	// claim, a planner that read the block before the mark was noted could
	// still claim it: noting a mark changes no state and so no gen.
	Compactable Require = "no no-compact mark"
	// Downsampled: the block's downsample is published (or blocks of the
	// target resolution already held its data): retention may delete a
	// block that is due a downsample only then (Thanos #3716, #5664).
	Downsampled Require = "downsample published"
)

// Name names a transition.
type Name string

// The transitions. Each is one item of one transaction.
const (
	RegisterBlock    Name = "register block"
	RegisterRejected Name = "register rejected upload"
	RegisterMarked   Name = "register marked block"
	CreateFirst      Name = "create first version"
	CreateNext       Name = "create next version"
	CreatePartition  Name = "create partition"
	ClaimFence       Name = "claim fence"
	Claim            Name = "claim source"
	ReleaseClaim     Name = "release claim"
	Plan             Name = "plan"
	Supersede        Name = "supersede"
	LeaseFence       Name = "lease fence"
	Lease            Name = "lease"
	CountDeadAttempt Name = "count a dead attempt"
	TakeOver         Name = "take over a dead lease"
	CountFailure     Name = "count a failure"
	RecordFailure    Name = "release a failed lease"
	JobFence         Name = "job fence"
	Commit           Name = "commit"
	PutOutput        Name = "put output"
	DoneCheck        Name = "partition done check"
	Complete         Name = "complete"
	Activate         Name = "activate output"
	Discard          Name = "discard output"
	Retire           Name = "retire source"
	RetireVersion    Name = "retire version"
	FinishVersion    Name = "finish version"
	MarkPublished    Name = "record meta.json"
	RecordMark       Name = "record deletion mark"
	StartDelete      Name = "start delete"
	QuarantineFence  Name = "supersede for quarantine"
	QuarantineSource Name = "quarantine source"
	QuarantineGroup  Name = "quarantine group"
	ReleaseGroup     Name = "release group"
	ReleaseBlock     Name = "release block"
	RecordNoCompact  Name = "record no-compact mark"
	ForgetNoCompact  Name = "forget no-compact mark"
	NoteMark         Name = "note another tool's mark"
	HonourDeletion   Name = "honour a deletion mark"
	Expire           Name = "expire by retention"
	// Downsampling keeps its source: the version releases it, recording
	// the downsample, once its output is published.
	KeepSource        Name = "keep a downsampled source"
	HolderCheck       Name = "downsampled holder check"
	NoteDownsampled   Name = "note a block downsampled already"
	ExpireDownsampled Name = "expire a downsampled block"
)

// Transition is one item's step: from one of From (none: Absent) to To
// ("" when the item's state does not change), under Requires, in a
// transaction that also holds every transition in With.
type Transition struct {
	Name Name
	Item Item
	From []string
	To   string
	// Check is true for a condition check: the item is read, not written.
	Check    bool
	Requires []Require
	// With are the transitions the same transaction must hold: the fences
	// on other items that make this one safe (a commit with the job fence
	// on its head, a completion with every partition's done check).
	With []Name
	// Code is the records.Store method that makes it.
	Code string
}

// Has reports whether t requires r.
func (t Transition) Has(r Require) bool { return slices.Contains(t.Requires, r) }

// Leaves reports whether t may start from state s ("" for an absent item).
func (t Transition) Leaves(s string) bool {
	if s == "" {
		return t.Has(Absent)
	}
	return slices.Contains(t.From, s)
}

// Moves reports whether t changes its item's state.
func (t Transition) Moves() bool { return t.To != "" && !t.Check }

// Enters is the state t leaves its item in when it starts from s.
func (t Transition) Enters(s string) string {
	if t.Moves() {
		return t.To
	}
	return s
}

func states[S ~string](ss ...S) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// Table is every transition, in the order docs/protocol.md lists them.
// It returns a fresh copy: the table is not state anyone may change.
func Table() []Transition {
	return []Transition{
		{Name: RegisterBlock, Item: ItemBlock, To: string(BlockLive), Requires: []Require{Absent}, Code: "RegisterBlock"},
		{Name: RegisterRejected, Item: ItemBlock, To: string(BlockRejected), Requires: []Require{Absent}, Code: "RegisterBlock"},
		{Name: RegisterMarked, Item: ItemBlock, To: string(BlockRetiring), Requires: []Require{Absent}, Code: "RegisterBlock"},

		{Name: CreateFirst, Item: ItemVersion, To: string(GroupClaiming), Requires: []Require{Absent},
			With: []Name{CreatePartition}, Code: "CreateVersion"},
		{Name: CreateNext, Item: ItemVersion, From: states(GroupRetired, GroupSuperseded), To: string(GroupClaiming),
			Requires: []Require{AtVersion}, With: []Name{CreatePartition}, Code: "CreateVersion"},
		{Name: CreatePartition, Item: ItemPartition, To: string(PartitionPending), Requires: []Require{Absent}, Code: "CreateVersion"},

		{Name: ClaimFence, Item: ItemVersion, From: states(GroupClaiming), Check: true, Requires: []Require{AtVersion}, Code: "Claim"},
		{Name: Claim, Item: ItemBlock, From: states(BlockLive), To: string(BlockClaimed),
			Requires: []Require{AtGen, Published, Unclaimed, Compactable}, With: []Name{ClaimFence}, Code: "Claim"},
		{Name: ReleaseClaim, Item: ItemBlock, From: states(BlockClaimed), To: string(BlockLive),
			Requires: []Require{ClaimedByWriter}, Code: "ReleaseClaim"},
		{Name: Plan, Item: ItemVersion, From: states(GroupClaiming), To: string(GroupPlanned),
			Requires: []Require{AtVersion}, Code: "SetGroupState"},
		{Name: Supersede, Item: ItemVersion, From: states(GroupClaiming, GroupPlanned), To: string(GroupSuperseded),
			Requires: []Require{AtVersion}, Code: "Supersede"},

		{Name: LeaseFence, Item: ItemVersion, From: states(GroupPlanned), Check: true,
			Requires: []Require{AtVersion, BelowMaxFailures}, Code: "Lease"},
		{Name: Lease, Item: ItemPartition, From: states(PartitionPending), To: string(PartitionRunning),
			With: []Name{LeaseFence}, Code: "Lease"},
		{Name: CountDeadAttempt, Item: ItemVersion, From: states(GroupPlanned),
			Requires: []Require{AtVersion, BelowMaxFailures}, Code: "Lease"},
		{Name: TakeOver, Item: ItemPartition, From: states(PartitionRunning), To: string(PartitionRunning),
			Requires: []Require{LeaseExpired}, With: []Name{CountDeadAttempt}, Code: "Lease"},
		{Name: CountFailure, Item: ItemVersion, From: states(GroupPlanned), Requires: []Require{AtVersion}, Code: "RecordFailure"},
		{Name: RecordFailure, Item: ItemPartition, From: states(PartitionRunning), To: string(PartitionPending),
			Requires: []Require{LeaseHolder}, With: []Name{CountFailure}, Code: "RecordFailure"},
		{Name: JobFence, Item: ItemVersion, From: states(GroupPlanned), Check: true, Requires: []Require{AtVersion}, Code: "Commit"},
		{Name: Commit, Item: ItemPartition, From: states(PartitionRunning), To: string(PartitionDone),
			Requires: []Require{LeaseHolder}, With: []Name{JobFence}, Code: "Commit"},
		{Name: PutOutput, Item: ItemBlock, To: string(BlockPending), Requires: []Require{Absent}, With: []Name{Commit}, Code: "Commit"},

		{Name: DoneCheck, Item: ItemPartition, From: states(PartitionDone), Check: true, Code: "Complete"},
		{Name: Complete, Item: ItemVersion, From: states(GroupPlanned), To: string(GroupComplete),
			Requires: []Require{AtVersion}, With: []Name{DoneCheck}, Code: "Complete"},
		{Name: Activate, Item: ItemBlock, From: states(BlockPending), To: string(BlockLive),
			Requires: []Require{ProducedByWriter, AtGen}, Code: "Activate"},
		{Name: Discard, Item: ItemBlock, From: states(BlockPending), To: string(BlockDiscarded),
			Requires: []Require{ProducedByWriter, AtGen}, Code: "Discard"},
		{Name: Retire, Item: ItemBlock, From: states(BlockClaimed), To: string(BlockRetiring),
			Requires: []Require{ClaimedByWriter, AtGen}, Code: "Retire"},
		{Name: RetireVersion, Item: ItemVersion, From: states(GroupComplete), To: string(GroupRetired),
			Requires: []Require{AtVersion}, Code: "SetGroupState"},
		{Name: FinishVersion, Item: ItemVersion, From: states(GroupRetired, GroupSuperseded), Check: true,
			Requires: []Require{AtVersion}, Code: "FinishVersion"},

		{Name: MarkPublished, Item: ItemBlock, From: states(BlockLive), Requires: []Require{AtGen}, Code: "MarkPublished"},
		{Name: RecordMark, Item: ItemBlock, From: states(BlockRetiring), Requires: []Require{AtGen, NoOtherMark}, Code: "RecordMark"},
		{Name: StartDelete, Item: ItemBlock, From: states(BlockRetiring), To: string(BlockDeleted),
			Requires: []Require{AtGen, MarkRecorded}, Code: "StartDelete"},

		{Name: QuarantineFence, Item: ItemVersion, From: states(GroupPlanned), To: string(GroupSuperseded),
			Requires: []Require{AtVersion}, Code: "QuarantineSource"},
		{Name: QuarantineSource, Item: ItemBlock, From: states(BlockClaimed), To: string(BlockQuarantined),
			Requires: []Require{ClaimedByWriter, AtGen}, With: []Name{QuarantineFence}, Code: "QuarantineSource"},
		{Name: QuarantineGroup, Item: ItemVersion, From: states(GroupPlanned), To: string(GroupQuarantined),
			Requires: []Require{AtVersion}, Code: "QuarantineGroup"},
		{Name: ReleaseGroup, Item: ItemVersion, From: states(GroupQuarantined), To: string(GroupSuperseded),
			Requires: []Require{AtVersion}, Code: "ReleaseGroup"},
		{Name: ReleaseBlock, Item: ItemBlock, From: states(BlockQuarantined), To: string(BlockLive),
			Requires: []Require{AtGen}, Code: "ReleaseBlock"},
		{Name: RecordNoCompact, Item: ItemBlock, From: states(BlockQuarantined), Requires: []Require{AtGen}, Code: "RecordNoCompactMark"},
		{Name: ForgetNoCompact, Item: ItemBlock, From: states(BlockLive, BlockClaimed, BlockQuarantined), Requires: []Require{AtGen, NoCompactMarkNamed},
			Code: "ForgetNoCompactMark"},
		{Name: NoteMark, Item: ItemBlock, From: states(BlockLive, BlockClaimed), Requires: []Require{AtGen}, Code: "NoteForeignMark"},
		{Name: HonourDeletion, Item: ItemBlock, From: states(BlockLive), To: string(BlockRetiring),
			Requires: []Require{AtGen, Unclaimed, MarkRecorded}, Code: "HonourDeletionMark"},
		{Name: Expire, Item: ItemBlock, From: states(BlockLive), To: string(BlockRetiring),
			Requires: []Require{AtGen, Published, Unclaimed}, Code: "Expire"},
		{Name: KeepSource, Item: ItemBlock, From: states(BlockClaimed), To: string(BlockLive),
			Requires: []Require{ClaimedByWriter, AtGen}, Code: "KeepSource"},
		{Name: HolderCheck, Item: ItemBlock, From: states(BlockLive), Check: true,
			Requires: []Require{AtGen, Published}, Code: "NoteDownsampled"},
		{Name: NoteDownsampled, Item: ItemBlock, From: states(BlockLive), Requires: []Require{AtGen, Unclaimed},
			With: []Name{HolderCheck}, Code: "NoteDownsampled"},
		{Name: ExpireDownsampled, Item: ItemBlock, From: states(BlockLive), To: string(BlockRetiring),
			Requires: []Require{AtGen, Published, Unclaimed, Downsampled}, Code: "Expire"},
	}
}

// Lookup is the transition named n.
func Lookup(n Name) (Transition, error) {
	for _, t := range Table() {
		if t.Name == n {
			return t, nil
		}
	}
	return Transition{}, fmt.Errorf("protocol: no transition %q", n)
}

// MustLookup is Lookup for the names declared above, which the package's
// tests prove are all in the table.
func MustLookup(n Name) Transition {
	t, err := Lookup(n)
	if err != nil {
		panic(err)
	}
	return t
}

// Between is the write that moves an item of kind item from one state to
// another, not counting those that only happen with other items (With is
// empty): what a caller that names just the two states means.
func Between(item Item, from, to string) (Transition, error) {
	for _, t := range Table() {
		if t.Item == item && t.Moves() && t.To == to && len(t.With) == 0 && slices.Contains(t.From, from) {
			return t, nil
		}
	}
	return Transition{}, fmt.Errorf("protocol: no %s transition %s → %s", item, from, to)
}
