package demo

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/equiv"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// check reads what the pipeline left, runs `sluice verify` and the
// sample-level equivalence check, and records every failure.
func (r *run) check(ctx context.Context) error {
	r.stepf("check", "sluice verify (I2–I4 against bucket and table); the live blocks compared sample by sample with the generated ones")
	store := records.NewStore(r.clients.DynamoDB, r.cfg.Table, slog.New(slog.DiscardHandler))
	for i := range r.sum.Tenants {
		if err := r.readTenant(ctx, store, &r.sum.Tenants[i]); err != nil {
			return err
		}
	}
	rep, err := cli.Verify(ctx, store, r.clients.S3, r.cfg, "")
	if err != nil {
		return err
	}
	r.sum.Verify = rep
	for _, v := range rep.Violations {
		for i := range r.sum.Tenants {
			if r.sum.Tenants[i].Tenant == v.Tenant {
				r.sum.Tenants[i].Violations++
			}
		}
	}
	if !rep.OK() {
		r.fail("sluice verify: %d violation(s)", len(rep.Violations))
	}
	if rr := r.sum.Retention; rr != nil {
		blocks, err := store.TenantBlocks(ctx, rr.Tenant)
		if err != nil {
			return err
		}
		for _, b := range blocks {
			if b.State == protocol.BlockDeleted {
				rr.Deleted++
				if b.MarkVersionID != "" {
					rr.Marked++
				}
			}
		}
		if rr.Deleted != rr.Uploaded || rr.Marked != rr.Uploaded {
			r.fail("%s: %d of %d blocks past their retention deleted (%d after a deletion mark)", rr.Tenant, rr.Deleted, rr.Uploaded, rr.Marked)
		}
	}
	totals, err := r.emfTotals()
	if err != nil {
		return err
	}
	for i := range r.sum.Tenants {
		ts := &r.sum.Tenants[i]
		if err := r.equivalence(ctx, ts); err != nil {
			return err
		}
		if !ts.Equivalence.OK() {
			r.fail("%s: the live blocks do not hold exactly the uploaded samples: %s", ts.Tenant, ts.Equivalence.String())
		}
		if left := ts.Uploaded - ts.After[0][protocol.BlockDeleted]; left > 0 {
			r.fail("%s: %d of %d uploaded blocks were not compacted and deleted", ts.Tenant, left, ts.Uploaded)
		}
		if len(ts.Live) == 0 {
			r.fail("%s: no live block", ts.Tenant)
		}
		if err := r.checkMetrics(ctx, store, ts, totals[ts.Tenant]); err != nil {
			return err
		}
	}
	return r.checkDLQs(ctx)
}

func (r *run) readTenant(ctx context.Context, st *records.Store, ts *TenantSummary) error {
	blocks, err := st.TenantBlocks(ctx, ts.Tenant)
	if err != nil {
		return err
	}
	ts.After = map[int]map[protocol.BlockState]int{}
	for _, b := range blocks {
		if ts.After[b.Level] == nil {
			ts.After[b.Level] = map[protocol.BlockState]int{}
		}
		ts.After[b.Level][b.State]++
		if b.State == protocol.BlockLive {
			ts.Live = append(ts.Live, LiveBlock{ID: b.ID, Level: b.Level, MinT: b.MinT, MaxT: b.MaxT, Series: b.Series,
				Samples: b.Samples, ProducedBy: b.ProducedBy})
		}
	}
	sort.Slice(ts.Live, func(i, j int) bool { return ts.Live[i].MinT < ts.Live[j].MinT })
	groups, err := st.TenantGroups(ctx, ts.Tenant)
	if err != nil {
		return err
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].Key.Level != groups[j].Key.Level {
			return groups[i].Key.Level < groups[j].Key.Level
		}
		return groups[i].Key.RangeStart < groups[j].Key.RangeStart
	})
	for _, g := range groups {
		gr := GroupRun{Group: g.Key.String(), Level: g.Key.Level, RangeStart: g.Key.RangeStart, RangeEnd: r.cfg.Policy.End(g.Key),
			Versions: g.Version, Sources: len(g.Sources), State: string(g.State)}
		for v := int64(1); v <= g.Version; v++ {
			parts, err := st.Partitions(ctx, ts.Tenant, g.Key, v)
			if err != nil {
				return err
			}
			gr.Partitions = append(gr.Partitions, len(parts))
			ts.Partitions += len(parts)
		}
		ts.Versions += int(g.Version)
		ts.Groups = append(ts.Groups, gr)
	}
	return nil
}

// equivalence downloads the tenant's live blocks by their recorded
// versions and compares their samples with the generated blocks'.
func (r *run) equivalence(ctx context.Context, ts *TenantSummary) error {
	dir := filepath.Join(r.opts.WorkDir, "out", ts.Tenant)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	store := records.NewStore(r.clients.DynamoDB, r.cfg.Table, slog.New(slog.DiscardHandler))
	var outs []string
	for _, lb := range ts.Live {
		b, ok, err := store.GetBlock(ctx, ts.Tenant, lb.ID)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s/%s vanished from the table", ts.Tenant, lb.ID)
		}
		out, err := cli.DownloadBlock(ctx, r.clients.S3, r.cfg.Bucket, r.cfg.Layout, b, dir)
		if err != nil {
			return err
		}
		outs = append(outs, out)
	}
	rep, err := equiv.Check(ctx, r.inputs[ts.Tenant], outs, r.cfg.ReplicaLabels)
	if err != nil {
		return fmt.Errorf("%s: equivalence check: %w", ts.Tenant, err)
	}
	ts.Equivalence = rep
	return nil
}

func (r *run) checkDLQs(ctx context.Context) error {
	for _, q := range r.dep.Resources.Queues {
		url := r.dep.DLQURLs[q.ID]
		out, err := r.quiet.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
				sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
		m, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
		if n+m > 0 {
			r.fail("%d message(s) in the %s dead-letter queue ('sluice status' and %s)", n+m, q.ID, r.opts.LogFile)
		}
	}
	return nil
}
