package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/retention"
	"github.com/sluice-dev/sluice/shared/stream"
)

// retentionKind is the "sluice" field of spec.RetentionEvent.
const retentionKind = "retention"

// retentionRecords is what a retention pass reads and writes.
type retentionRecords interface {
	Tenants(ctx context.Context) ([]string, error)
	TenantStreams(ctx context.Context, tenant string) ([]records.StreamRecord, error)
	BlocksView(ctx context.Context, tenant string) ([]records.Block, error)
	Expire(ctx context.Context, b records.Block, retireAt, now time.Time) (int64, error)
	ExpireDownsampled(ctx context.Context, b records.Block, retireAt, now time.Time) (int64, error)
}

// planHeld asks the planner for the downsample of every block retention
// holds for one: the pass is what makes sure a block that was never
// downsampled (registered before downsampling was turned on, a downsample
// that waited) is, and its retention then proceeds.
func (c Cleaner) planHeld(ctx context.Context, tenant string, held []retention.Expiry) error {
	reqs := make([]messages.PlanRequest, 0, len(held))
	for _, e := range held {
		b := e.Block
		c.Logger.InfoContext(ctx, "retention holds a block until its downsample is published", logattr.Block(tenant, b.ID),
			"resolution", stream.ResolutionName(e.Downsample), "retentionEnded", e.At.UTC())
		reqs = append(reqs, messages.PlanRequest{Tenant: tenant, Group: planning.DownsampleKey(b.Stream, b.MinT, b.ID, e.Downsample).String(), Why: "retention holds it"})
	}
	return c.Send.Plans(ctx, reqs)
}

// Retention is the cleaner's retention pass, on its own schedule
// (config.RetentionInterval), not only when something compacts: every
// tenant's LIVE, unclaimed blocks whose end is older than the retention
// of their resolution are retired (LIVE → RETIRING at gen), marked and
// deleted after the deletion delay by the same path as a compacted
// source. It reads one projection of each tenant's block records (no
// meta.json, no S3 LIST) and does nothing when no retention is set.
func (c Cleaner) Retention(ctx context.Context) error {
	ov := c.overrides(ctx)
	if !c.Config.Retention.Enabled() && !ov.AnyRetention() {
		return nil
	}
	var st retentionRecords = c.Store
	now := c.now()
	tenants, err := st.Tenants(ctx)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	c.Logger.InfoContext(ctx, "retention started", "tenants", len(tenants), "raw", c.Config.Retention.Raw,
		"5m", c.Config.Retention.FiveMinutes, "1h", c.Config.Retention.OneHour)
	var errs []error
	expired := 0
	for i, tenant := range tenants {
		n, err := c.retainTenant(ctx, st, tenant, ov.Retention(tenant, c.Config.Retention), now)
		expired += n
		if err != nil {
			errs = append(errs, fmt.Errorf("retention of %s: %w", tenant, err))
		}
		c.Logger.InfoContext(ctx, "retention progress", logattr.Tenant(tenant), "done", i+1, "of", len(tenants), "expired", n)
	}
	c.Logger.InfoContext(ctx, "retention done", "tenants", len(tenants), "expired", expired, "errors", len(errs))
	return errors.Join(errs...)
}

func (c Cleaner) retainTenant(ctx context.Context, st retentionRecords, tenant string, keep config.Retention, now time.Time) (int, error) {
	if !keep.Enabled() {
		return 0, nil
	}
	streams, err := st.TenantStreams(ctx, tenant)
	if err != nil {
		return 0, err
	}
	res := make(map[string]int64, len(streams))
	for _, s := range streams {
		res[s.ID] = s.Resolution
	}
	blocks, err := st.BlocksView(ctx, tenant)
	if err != nil {
		return 0, err
	}
	due, held, _, _ := retention.Expiries(keep, blocks, res, c.overrides(ctx).Policy(tenant, c.Config.Policy).DownsampleTo, now)
	if err := c.planHeld(ctx, tenant, held); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range due {
		b := e.Block
		if err := c.step(ctx, "cleaner.before-expire", b.Key()); err != nil {
			return n, err
		}
		expire := st.Expire
		if e.Downsample > 0 {
			expire = st.ExpireDownsampled
		}
		gen, err := expire(ctx, b, c.markDue(now), now)
		if records.IsConditionLost(err) {
			// Claimed, retired or marked since the view was read: the
			// next pass sees where it is.
			c.Logger.InfoContext(ctx, "expiring a block lost its condition", logattr.Block(tenant, b.ID), "lost", err)
			continue
		}
		if err != nil {
			return n, err
		}
		c.Logger.InfoContext(ctx, "block expired by retention; marked, and deleted after the deletion delay", logattr.Block(tenant, b.ID),
			"maxT", time.UnixMilli(b.MaxT).UTC(), "retention", e.Retention, "level", b.Level)
		if err := c.Send.Op(ctx, messages.BlockOp{Op: messages.OpMark, Tenant: tenant, Block: b.ID, Gen: gen}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
