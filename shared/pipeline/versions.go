package pipeline

// What happens to a version whoever finds it in that state — the planner
// (a claim lost, a stale version found) or the cleaner (completion,
// supersession, re-drive): sending its jobs, and cleaning up after it when
// it will never complete. On Deps, so that neither handler calls into the
// other.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// versionRecords is what the work on a version both handlers do reads and
// writes of the records: its sources and outputs, its partitions, and the
// releases, discards and agenda change of its cleanup.
type versionRecords interface {
	GetBlock(ctx context.Context, tenant, id string) (b records.Block, ok bool, err error)
	GetBlocks(ctx context.Context, tenant string, ids []string) ([]records.Block, error)
	Partitions(ctx context.Context, tenant string, g planning.GroupKey, v int64) ([]records.Partition, error)
	ReleaseClaim(ctx context.Context, ref string, b records.Block, now time.Time) error
	Discard(ctx context.Context, b records.Block, now time.Time) (int64, error)
	FinishVersion(ctx context.Context, g records.Group, orphansAt time.Time) error
}

// versionRecords is the store as the version work uses it.
func (d *Deps) versionRecords() versionRecords { return d.Store }

// sendJobs sends the job of every partition in only (all when nil). A
// split version gets one job, which writes every partition it can lease.
func (d *Deps) sendJobs(ctx context.Context, g records.Group, only []int, resend int64) error {
	parts := only
	if parts == nil {
		for i := 0; i < g.Partitions; i++ {
			parts = append(parts, i)
		}
	}
	if g.Key.IsSplit() && len(parts) > 1 {
		parts = parts[:1]
	}
	jobs := make([]messages.Job, len(parts))
	for k, i := range parts {
		jobs[k] = messages.Job{Tenant: g.Tenant, Group: g.Key.String(), Version: g.Version, Partition: i,
			Output: outputULID(g, i).String(), Resend: resend}
	}
	if err := d.Send.Jobs(ctx, jobs); err != nil {
		return err
	}
	d.Logger.InfoContext(ctx, "jobs sent", logattr.Version(g.Tenant, g.Key, g.Version), "jobs", len(parts), "resend", resend)
	return nil
}

// outputs reads the output records of a version's committed partitions;
// a commit writes the record with the partition, so none may be missing.
func (d *Deps) outputs(ctx context.Context, head records.Group, parts []records.Partition) ([]records.Block, error) {
	outs, _, err := d.outputsAnd(ctx, head, parts, nil)
	return outs, err
}

// outputsAnd reads a version's outputs, as outputs does, and the blocks
// also names (none of them an output) in the same request.
func (d *Deps) outputsAnd(ctx context.Context, head records.Group, parts []records.Partition, also []string) (outs, others []records.Block, err error) {
	isOutput := map[string]bool{}
	ids := slices.Clone(also)
	for _, p := range parts {
		if p.Output != "" {
			isOutput[p.Output] = true
			ids = append(ids, p.Output)
		}
	}
	bs, err := d.versionRecords().GetBlocks(ctx, head.Tenant, ids)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range bs {
		if isOutput[b.ID] {
			outs = append(outs, b)
		} else {
			others = append(others, b)
		}
	}
	if len(outs) != len(isOutput) {
		return nil, nil, fmt.Errorf("%s: %d of %d output records missing", head.Ref(), len(isOutput)-len(outs), len(isOutput))
	}
	return outs, others, nil
}

// replan asks the planner to look at the group again (blocks may have
// arrived while it was busy) and at the next level's group.
func (d *Deps) replan(ctx context.Context, head records.Group) error {
	reqs := []messages.PlanRequest{{Tenant: head.Tenant, Group: head.Key.String(), Why: "after " + head.Ref()}}
	if parent, ok := d.Config.Policy.Parent(head.Key); ok {
		reqs = append(reqs, messages.PlanRequest{Tenant: head.Tenant, Group: parent.String(), Why: "after " + head.Ref()})
	}
	if head.Key.IsDownsample() {
		// A downsample's group has no parent, but the range groups its
		// sources are members of may have waited while it held them
		// (chaos seed 151: a late block's version, superseded, re-planned
		// while the downsample held the block, which its own supersession
		// then released with nobody to look again).
		srcs, err := d.versionRecords().GetBlocks(ctx, head.Tenant, head.Sources)
		if err != nil {
			return err
		}
		for _, b := range srcs {
			for _, g := range d.Config.Policy.MemberRanges(b.Stream, b.Level, b.MinT, b.MaxT) {
				reqs = append(reqs, messages.PlanRequest{Tenant: head.Tenant, Group: g.String(), Why: "after " + head.Ref()})
			}
		}
	}
	return d.Send.Plans(ctx, reqs)
}

// cleanupSuperseded releases a superseded version's claims, (re-)sends
// the no-compact mark of a source it quarantined, discards its outputs
// (DELETE ops), sweeps orphans under its output keys, takes it off the
// agenda and re-plans. Idempotent.
func (d *Deps) cleanupSuperseded(ctx context.Context, head records.Group) error {
	now := d.now()
	srcs, err := d.versionRecords().GetBlocks(ctx, head.Tenant, head.Sources)
	if err != nil {
		return err
	}
	var marks []messages.BlockOp
	for _, b := range srcs {
		switch {
		case b.State == protocol.BlockClaimed && b.ClaimedBy == head.Ref():
			if err := d.versionRecords().ReleaseClaim(ctx, head.Ref(), b, now); err != nil && !records.IsConditionLost(err) {
				return err
			}
		case b.State == protocol.BlockQuarantined:
			// Quarantined as this version's blamed source, in the
			// transaction that superseded it: this cleanup sends the op
			// that writes its no-compact mark, on every run (the cleaner
			// that committed the quarantine may have died before it; chaos
			// seed 106). Sent even when a mark is named: the removal of an
			// earlier release's mark may have deleted it and lost its
			// record write to this quarantine, and the op checks a named
			// mark of Sluice's (one HEAD) and writes a new one if it is
			// gone. The op is idempotent.
			marks = append(marks, messages.BlockOp{Op: messages.OpNoCompact, Tenant: b.Tenant, Block: b.ID, Gen: b.Gen})
		}
	}
	if err := d.Send.Ops(ctx, marks); err != nil {
		return err
	}
	parts, err := d.versionRecords().Partitions(ctx, head.Tenant, head.Key, head.Version)
	if err != nil {
		return err
	}
	if err := d.clearOutputs(ctx, head, parts); err != nil {
		return err
	}
	// Re-plan before leaving the agenda: once off it, nothing brings the
	// group back if this cleanup dies.
	if err := d.replan(ctx, head); err != nil {
		return err
	}
	if err := d.versionRecords().FinishVersion(ctx, head, now.Add(d.Config.OrphanDelay)); err != nil && !records.IsConditionLost(err) {
		return err
	}
	return nil
}

// clearOutputs is what every cleanup of a final version does to its
// outputs before it leaves the version: discard those that will never be
// published (re-sending their DELETE ops), then delete the orphans under
// its output keys.
func (d *Deps) clearOutputs(ctx context.Context, head records.Group, parts []records.Partition) error {
	if err := d.discardOutputs(ctx, head, parts); err != nil {
		return err
	}
	return d.orphans(ctx, head, parts)
}

// discardOutputs makes the PENDING outputs of a version that will never
// complete DISCARDED and sends their DELETE ops (again for those already
// discarded: a cleanup that died after discarding lost the op).
func (d *Deps) discardOutputs(ctx context.Context, head records.Group, parts []records.Partition) error {
	outs, err := d.outputs(ctx, head, parts)
	if err != nil {
		return err
	}
	var ops []messages.BlockOp
	for _, b := range outs {
		switch b.State {
		case protocol.BlockPending:
			gen, err := d.versionRecords().Discard(ctx, b, d.now())
			if err != nil {
				if records.IsConditionLost(err) {
					continue
				}
				return err
			}
			b.Gen = gen
		case protocol.BlockDiscarded:
		default:
			continue
		}
		ops = append(ops, messages.BlockOp{Op: messages.OpDelete, Tenant: b.Tenant, Block: b.ID, Gen: b.Gen})
	}
	return d.Send.Ops(ctx, ops)
}

// orphans deletes every object version (and delete marker) under the output keys of a final
// version that no record names: objects of attempts that lost. It lists
// only those blocks' own prefixes, and only for partitions where a second
// job can have written: more than one lease taken, or one taken and never
// committed. On the happy path it lists nothing.
func (d *Deps) orphans(ctx context.Context, head records.Group, parts []records.Partition) error {
	for _, p := range parts {
		if p.Attempt == 0 || (p.Attempt == 1 && p.State == protocol.PartitionDone) {
			// Never leased, or leased once and committed: the one job that
			// could write under this key is the one the record names.
			continue
		}
		out := outputULID(records.Group{Tenant: head.Tenant, Key: head.Key, Version: head.Version, CreatedAt: p.CreatedAt}, p.Index)
		id := out.String()
		rec, known, err := d.versionRecords().GetBlock(ctx, head.Tenant, id)
		if err != nil {
			return err
		}
		k, err := d.Config.Layout.Block(head.Tenant, out)
		if err != nil {
			return err
		}
		l, err := d.listBlock(ctx, k)
		if err != nil {
			return fmt.Errorf("orphans of %s: %w", head.Ref(), err)
		}
		var stray []messages.StrayVersion
		for _, v := range l.versions {
			if !known || !rec.Names(v.RelPath, v.VersionID) {
				stray = append(stray, messages.StrayVersion{RelPath: v.RelPath, VersionID: v.VersionID})
			}
		}
		if len(stray) == 0 {
			continue
		}
		gen := int64(0)
		if known {
			gen = rec.Gen
		}
		d.Logger.WarnContext(ctx, "orphaned object versions found; deleting",
			logattr.VersionBlock(head.Tenant, head.Key, head.Version, id), "versions", len(stray))
		if err := sendStray(ctx, d.Send, head.Tenant, id, gen, stray); err != nil {
			return err
		}
	}
	return nil
}
