package main

// mutation removes one guard from the product: Old, which must occur
// exactly once in File, becomes New. What says what the guard is for, in
// the words of docs/proofs.md's kill table.
type mutation struct {
	ID        string
	File      string
	Old, New  string
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
		{ID: "commit-no-holder", File: table, Invariant: "I5 fencing (leases)",
			What: "a commit does not require the lease holder",
			Old:  `Requires: []Require{LeaseHolder}, With: []Name{JobFence}, Code: "Commit"`,
			New:  `With: []Name{JobFence}, Code: "Commit"`},
		{ID: "commit-no-fence", File: "shared/records/partitions.go", Invariant: "I5 fencing (commits)",
			What: "a commit without the job fence on the head (version = v AND PLANNED)",
			Old:  "\tx.add(fg, fg.check(key(tenantPK(tenant), groupSK(g))))\n\tx.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), set, \"\", vals))",
			New:  "\t_ = fg\n\tx.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), set, \"\", vals))"},
		{ID: "lease-no-fence", File: "shared/records/partitions.go", Invariant: "I5 fencing (leases)",
			What: "a lease without the lease fence on the head",
			Old:  "\tx.add(fg, fg.check(key(tenantPK(tenant), groupSK(g))))\n\tx.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), leaseSet",
			New:  "\t_ = fg\n\tx.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), leaseSet"},
		{ID: "takeover-live-lease", File: table, Invariant: "I5 fencing (leases)",
			What: "a take-over does not require the lease to have expired",
			Old:  `Requires: []Require{LeaseExpired}, With: []Name{CountDeadAttempt}`,
			New:  `With: []Name{CountDeadAttempt}`},
		{ID: "complete-no-done-checks", File: "shared/records/groups.go", Invariant: "Janus (003)",
			What: "a completion without its per-partition DONE checks",
			Old:  "\t\tx.add(dg, dg.check(key(tenantPK(g.Tenant), partitionSK(g.Key, g.Version, p))))",
			New:  "\t\t_ = dg"},
		{ID: "claim-not-exclusive", File: table, Invariant: "I2 no double coverage",
			What: "a claim does not require the block unclaimed",
			Old:  `Requires: []Require{AtGen, Published, Unclaimed}`,
			New:  `Requires: []Require{AtGen, Published}`},
		{ID: "claim-no-gen", File: table, Invariant: "I2 no double coverage",
			What: "a claim does not require the gen planning read",
			Old:  `Requires: []Require{AtGen, Published, Unclaimed}`,
			New:  `Requires: []Require{Published, Unclaimed}`},
		{ID: "claim-no-fence", File: "shared/records/blocks.go", Invariant: "liveness (chaos seed 18)",
			What: "claims without the claim fence (head at v and CLAIMING)",
			Old:  "\t\tx.add(fg, fence)\n",
			New:  "\t\t_ = fence\n"},
		{ID: "create-over-unfinished", File: table, Invariant: "I2",
			What: "a next version does not require the version planning read",
			Old: `From: states(GroupRetired, GroupSuperseded), To: string(GroupClaiming),
			Requires: []Require{AtVersion}, With: []Name{CreatePartition}`,
			New: `From: states(GroupRetired, GroupSuperseded), To: string(GroupClaiming),
			With: []Name{CreatePartition}`},
		{ID: "delete-unmarked", File: table, Invariant: "I1 no loss",
			What: "a deletion does not require the deletion mark recorded",
			Old:  `Requires: []Require{AtGen, MarkRecorded}, Code: "StartDelete"`,
			New:  `Requires: []Require{AtGen}, Code: "StartDelete"`},
		{ID: "retire-any-claimer", File: table, Invariant: "I1 no loss",
			What: "a retirement does not require the source claimed by the version",
			Old:  `Requires: []Require{ClaimedByWriter, AtGen}, Code: "Retire"`,
			New:  `Requires: []Require{AtGen}, Code: "Retire"`},
		{ID: "op-no-gen", File: "shared/pipeline/uploader.go", Invariant: "I5 fencing (block ops)",
			What: "the uploader skips the gen check of a block op",
			Old:  "if !known || b.Gen != op.Gen || !slices.Contains(want, b.State) {",
			New:  "if !known || !slices.Contains(want, b.State) {"},
		{ID: "retire-before-publish", File: "shared/pipeline/cleaner.go", Invariant: "I1 no loss",
			What: "the cleaner retires sources without waiting for every output to be published",
			Old:  "if published < len(outs) {",
			New:  "if published < 0 {"},
		{ID: "stray-ignores-record", File: "shared/pipeline/versions.go", Invariant: "I1 / I3",
			What: "the orphan sweep deletes versions the record names",
			Old:  "if !known || !rec.Names(v.RelPath, v.VersionID) {",
			New:  "if true {"},
	}
}
