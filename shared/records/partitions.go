package records

import (
	"context"
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
// version v and PLANNED.
func headCheck(tenant string, g planning.GroupKey, v int64) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		Key:                       key(tenantPK(tenant), groupSK(g)),
		ConditionExpression:       aws.String("version = :v AND #st = :planned"),
		ExpressionAttributeNames:  map[string]string{"#st": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(v), ":planned": s(string(GroupPlanned))},
	}}
}

// Lease takes partition p of version v for owner until leaseUntil: a
// condition on the group (version = v AND PLANNED) and a conditional update
// of the partition (PENDING, or RUNNING with a lease that expired before
// now), attempt + 1, in one transaction. It returns the attempt number.
func (st *Store) Lease(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, owner string, now, leaseUntil time.Time) (int, error) {
	var attempt int
	items := []types.TransactWriteItem{
		headCheck(tenant, g, v),
		{Update: &types.Update{
			Key:                 key(tenantPK(tenant), partitionSK(g, v, p)),
			ConditionExpression: aws.String("#st = :pending OR (#st = :running AND leaseUntil < :now)"),
			UpdateExpression: aws.String("SET #st = :running, leaseOwner = :owner, leaseUntil = :until, " +
				"attempt = attempt + :one, updatedAt = :now"),
			ExpressionAttributeNames: map[string]string{"#st": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pending": s(string(PartitionPending)), ":running": s(string(PartitionRunning)),
				":now": n(now.UnixMilli()), ":owner": s(owner), ":until": n(leaseUntil.UnixMilli()), ":one": n(1),
			},
		}},
	}
	ref := fmt.Sprintf("%s/p%d", VersionRef(tenant, g, v), p)
	if err := st.transact(ctx, "lease "+ref, items); err != nil {
		return 0, err
	}
	var part Partition
	if _, err := st.get(ctx, tenantPK(tenant), partitionSK(g, v, p), &part); err != nil {
		return 0, err
	}
	attempt = part.Attempt
	return attempt, nil
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
		headCheck(tenant, g, v),
		{Update: &types.Update{
			Key:                       key(tenantPK(tenant), partitionSK(g, v, p)),
			ConditionExpression:       aws.String("#st = :running AND leaseOwner = :owner"),
			UpdateExpression:          aws.String(set),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		}},
	}
	if output != nil {
		item, err := marshalItem(output, tenantPK(tenant), blockSK(output.ID))
		if err != nil {
			return err
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
		for _, r := range ranges {
			items = append(items, memberPut(*output, r))
		}
	}
	return st.transact(ctx, "commit "+ref, items)
}
