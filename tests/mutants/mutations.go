package main

// mutation removes one guard from the product: Old, which must occur
// exactly once in File, becomes New. What says what the guard is for, in
// the words of docs/proofs.md's kill table.
type mutation struct {
	ID       string
	File     string
	Old, New string
	// Entry names the protocol.Table entry a table mutation changes (its
	// Name's identifier): Old must lie inside it. Two entries can share a
	// requirement list, and a guard added to one moved the claim's
	// mutations onto retention's unnoticed (TestMutationsHitWhatTheyName).
	Entry     string
	Invariant string
	What      string
}

// mutations is the list `make mutants` runs. Table mutations drop a
// requirement or a fence from shared/protocol's table, which shared/records
// renders its conditions from (and the Monitor's table checks read: only
// the design's own checks and the outcomes are left to catch those).
// Code mutations drop a guard from the handlers or the store.
func mutations() []mutation {
	const table = "shared/protocol/protocol.go"
	return []mutation{
		{ID: "commit-no-holder", File: table, Entry: "Commit", Invariant: "I5 fencing (leases)",
			What: "a commit does not require the lease holder",
			Old:  `Requires: []Require{LeaseHolder}, With: []Name{JobFence}, Code: "Commit"`,
			New:  `With: []Name{JobFence}, Code: "Commit"`},
		{ID: "commit-no-fence", File: "shared/records/partitions.go", Invariant: "I5 fencing (commits)",
			What: "a commit without the job fence on the head (version = v AND PLANNED)",
			Old:  "\t\t\tx.add(fg, fence)\n\t\t\tsize = transactItemSize(fence)",
			New:  "\t\t\t_ = fg\n\t\t\tsize = transactItemSize(fence)"},
		{ID: "lease-no-fence", File: "shared/records/partitions.go", Invariant: "I5 fencing (leases)",
			What: "a lease without the lease fence on the head",
			Old:  "\tx.add(fg, fg.check(key(tenantPK(tenant), groupSK(g))))\n\tx.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), leaseSet",
			New:  "\t_ = fg\n\tx.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), leaseSet"},
		{ID: "takeover-live-lease", File: table, Entry: "TakeOver", Invariant: "I5 fencing (leases)",
			What: "a take-over does not require the lease to have expired",
			Old:  `Requires: []Require{LeaseExpired}, With: []Name{CountDeadAttempt}`,
			New:  `With: []Name{CountDeadAttempt}`},
		{ID: "complete-no-done-checks", File: "shared/records/groups.go", Invariant: "Janus (003)",
			What: "a completion without its per-partition DONE checks",
			Old:  "\t\tx.add(dg, dg.check(key(tenantPK(g.Tenant), partitionSK(g.Key, g.Version, p))))",
			New:  "\t\t_ = dg"},
		{ID: "claim-not-exclusive", File: table, Entry: "Claim", Invariant: "I2 no double coverage",
			What: "a claim does not require the block unclaimed",
			Old:  `Requires: []Require{AtGen, Published, Unclaimed, Compactable}, With: []Name{ClaimFence}`,
			New:  `Requires: []Require{AtGen, Published, Compactable}, With: []Name{ClaimFence}`},
		{ID: "claim-no-gen", File: table, Entry: "Claim", Invariant: "I2 no double coverage",
			What: "a claim does not require the gen planning read",
			Old:  `Requires: []Require{AtGen, Published, Unclaimed, Compactable}, With: []Name{ClaimFence}`,
			New:  `Requires: []Require{Published, Unclaimed, Compactable}, With: []Name{ClaimFence}`},
		{ID: "claim-marked", File: table, Entry: "Claim", Invariant: "marks of other tools",
			What: "a claim does not require the block free of no-compact marks",
			Old:  `Requires: []Require{AtGen, Published, Unclaimed, Compactable}, With: []Name{ClaimFence}`,
			New:  `Requires: []Require{AtGen, Published, Unclaimed}, With: []Name{ClaimFence}`},
		{ID: "claim-no-fence", File: "shared/records/blocks.go", Invariant: "liveness (chaos seed 18)",
			What: "claims without the claim fence (head at v and CLAIMING)",
			Old:  "\t\tx.add(fg, fence)\n",
			New:  "\t\t_ = fence\n"},
		{ID: "create-over-unfinished", File: table, Entry: "CreateNext", Invariant: "I2",
			What: "a next version does not require the version planning read",
			Old: `From: states(GroupRetired, GroupSuperseded), To: string(GroupClaiming),
			Requires: []Require{AtVersion}, With: []Name{CreatePartition}`,
			New: `From: states(GroupRetired, GroupSuperseded), To: string(GroupClaiming),
			With: []Name{CreatePartition}`},
		{ID: "delete-unmarked", File: table, Entry: "StartDelete", Invariant: "I1 no loss",
			What: "a deletion does not require the deletion mark recorded",
			Old:  `Requires: []Require{AtGen, MarkRecorded}, Code: "StartDelete"`,
			New:  `Requires: []Require{AtGen}, Code: "StartDelete"`},
		{ID: "retire-any-claimer", File: table, Entry: "Retire", Invariant: "I1 no loss",
			What: "a retirement does not require the source claimed by the version",
			Old:  `Requires: []Require{ClaimedByWriter, AtGen}, Code: "Retire"`,
			New:  `Requires: []Require{AtGen}, Code: "Retire"`},
		{ID: "op-no-gen", File: "shared/protocol/ops.go", Invariant: "I5 fencing (block ops)",
			What: "a block op acts at any gen in its states",
			Old:  "return gen == opGen && slices.Contains(in, state), true",
			New:  "return slices.Contains(in, state), true"},
		{ID: "uploader-no-gen", File: "shared/pipeline/uploader.go", Invariant: "I5 fencing (block ops)",
			What: "the uploader judges a block op at the gen it read, not the op's",
			Old:  "if acts, _ := protocol.OpActs(op.Op, op.Gen, b.State, b.Gen); !known || !acts {",
			New:  "if acts, _ := protocol.OpActs(op.Op, b.Gen, b.State, b.Gen); !known || !acts {"},
		{ID: "unmark-quarantined", File: "shared/protocol/ops.go", Invariant: "quarantine",
			What: "the removal of a released block's no-compact mark acts on the block quarantined again",
			Old:  "slices.Contains([]BlockState{BlockLive, BlockClaimed}, state)",
			New:  "slices.Contains([]BlockState{BlockLive, BlockClaimed, BlockQuarantined}, state)"},
		{ID: "forget-any-mark", File: table, Entry: "ForgetNoCompact", Invariant: "I3 no dangling files",
			What: "forgetting a no-compact mark does not require the record to name the version deleted",
			Old:  `Requires: []Require{AtGen, NoCompactMarkNamed},`,
			New:  `Requires: []Require{AtGen},`},
		{ID: "record-other-mark", File: table, Entry: "RecordMark", Invariant: "I4 no orphans",
			What: "recording a deletion mark does not require the record to name no other",
			Old:  `Requires: []Require{AtGen, NoOtherMark}, Code: "RecordMark"`,
			New:  `Requires: []Require{AtGen}, Code: "RecordMark"`},
		{ID: "expire-claimed", File: table, Entry: "Expire", Invariant: "I1 no loss (retention)",
			What: "retention does not require the block unclaimed",
			Old:  `Requires: []Require{AtGen, Published, Unclaimed}, Code: "Expire"`,
			New:  `Requires: []Require{AtGen, Published}, Code: "Expire"`},
		{ID: "expire-before-downsample", File: table, Entry: "ExpireDownsampled", Invariant: "I1 no loss (downsampling)",
			What: "retention of a raw block does not require its downsample published",
			Old:  `Requires: []Require{AtGen, Published, Unclaimed, Downsampled}, Code: "Expire"`,
			New:  `Requires: []Require{AtGen, Published, Unclaimed}, Code: "Expire"`},
		{ID: "honour-claimed", File: table, Entry: "HonourDeletion", Invariant: "I1 no loss (marks of other tools)",
			What: "honouring another tool's deletion mark does not require the block unclaimed",
			Old:  `Requires: []Require{AtGen, Unclaimed, MarkRecorded}, Code: "HonourDeletionMark"`,
			New:  `Requires: []Require{AtGen, MarkRecorded}, Code: "HonourDeletionMark"`},
		{ID: "retire-before-publish", File: "shared/pipeline/cleaner.go", Invariant: "I1 no loss",
			What: "the cleaner retires sources without waiting for every output to be published",
			Old:  "if published < len(outs) {",
			New:  "if published < 0 {"},
		{ID: "stray-ignores-record", File: "shared/pipeline/versions.go", Invariant: "I1 / I3",
			What: "the orphan sweep deletes versions the record names",
			Old:  "if !known || !rec.Names(v.RelPath, v.VersionID) {",
			New:  "if true {"},
		{ID: "together-lost-for-all", File: "shared/records/together.go", Invariant: "I1 / I2 (writes committed together)",
			What: "a combined transaction that loses one block's condition reports the loss for every block, none committed alone",
			Old:  "case IsConditionLost(err):\n\t\t\t\t\terrs[j] = st.commit(ctx, txs[j].op, txs[j].x)",
			New:  "case IsConditionLost(err):\n\t\t\t\t\terrs[j] = err"},
		{ID: "together-no-clash", File: "shared/records/together.go", Invariant: "liveness (writes committed together)",
			What: "two writes of one item go into one combined transaction, which DynamoDB refuses",
			Old:  "clash = clash || keys[itemName(transactKey(it))]",
			New:  "clash = false"},
	}
}
