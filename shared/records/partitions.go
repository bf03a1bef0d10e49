package records

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/planning"
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

// headCheck is the fence every job write carries: the group is still at
// version v and PLANNED — and, for a lease (maxFailures > 0), its jobs
// have failed fewer than maxFailures times.
func headCheck(tenant string, g planning.GroupKey, v int64, maxFailures int) types.TransactWriteItem {
	cond := "version = :v AND #st = :planned"
	vals := map[string]types.AttributeValue{":v": n(v), ":planned": s(string(GroupPlanned))}
	if maxFailures > 0 {
		cond += " AND (attribute_not_exists(failures) OR failures < :max)"
		vals[":max"] = n(int64(maxFailures))
	}
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		Key:                       key(tenantPK(tenant), groupSK(g)),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#st": "state"},
		ExpressionAttributeValues: vals,
	}}
}

// ErrAttemptsExhausted is returned by Lease when the version's jobs have
// failed maxFailures times: the job must not run again, the cleaner
// quarantines (it is told so).
var ErrAttemptsExhausted = errors.New("the version's jobs have failed too often")

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
	ref := fmt.Sprintf("%s/p%d", VersionRef(tenant, g, v), p)
	part := func(cond string, extra string, vals map[string]types.AttributeValue) types.TransactWriteItem {
		vals[":running"], vals[":now"], vals[":owner"] = s(string(PartitionRunning)), n(now.UnixMilli()), s(owner)
		vals[":until"], vals[":one"] = n(leaseUntil.UnixMilli()), n(1)
		return types.TransactWriteItem{Update: &types.Update{
			Key:                 key(tenantPK(tenant), partitionSK(g, v, p)),
			ConditionExpression: aws.String(cond),
			UpdateExpression: aws.String("SET #st = :running, leaseOwner = :owner, leaseUntil = :until, " +
				"attempt = attempt + :one, updatedAt = :now" + extra),
			ExpressionAttributeNames:  map[string]string{"#st": "state"},
			ExpressionAttributeValues: vals,
		}}
	}
	items := []types.TransactWriteItem{
		headCheck(tenant, g, v, maxFailures),
		part("#st = :pending", "", map[string]types.AttributeValue{":pending": s(string(PartitionPending))}),
	}
	err := st.transact(ctx, "lease "+ref, items)
	if IsConditionLost(err) {
		err = st.takeOver(ctx, tenant, g, v, p, ref, now, maxFailures, err, part)
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

// takeOver is Lease's second transaction: the partition is RUNNING under
// an expired lease. lost is the first transaction's lost condition,
// returned when there is nothing to take over.
func (st *Store) takeOver(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, ref string, now time.Time, maxFailures int, lost error,
	part func(cond, extra string, vals map[string]types.AttributeValue) types.TransactWriteItem) error {
	var head Group
	if _, err := st.get(ctx, tenantPK(tenant), groupSK(g), &head); err != nil {
		return err
	}
	if head.Version == v && head.State == GroupPlanned && head.Failures >= maxFailures {
		return fmt.Errorf("lease %s: %d failures: %w", ref, head.Failures, ErrAttemptsExhausted)
	}
	var cur Partition
	if _, err := st.get(ctx, tenantPK(tenant), partitionSK(g, v, p), &cur); err != nil {
		return err
	}
	if cur.State != PartitionRunning || cur.LeaseUntil >= now.UnixMilli() || cur.LeaseOwner == "" {
		return lost
	}
	died := Failure{Kind: FailureDied, Message: fmt.Sprintf("the job of %s died: its lease expired at %s without a commit or a report (timeout, out of memory, crash?)",
		cur.LeaseOwner, time.UnixMilli(cur.LeaseUntil).UTC().Format(time.RFC3339))}
	headVals := map[string]types.AttributeValue{
		":v": n(v), ":planned": s(string(GroupPlanned)), ":max": n(int64(maxFailures)), ":now": n(now.UnixMilli()),
	}
	set := failureSet(died, headVals)
	items := []types.TransactWriteItem{
		{Update: &types.Update{
			Key:                       key(tenantPK(tenant), groupSK(g)),
			ConditionExpression:       aws.String("version = :v AND #st = :planned AND (attribute_not_exists(failures) OR failures < :max)"),
			UpdateExpression:          aws.String("SET " + set + ", updatedAt = :now"),
			ExpressionAttributeNames:  map[string]string{"#st": "state"},
			ExpressionAttributeValues: headVals,
		}},
		part("#st = :running AND leaseOwner = :prev AND leaseUntil < :now",
			", failures = if_not_exists(failures, :zero) + :one, lastError = :err",
			map[string]types.AttributeValue{":prev": s(cur.LeaseOwner), ":zero": n(0), ":err": s(clip(died.Message))}),
	}
	return st.transact(ctx, "take over "+ref+" from "+cur.LeaseOwner, items)
}

// Commit records partition p of version v as DONE by the lease holder
// owner, with its output block (nil for an empty partition) as PENDING, in
// one transaction fenced on the group (version = v AND PLANNED) and on the
// lease (RUNNING, leaseOwner = owner). The output is registered in every
// range at and above its level (ranges).
func (st *Store) Commit(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, owner string, output *Block, ranges []planning.GroupKey, now time.Time) error {
	ref := fmt.Sprintf("%s/p%d", VersionRef(tenant, g, v), p)
	vals := map[string]types.AttributeValue{
		":running": s(string(PartitionRunning)), ":done": s(string(PartitionDone)),
		":owner": s(owner), ":now": n(now.UnixMilli()),
	}
	set := "SET #st = :done, updatedAt = :now"
	if output != nil {
		vals[":out"] = s(output.ID)
		set += ", #out = :out"
	} else {
		vals[":t"] = &types.AttributeValueMemberBOOL{Value: true}
		set += ", #empty = :t"
	}
	names := map[string]string{"#st": "state"}
	if output != nil {
		names["#out"] = "output"
	} else {
		names["#empty"] = "empty"
	}
	items := []types.TransactWriteItem{
		headCheck(tenant, g, v, 0),
		{Update: &types.Update{
			Key:                       key(tenantPK(tenant), partitionSK(g, v, p)),
			ConditionExpression:       aws.String("#st = :running AND leaseOwner = :owner"),
			UpdateExpression:          aws.String(set),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		}},
	}
	if output != nil {
		out, parts, err := splitMeta(*output)
		if err != nil {
			return err
		}
		item, err := marshalItem(out, tenantPK(tenant), blockSK(output.ID))
		if err != nil {
			return err
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
		items = append(items, parts...)
		for _, r := range ranges {
			items = append(items, memberPut(*output, r))
		}
	}
	return st.transact(ctx, "commit "+ref, items)
}
