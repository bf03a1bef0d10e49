package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sluice-dev/sluice/shared/health"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/records"
)

// TenantMetrics is what a tenant's metrics said at the end: the counters
// the handlers' EMF records in the log add up to, and the gauges
// `sluice metrics` prints.
type TenantMetrics struct {
	// Records counts the tenant's EMF records in the log.
	Records     int     `json:"records"`
	Compactions float64 `json:"compactions"`
	BytesRead   float64 `json:"bytesRead"`
	// Figures are the gauges, read from the records after settling.
	Figures health.Figures `json:"figures"`
}

// readMetrics adds up each tenant's EMF records in the handlers' log and
// reads its gauges as `sluice metrics` does; a settled deployment has
// compacted every tenant (counted), with nothing overdue, planned or
// quarantined.
func (r *run) readMetrics(ctx context.Context, st *records.Store, ts *TenantSummary) error {
	f, err := health.Gather(ctx, st, r.cfg.Policy, ts.Tenant, time.Now())
	if err != nil {
		return err
	}
	ts.Metrics.Figures = f
	logf, err := os.Open(r.opts.LogFile)
	if err != nil {
		return fmt.Errorf("read the handlers' log: %w", err)
	}
	defer logf.Close()
	sc := bufio.NewScanner(logf)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec["_aws"] == nil || rec[metrics.DimTenant] != ts.Tenant || rec[metrics.DimDeployment] != r.cfg.Table {
			continue
		}
		ts.Metrics.Records++
		if v, ok := rec[metrics.Compactions.Name].(float64); ok {
			ts.Metrics.Compactions += v
		}
		if v, ok := rec[metrics.BytesRead.Name].(float64); ok {
			ts.Metrics.BytesRead += v
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the handlers' log: %w", err)
	}
	m := ts.Metrics
	if m.Compactions == 0 || m.BytesRead == 0 {
		r.fail("%s: the handlers' EMF metrics in %s count %v compactions and %v bytes read", ts.Tenant, r.opts.LogFile, m.Compactions, m.BytesRead)
	}
	if f.OldestUncompacted > 0 || f.Planned > 0 || f.QuarantinedBlocks+f.QuarantinedGroups > 0 {
		r.fail("%s: settled, yet sluice metrics says %v overdue, %d planned, %d quarantined", ts.Tenant,
			f.OldestUncompacted, f.Planned, f.QuarantinedBlocks+f.QuarantinedGroups)
	}
	return nil
}
