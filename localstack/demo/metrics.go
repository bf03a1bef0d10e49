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

// emfTotals adds up, per tenant, the handlers' EMF records of this
// deployment in its log: one read of the log for every tenant.
func (r *run) emfTotals() (map[string]TenantMetrics, error) {
	logf, err := os.Open(r.opts.LogFile)
	if err != nil {
		return nil, fmt.Errorf("read the handlers' log: %w", err)
	}
	defer logf.Close()
	out := map[string]TenantMetrics{}
	sc := bufio.NewScanner(logf)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec["_aws"] == nil || rec[metrics.DimDeployment] != r.cfg.Table {
			continue
		}
		tenant, ok := rec[metrics.DimTenant].(string)
		if !ok {
			continue
		}
		m := out[tenant]
		m.Records++
		if v, ok := rec[metrics.Compactions.Name].(float64); ok {
			m.Compactions += v
		}
		if v, ok := rec[metrics.BytesRead.Name].(float64); ok {
			m.BytesRead += v
		}
		out[tenant] = m
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the handlers' log: %w", err)
	}
	return out, nil
}

// checkMetrics puts a tenant's EMF totals beside its gauges, read as
// `sluice metrics` does: a settled deployment has compacted every tenant
// (counted), with nothing overdue, planned or quarantined.
func (r *run) checkMetrics(ctx context.Context, st *records.Store, ts *TenantSummary, totals TenantMetrics) error {
	f, err := health.Gather(ctx, st, r.cfg.Policy, ts.Tenant, time.Now())
	if err != nil {
		return err
	}
	totals.Figures = f
	ts.Metrics = totals
	if totals.Compactions == 0 || totals.BytesRead == 0 {
		r.fail("%s: the handlers' EMF metrics in %s count %v compactions and %v bytes read", ts.Tenant, r.opts.LogFile, totals.Compactions, totals.BytesRead)
	}
	if f.OldestUncompacted > 0 || f.Planned > 0 || f.QuarantinedBlocks+f.QuarantinedGroups > 0 {
		r.fail("%s: settled, yet sluice metrics says %v overdue, %d planned, %d quarantined", ts.Tenant,
			f.OldestUncompacted, f.Planned, f.QuarantinedBlocks+f.QuarantinedGroups)
	}
	return nil
}
