package records

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
)

// Partitions reads every partition item of version v, in partition order.
func (st *Store) Partitions(ctx context.Context, tenant string, g planning.GroupKey, v int64) ([]Partition, error) {
	items, err := st.query(ctx, tenantPK(tenant), partitionPrefix(g, v))
	if err != nil {
		return nil, err
	}
	out := make([]Partition, 0, len(items))
	for _, it := range items {
		var p Partition
		if err := attributevalue.UnmarshalMap(it, &p); err != nil {
			return nil, fmt.Errorf("decode partition of %s/%s@v%d: %w", tenant, g, v, err)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// ErrAttemptsExhausted is returned by Lease when the version's jobs have
// failed maxFailures times: the job must not run again, the cleaner
// quarantines (it is told so).
var ErrAttemptsExhausted = errors.New("the version's jobs have failed too often")

// partitionOf names partition p of version v as a change's subject.
func partitionOf(tenant string, g planning.GroupKey, v int64, p int) subject {
	return subject{tenant: tenant, group: g.String(), version: v, partition: p}
}

// Lease takes partition p of version v for owner until leaseUntil and
// returns the attempt number. It is one transaction: a condition on the
// group (version = v AND PLANNED, fewer than maxFailures failures) and a
// conditional update of the partition (PENDING → RUNNING, attempt + 1).
//
// A partition still RUNNING under a lease that expired before now is
// taken over in a second transaction, which also counts the dead
// attempt as a failure on the head (the job died without a commit or a
// report: a timeout, out of memory, a crash): its condition names the
// holder whose lease expired, so each dead attempt is counted once.
func (st *Store) Lease(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, owner string, now, leaseUntil time.Time, maxFailures int) (int, error) {
	ref := partitionRef(tenant, g, v, p)
	if maxFailures < 1 {
		return 0, fmt.Errorf("lease %s: the attempt limit must be at least 1, not %d", ref, maxFailures)
	}
	fg, err := guard(protocol.LeaseFence, subject{tenant: tenant, group: g.String(), version: v},
		expect{version: v, max: maxFailures, now: now.UnixMilli()})
	if err != nil {
		return 0, err
	}
	pg, err := guard(protocol.Lease, partitionOf(tenant, g, v, p), expect{owner: owner, now: now.UnixMilli()})
	if err != nil {
		return 0, err
	}
	var x tx
	x.add(fg, fg.check(key(tenantPK(tenant), groupSK(g))))
	x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), leaseSet, "", leaseVals(owner, now, leaseUntil)))
	err = st.commit(ctx, "lease "+ref, x)
	if IsConditionLost(err) {
		err = st.takeOver(ctx, tenant, g, v, p, ref, owner, now, leaseUntil, maxFailures, err)
	}
	if err != nil {
		return 0, err
	}
	var got Partition
	if _, err := st.get(ctx, tenantPK(tenant), partitionSK(g, v, p), &got); err != nil {
		return 0, err
	}
	return got.Attempt, nil
}

// leaseSet is what a lease writes on its partition besides its state.
const leaseSet = "leaseOwner = :owner, leaseUntil = :until, attempt = attempt + :one, updatedAt = :now"

func leaseVals(owner string, now, leaseUntil time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":owner": s(owner), ":until": n(leaseUntil.UnixMilli()), ":one": n(1), ":now": n(now.UnixMilli()),
	}
}

// takeOver is Lease's second transaction: the partition is RUNNING under
// an expired lease. lost is the first transaction's lost condition,
// returned when there is nothing to take over.
func (st *Store) takeOver(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, ref, owner string,
	now, leaseUntil time.Time, maxFailures int, lost error) error {
	var head Group
	if _, err := st.get(ctx, tenantPK(tenant), groupSK(g), &head); err != nil {
		return err
	}
	if head.Version == v && head.State == protocol.GroupPlanned && head.Failures >= maxFailures {
		return fmt.Errorf("lease %s: %d failures: %w", ref, head.Failures, ErrAttemptsExhausted)
	}
	var cur Partition
	if _, err := st.get(ctx, tenantPK(tenant), partitionSK(g, v, p), &cur); err != nil {
		return err
	}
	if cur.State != protocol.PartitionRunning || cur.LeaseUntil >= now.UnixMilli() || cur.LeaseOwner == "" {
		return lost
	}
	died := Failure{Kind: FailureDied, Message: fmt.Sprintf("the job of %s died: its lease expired at %s without a commit or a report (timeout, out of memory, crash?)",
		cur.LeaseOwner, time.UnixMilli(cur.LeaseUntil).UTC().Format(time.RFC3339))}
	headVals := map[string]types.AttributeValue{":now": n(now.UnixMilli())}
	set := failureSet(died, headVals)
	hg, err := guard(protocol.CountDeadAttempt, subject{tenant: tenant, group: g.String(), version: v},
		expect{version: v, max: maxFailures, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	pg, err := guard(protocol.TakeOver, partitionOf(tenant, g, v, p), expect{owner: owner, prev: cur.LeaseOwner, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	vals := leaseVals(owner, now, leaseUntil)
	vals[":zero"], vals[":err"] = n(0), s(clip(died.Message))
	var x tx
	x.add(hg, hg.update(key(tenantPK(tenant), groupSK(g)), set+", updatedAt = :now", "", headVals))
	x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)),
		leaseSet+", failures = if_not_exists(failures, :zero) + :one, lastError = :err", "", vals))
	return st.commit(ctx, "take over "+ref+" from "+cur.LeaseOwner, x)
}

// Commit records partition p of version v as DONE by the lease holder
// owner, with its output block (nil for an empty partition) as PENDING, in
// one transaction fenced on the group (version = v AND PLANNED) and on the
// lease (RUNNING, leaseOwner = owner). The output is registered in every
// range at and above its level (ranges).
func (st *Store) Commit(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, owner string, output *Block, ranges []planning.GroupKey, now time.Time) error {
	ref := partitionRef(tenant, g, v, p)
	fg, err := guard(protocol.JobFence, subject{tenant: tenant, group: g.String(), version: v}, expect{version: v, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	pg, err := guard(protocol.Commit, partitionOf(tenant, g, v, p), expect{owner: owner, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	vals := map[string]types.AttributeValue{":now": n(now.UnixMilli())}
	set := "updatedAt = :now"
	if output != nil {
		vals[":out"] = s(output.ID)
		set += ", #out = :out"
		pg.names["#out"] = "output"
	} else {
		vals[":t"] = &types.AttributeValueMemberBOOL{Value: true}
		set += ", #empty = :t"
		pg.names["#empty"] = "empty"
	}
	var x tx
	x.add(fg, fg.check(key(tenantPK(tenant), groupSK(g))))
	x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), set, "", vals))
	if output != nil {
		out, parts, err := splitMeta(*output)
		if err != nil {
			return err
		}
		item, err := marshalItem(out, tenantPK(tenant), blockSK(output.ID))
		if err != nil {
			return err
		}
		og, err := guard(protocol.PutOutput, subject{tenant: tenant, block: output.ID}, expect{by: output.ProducedBy, now: now.UnixMilli()})
		if err != nil {
			return err
		}
		x.add(og, og.put(item))
		x.plain(parts...)
		for _, r := range ranges {
			x.plain(memberPut(*output, r))
		}
	}
	return st.commit(ctx, "commit "+ref, x)
}
