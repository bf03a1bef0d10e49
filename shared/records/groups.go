package records

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/planning"
)

// activeAgenda is the agenda entry that keeps an unfinished version in the
// sweep's view; its due time is irrelevant (0).
func activeSubject(g planning.GroupKey) string { return g.String() }

// GetGroup reads a group's head; ok is false when no version exists yet.
func (st *Store) GetGroup(ctx context.Context, tenant string, g planning.GroupKey) (Group, bool, error) {
	var out Group
	ok, err := st.get(ctx, tenantPK(tenant), groupSK(g), &out)
	if err == nil && ok {
		out.Key, err = planning.ParseGroupKey(out.KeyString)
	}
	return out, ok, err
}

// TenantGroups reads every group head of a tenant (status, sweeps).
func (st *Store) TenantGroups(ctx context.Context, tenant string) ([]Group, error) {
	items, err := st.query(ctx, tenantPK(tenant), "G#")
	if err != nil {
		return nil, err
	}
	var out []Group
	for _, it := range items {
		if _, isHead := it["sources"]; !isHead {
			continue // a partition item
		}
		var g Group
		if err := attributevalue.UnmarshalMap(it, &g); err != nil {
			return nil, fmt.Errorf("decode group of %s: %w", tenant, err)
		}
		if g.Key, err = planning.ParseGroupKey(g.KeyString); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// CreateVersion writes version next.Version of a group in one transaction:
// the head (expecting the version prev that planning read — absent when
// prev.Version is 0 — and that version final), ALL of the new version's
// partition items (so no partition row can be missing), and the agenda
// entry that keeps the version in the sweep's view.
//
// Over a previous version it also schedules prev's second orphan sweep at
// prevOrphansAt. FinishVersion does that too, but the cleanup calls it only
// after sending the re-plan, and the group has one active entry: once next
// exists, that entry stands for next, and a cleanup of prev that died
// between the re-plan and FinishVersion is never re-driven. Scheduling the
// sweep here means a slow losing job of prev is swept whichever of the two
// lands (chaos seed 18; two entries just sweep twice).
func (st *Store) CreateVersion(ctx context.Context, prev, next Group, now, prevOrphansAt time.Time) error {
	next.KeyString = next.Key.String()
	if next.Partitions < 1 || next.Partitions > 64 {
		return fmt.Errorf("create %s: %d partitions out of [1, 64]", next.Ref(), next.Partitions)
	}
	head, err := marshalItem(next, tenantPK(next.Tenant), groupSK(next.Key))
	if err != nil {
		return err
	}
	put := &types.Put{Item: head}
	if prev.Version == 0 {
		put.ConditionExpression = aws.String("attribute_not_exists(PK)")
	} else {
		put.ConditionExpression = aws.String("version = :v AND (#st = :retired OR #st = :superseded)")
		put.ExpressionAttributeNames = map[string]string{"#st": "state"}
		put.ExpressionAttributeValues = map[string]types.AttributeValue{
			":v": n(prev.Version), ":retired": s(string(GroupRetired)), ":superseded": s(string(GroupSuperseded)),
		}
	}
	items := []types.TransactWriteItem{{Put: put}}
	for p := 0; p < next.Partitions; p++ {
		part, err := marshalItem(Partition{
			Tenant: next.Tenant, Group: next.KeyString, Version: next.Version, Index: p,
			State: PartitionPending, CreatedAt: next.CreatedAt, UpdatedAt: now.UnixMilli(),
		}, tenantPK(next.Tenant), partitionSK(next.Key, next.Version, p))
		if err != nil {
			return err
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			Item: part, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
	}
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		Item: agendaItem(AgendaActive, time.UnixMilli(0), next.Tenant, activeSubject(next.Key)),
	}})
	if prev.Version > 0 {
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			Item: agendaItem(AgendaOrphans, prevOrphansAt, prev.Tenant, orphansSubject(prev)),
		}})
	}
	return st.transact(ctx, "create "+next.Ref(), items)
}

// groupCond is the condition every version transition names: this version,
// in this state.
func groupUpdate(g Group, from GroupState, set string, vals map[string]types.AttributeValue) *types.Update {
	if vals == nil {
		vals = map[string]types.AttributeValue{}
	}
	vals[":v"] = n(g.Version)
	vals[":from"] = s(string(from))
	return &types.Update{
		Key:                       key(tenantPK(g.Tenant), groupSK(g.Key)),
		ConditionExpression:       aws.String("version = :v AND #st = :from"),
		UpdateExpression:          aws.String(set),
		ExpressionAttributeNames:  map[string]string{"#st": "state"},
		ExpressionAttributeValues: vals,
	}
}

// SetGroupState moves version g.Version from one state to another:
// CLAIMING → PLANNED after every claim held, COMPLETE → RETIRED after the
// outputs are published and the sources retiring. (Supersede abandons a
// version with its reason.)
func (st *Store) SetGroupState(ctx context.Context, g Group, from, to GroupState, now time.Time) error {
	u := groupUpdate(g, from, "SET #st = :to, updatedAt = :now", map[string]types.AttributeValue{
		":to": s(string(to)), ":now": n(now.UnixMilli()),
	})
	return st.transact(ctx, fmt.Sprintf("%s %s→%s", g.Ref(), from, to), []types.TransactWriteItem{{Update: u}})
}

// Supersede abandons version g.Version (CLAIMING|PLANNED → SUPERSEDED),
// recording why.
func (st *Store) Supersede(ctx context.Context, g Group, from GroupState, reason string, now time.Time) error {
	u := groupUpdate(g, from, "SET #st = :to, reason = :reason, updatedAt = :now", map[string]types.AttributeValue{
		":to": s(string(GroupSuperseded)), ":reason": s(clip(reason)), ":now": n(now.UnixMilli()),
	})
	return st.transact(ctx, fmt.Sprintf("%s %s→%s", g.Ref(), from, GroupSuperseded), []types.TransactWriteItem{{Update: u}})
}

// Complete completes version g.Version: the head PLANNED → COMPLETE and a
// condition check that every partition item is DONE, in one transaction.
// A concurrent commit or lease takeover on any partition conflicts with it,
// so exactly one of them wins (the Janus lesson).
func (st *Store) Complete(ctx context.Context, g Group, now time.Time) error {
	items := []types.TransactWriteItem{{Update: groupUpdate(g, GroupPlanned,
		"SET #st = :to, updatedAt = :now, everCompleted = :t", map[string]types.AttributeValue{
			":to": s(string(GroupComplete)), ":now": n(now.UnixMilli()), ":t": &types.AttributeValueMemberBOOL{Value: true},
		})}}
	for p := 0; p < g.Partitions; p++ {
		items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			Key:                       key(tenantPK(g.Tenant), partitionSK(g.Key, g.Version, p)),
			ConditionExpression:       aws.String("#st = :done"),
			ExpressionAttributeNames:  map[string]string{"#st": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":done": s(string(PartitionDone))},
		}})
	}
	return st.transact(ctx, "complete "+g.Ref(), items)
}

// FinishVersion takes a final version (RETIRED or SUPERSEDED, cleanup done)
// off the active agenda and schedules its second orphan sweep at
// orphansAt. The condition names the version and its final state, so a
// newer version's entry is never removed by a late cleaner.
func (st *Store) FinishVersion(ctx context.Context, g Group, orphansAt time.Time) error {
	items := []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{
			Key:                       key(tenantPK(g.Tenant), groupSK(g.Key)),
			ConditionExpression:       aws.String("version = :v AND #st = :st"),
			ExpressionAttributeNames:  map[string]string{"#st": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(g.Version), ":st": s(string(g.State))},
		}},
		{Delete: &types.Delete{Key: key(agendaPK, agendaSK(AgendaActive, time.UnixMilli(0), g.Tenant, activeSubject(g.Key)))}},
		{Put: &types.Put{Item: agendaItem(AgendaOrphans, orphansAt, g.Tenant, orphansSubject(g))}},
	}
	return st.transact(ctx, "finish "+g.Ref(), items)
}

// orphansSubject names a version in its second-orphan-sweep agenda entry.
func orphansSubject(g Group) string { return fmt.Sprintf("%s@v%d", g.Key, g.Version) }
