package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/shared/health"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/metrics"
)

// metricsKind is the "sluice" field of spec.MetricsEvent.
const metricsKind = "metrics"

// metricsRecords is what the metrics pass reads (and nothing it writes).
type metricsRecords interface {
	health.Records
	Tenants(ctx context.Context) ([]string, error)
}

// Metrics is the cleaner's metrics pass, on its own schedule
// (spec.DefaultMetricsInterval): every tenant's gauges — the oldest
// level-0 block overdue for compaction, the partitions still planned,
// what is quarantined, the highest version of an unfinished group — read
// from the records (shared/health) and emitted as CloudWatch metrics,
// which the stack's alarms watch. It writes nothing.
func (c Cleaner) Metrics(ctx context.Context) error {
	ctx, emit := c.measured(ctx)
	defer emit()
	var st metricsRecords = c.Store
	now := c.now()
	tenants, err := st.Tenants(ctx)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	b := metrics.From(ctx)
	var errs []error
	behind, worst, worstTenant := 0, time.Duration(0), ""
	for _, tenant := range tenants {
		f, err := health.Gather(ctx, st, c.Config.Policy, tenant, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.Put(f.Values()...)
		if f.OldestUncompacted > 0 {
			behind++
			if f.OldestUncompacted > worst {
				worst, worstTenant = f.OldestUncompacted, tenant
			}
			c.Logger.InfoContext(ctx, "compaction overdue", logattr.Block(tenant, f.OldestBlock),
				"overdueBy", f.OldestUncompacted.Round(time.Second).String())
		}
	}
	c.Logger.InfoContext(ctx, "metrics pass done", "tenants", len(tenants), "tenantsBehind", behind,
		"worst", worst.Round(time.Second).String(), "worstTenant", worstTenant, "errors", len(errs))
	return errors.Join(errs...)
}
