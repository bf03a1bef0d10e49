// Package health computes, from a tenant's records, the figures that say
// whether compaction keeps up: how long the oldest level-0 block has been
// waiting past the moment it could have been compacted, how many
// partitions are still to run, what is quarantined, and how often one
// group had to be re-planned. The cleaner's metrics pass emits them as
// CloudWatch gauges and `sluice metrics` prints them; both call Tenant, so
// the alarm and the operator's terminal cannot disagree.
package health

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// Figures are one tenant's gauges.
type Figures struct {
	Tenant string
	// OldestUncompacted is how long the tenant's longest-waiting level-0
	// block has been due for compaction (0 when none is overdue).
	OldestUncompacted time.Duration
	// OldestBlock is that block's id ("" when none is overdue).
	OldestBlock string
	// Planned counts the partitions of unfinished versions not done yet.
	Planned           int
	QuarantinedBlocks int
	QuarantinedGroups int
	// MaxVersion is the highest version of an unfinished group (0: none).
	MaxVersion int64
	Live       int
}

// Tenant computes a tenant's figures at now. blocks need only what
// records.Store.BlocksView reads; undone counts, per unfinished group
// (by key string), the partitions of its current version not done.
//
// A level-0 block is due once the planner would compact its level-1
// range: when the range has something to merge it with (another block
// of level 0 or 1 in the range) and the range has closed — its end, or
// the last arrival in it if later, plus the policy's close delay or its
// upload wait, whichever is longer (the rules planning.Policy.Plan
// applies; a covered range may be planned sooner). Its wait is counted
// from then, so a block waiting for its range to close is not "behind",
// and a backfill of old data is due as soon as its uploads stop. Blocks that can never be
// compacted (a no-compact mark, or one straddling the level-1 boundary)
// are not counted: status lists them.
func Tenant(pol planning.Policy, tenant string, blocks []records.Block, groups []records.Group, undone map[string]int, now time.Time) Figures {
	pol = pol.Defaults()
	f := Figures{Tenant: tenant}
	type rangeState struct {
		members int   // blocks of level 0 or 1 that could be sources
		newest  int64 // latest arrival
		oldest  *records.Block
	}
	ranges := map[planning.GroupKey]*rangeState{}
	for i := range blocks {
		b := &blocks[i]
		switch b.State {
		case protocol.BlockLive:
			f.Live++
		case protocol.BlockQuarantined:
			f.QuarantinedBlocks++
		}
		if b.Level > 1 || b.NoCompact || (b.State != protocol.BlockLive && b.State != protocol.BlockClaimed) || !b.Published {
			continue
		}
		g, ok := pol.GroupFor(b.Stream, 1, b.MinT, b.MaxT)
		if !ok || b.Stream == "" {
			continue
		}
		r := ranges[g]
		if r == nil {
			r = &rangeState{}
			ranges[g] = r
		}
		r.members++
		r.newest = max(r.newest, b.Arrived)
		if b.Level == 0 && (r.oldest == nil || b.MaxT < r.oldest.MaxT) {
			r.oldest = b
		}
	}
	for g, r := range ranges {
		if r.oldest == nil || r.members < 2 {
			continue
		}
		due := time.UnixMilli(max(pol.End(g), r.newest) + max(pol.CloseDelay, pol.UploadWait).Milliseconds())
		if wait := now.Sub(due); wait > f.OldestUncompacted {
			f.OldestUncompacted, f.OldestBlock = wait, r.oldest.ID
		}
	}
	for _, g := range groups {
		if g.State == protocol.GroupQuarantined {
			f.QuarantinedGroups++
		}
		if g.State.Unfinished() {
			f.Planned += undone[g.Key.String()]
			f.MaxVersion = max(f.MaxVersion, g.Version)
		}
	}
	return f
}

// Values are the figures as metrics, for a batch or `sluice metrics`.
func (f Figures) Values() []metrics.Value {
	v := func(m metrics.Metric, x float64) metrics.Value {
		return metrics.Value{Metric: m, Dims: []string{f.Tenant}, V: x}
	}
	return []metrics.Value{
		v(metrics.OldestUncompacted, f.OldestUncompacted.Seconds()),
		v(metrics.PlannedCompactions, float64(f.Planned)),
		v(metrics.QuarantinedBlocks, float64(f.QuarantinedBlocks)),
		v(metrics.QuarantinedGroups, float64(f.QuarantinedGroups)),
		v(metrics.GroupVersionChurn, float64(f.MaxVersion)),
		v(metrics.LiveBlocks, float64(f.Live)),
	}
}

// Records is what Gather reads of a tenant.
type Records interface {
	BlocksView(ctx context.Context, tenant string) ([]records.Block, error)
	TenantGroups(ctx context.Context, tenant string) ([]records.Group, error)
	Partitions(ctx context.Context, tenant string, g planning.GroupKey, v int64) ([]records.Partition, error)
}

// Gather reads a tenant's records and computes its figures: one
// projection of its blocks, its group heads, and the partitions of each
// unfinished version (few: a version runs for minutes).
func Gather(ctx context.Context, st Records, pol planning.Policy, tenant string, now time.Time) (Figures, error) {
	blocks, err := st.BlocksView(ctx, tenant)
	if err != nil {
		return Figures{}, fmt.Errorf("health of %s: %w", tenant, err)
	}
	groups, err := st.TenantGroups(ctx, tenant)
	if err != nil {
		return Figures{}, fmt.Errorf("health of %s: %w", tenant, err)
	}
	undone := map[string]int{}
	for _, g := range groups {
		if !g.State.Unfinished() {
			continue
		}
		parts, err := st.Partitions(ctx, tenant, g.Key, g.Version)
		if err != nil {
			return Figures{}, fmt.Errorf("health of %s: %w", tenant, err)
		}
		for _, p := range parts {
			if p.State != protocol.PartitionDone {
				undone[g.Key.String()]++
			}
		}
	}
	return Tenant(pol, tenant, blocks, groups, undone, now), nil
}
