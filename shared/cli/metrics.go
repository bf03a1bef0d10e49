package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/health"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/records"
)

func init() {
	register(&command{
		name:    "metrics",
		summary: "print every tenant's gauges in the Prometheus text format",
		usage:   "[--tenant T]",
		aws:     true,
		help: `Prints, from the state table and the queues, the gauges the cleaner's
metrics pass emits to CloudWatch every 5 minutes, in the Prometheus text
exposition format (scrape it, or read it):

  sluice_oldest_uncompacted_block_age_seconds  how long the oldest level-0
      block has been due for compaction (0: keeping up)
  sluice_remaining_planned_compactions  partitions of running versions not done
  sluice_quarantined_blocks, sluice_quarantined_groups
  sluice_unfinished_group_max_version   re-plans of one group (high: churn)
  sluice_blocks_live
  sluice_dead_letter_messages           per queue

The counters (compactions, failures, condition losses, bytes, series,
samples) exist only as the functions' CloudWatch metrics: the records keep
state, not history. docs/operations.md lists every metric.`,
		setup: func(fs *flag.FlagSet) runFunc {
			tenant := fs.String("tenant", "", "only this tenant")
			return func(ctx context.Context, e *Env, args []string) error {
				if err := checkTenantArgs(args, *tenant); err != nil {
					return err
				}
				d, err := e.openDeployment(ctx)
				if err != nil {
					return err
				}
				cfg, c, st := d.cfg, d.clients, d.store
				return WriteMetrics(ctx, e.Stdout, st, c.SQS, cfg, *tenant, time.Now())
			}
		},
	})
}

// WriteMetrics prints the deployment's gauges (one tenant's when tenant
// is set) as `sluice metrics` does.
func WriteMetrics(ctx context.Context, w io.Writer, st *records.Store, q SQSAPI, cfg config.Config, tenant string, now time.Time) error {
	tenants := []string{tenant}
	if tenant == "" {
		var err error
		if tenants, err = st.Tenants(ctx); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	var vals []metrics.Value
	for _, t := range tenants {
		f, err := health.Gather(ctx, st, cfg.Policy, t, now)
		if err != nil {
			return err
		}
		vals = append(vals, f.Values()...)
	}
	queues, _ := queueStatus(ctx, q, cfg, now)
	for _, qs := range queues {
		if qs.Error == "" && qs.DLQURL != "" {
			vals = append(vals, metrics.Value{Metric: metrics.DeadLetters, Dims: []string{qs.Queue}, V: float64(qs.DLQDepth)})
		}
	}
	return metrics.WritePrometheus(w, cfg.Table, vals)
}
