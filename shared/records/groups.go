package records

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
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

// GetGroups reads the heads of groups gs of tenant (strongly consistent)
// in one request where one GetGroup each would make several: the planner
// looks at every level above a block at once. Groups with no head are
// absent from the map.
func (st *Store) GetGroups(ctx context.Context, tenant string, gs []planning.GroupKey) (map[planning.GroupKey]Group, error) {
	sks := make([]string, 0, len(gs))
	for _, g := range gs {
		sks = append(sks, groupSK(g))
	}
	items, err := st.batchGet(ctx, tenantPK(tenant), sks)
	if err != nil {
		return nil, fmt.Errorf("read groups of %s: %w", tenant, err)
	}
	out := make(map[planning.GroupKey]Group, len(items))
	for _, it := range items {
		g, err := decodeGroup(tenant, it)
		if err != nil {
			return nil, err
		}
		out[g.Key] = g
	}
	return out, nil
}

// decodeGroup decodes a group head item of tenant, its key parsed.
func decodeGroup(tenant string, it map[string]types.AttributeValue) (Group, error) {
	var g Group
	if err := attributevalue.UnmarshalMap(it, &g); err != nil {
		return g, fmt.Errorf("decode group of %s: %w", tenant, err)
	}
	var err error
	g.Key, err = planning.ParseGroupKey(g.KeyString)
	return g, err
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
		g, err := decodeGroup(tenant, it)
		if err != nil {
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
	if next.State != protocol.GroupClaiming {
		return fmt.Errorf("create %s: a version starts CLAIMING, not %s", next.Ref(), next.State)
	}
	head, err := marshalItem(next, tenantPK(next.Tenant), groupSK(next.Key))
	if err != nil {
		return err
	}
	on := subject{tenant: next.Tenant, group: next.KeyString, version: next.Version}
	var hg guarded
	if prev.Version == 0 {
		hg, err = guard(protocol.CreateFirst, on, expect{now: now.UnixMilli()})
	} else {
		hg, err = guard(protocol.CreateNext, on, expect{from: string(prev.State), version: prev.Version, now: now.UnixMilli()})
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", next.Ref(), err)
	}
	var x tx
	x.add(hg, hg.put(head))
	for p := 0; p < next.Partitions; p++ {
		part, err := marshalItem(Partition{
			Tenant: next.Tenant, Group: next.KeyString, Version: next.Version, Index: p,
			State: protocol.PartitionPending, CreatedAt: next.CreatedAt, UpdatedAt: now.UnixMilli(),
		}, tenantPK(next.Tenant), partitionSK(next.Key, next.Version, p))
		if err != nil {
			return err
		}
		pon := on
		pon.partition = p
		pg, err := guard(protocol.CreatePartition, pon, expect{now: now.UnixMilli()})
		if err != nil {
			return err
		}
		x.add(pg, pg.put(part))
	}
	active := agendaItem(AgendaActive, time.UnixMilli(0), next.Tenant, activeSubject(next.Key))
	active["since"] = n(next.CreatedAt)
	x.plain(types.TransactWriteItem{Put: &types.Put{Item: active}})
	if prev.Version > 0 {
		x.plain(types.TransactWriteItem{Put: &types.Put{
			Item: agendaItem(AgendaOrphans, prevOrphansAt, prev.Tenant, orphansSubject(prev)),
		}})
	}
	return st.commit(ctx, "create "+next.Ref(), x)
}

// versionOf names g's head as a change's subject.
func versionOf(g Group) subject {
	return subject{tenant: g.Tenant, group: g.Key.String(), version: g.Version}
}

// versionWrite is transition name of version g.Version, leaving from:
// the update of its head that also sets set (and removes remove).
func versionWrite(name protocol.Name, g Group, from protocol.GroupState, now time.Time, set, remove string,
	vals map[string]types.AttributeValue) (guarded, types.TransactWriteItem, error) {
	gd, err := guard(name, versionOf(g), expect{from: string(from), version: g.Version, now: now.UnixMilli()})
	if err != nil {
		return guarded{}, types.TransactWriteItem{}, fmt.Errorf("%s %s: %w", name, g.Ref(), err)
	}
	return gd, gd.update(key(tenantPK(g.Tenant), groupSK(g.Key)), set, remove, vals), nil
}

// writeVersion sends one transition of the head as its own transaction.
func (st *Store) writeVersion(ctx context.Context, name protocol.Name, g Group, from protocol.GroupState, now time.Time,
	set, remove string, vals map[string]types.AttributeValue) error {
	gd, it, err := versionWrite(name, g, from, now, set, remove, vals)
	if err != nil {
		return err
	}
	var x tx
	x.add(gd, it)
	return st.commit(ctx, fmt.Sprintf("%s %s %s→%s", name, g.Ref(), from, gd.t.Enters(string(from))), x)
}

// SetGroupState moves version g.Version from one state to another by the
// protocol's plain transition between them: CLAIMING → PLANNED after every
// claim held, COMPLETE → RETIRED after the outputs are published and the
// sources retiring, CLAIMING|PLANNED → SUPERSEDED. A pair of states the
// protocol has no such transition for is refused.
func (st *Store) SetGroupState(ctx context.Context, g Group, from, to protocol.GroupState, now time.Time) error {
	t, err := protocol.Between(protocol.ItemVersion, string(from), string(to))
	if err != nil {
		return fmt.Errorf("%s: %w", g.Ref(), err)
	}
	return st.writeVersion(ctx, t.Name, g, from, now, "updatedAt = :now", "", map[string]types.AttributeValue{":now": n(now.UnixMilli())})
}

// Supersede abandons version g.Version (CLAIMING|PLANNED → SUPERSEDED),
// recording why.
func (st *Store) Supersede(ctx context.Context, g Group, from protocol.GroupState, reason string, now time.Time) error {
	return st.writeVersion(ctx, protocol.Supersede, g, from, now, "reason = :reason, updatedAt = :now", "", map[string]types.AttributeValue{
		":reason": s(clip(reason)), ":now": n(now.UnixMilli()),
	})
}

// Complete completes version g.Version: the head PLANNED → COMPLETE and a
// condition check that every partition item is DONE, in one transaction.
// A concurrent commit or lease takeover on any partition conflicts with it,
// so exactly one of them wins (the Janus lesson).
func (st *Store) Complete(ctx context.Context, g Group, now time.Time) error {
	gd, it, err := versionWrite(protocol.Complete, g, protocol.GroupPlanned, now, "updatedAt = :now, everCompleted = :t", "",
		map[string]types.AttributeValue{":now": n(now.UnixMilli()), ":t": &types.AttributeValueMemberBOOL{Value: true}})
	if err != nil {
		return err
	}
	var x tx
	x.add(gd, it)
	for p := 0; p < g.Partitions; p++ {
		on := versionOf(g)
		on.partition = p
		dg, err := guard(protocol.DoneCheck, on, expect{now: now.UnixMilli()})
		if err != nil {
			return err
		}
		x.add(dg, dg.check(key(tenantPK(g.Tenant), partitionSK(g.Key, g.Version, p))))
	}
	return st.commit(ctx, "complete "+g.Ref(), x)
}

// FinishVersion takes a final version (RETIRED or SUPERSEDED, cleanup done)
// off the active agenda and schedules its second orphan sweep at
// orphansAt. The condition names the version and its final state, so a
// newer version's entry is never removed by a late cleaner.
func (st *Store) FinishVersion(ctx context.Context, g Group, orphansAt time.Time) error {
	gd, err := guard(protocol.FinishVersion, versionOf(g), expect{from: string(g.State), version: g.Version})
	if err != nil {
		return fmt.Errorf("finish %s: %w", g.Ref(), err)
	}
	var x tx
	x.add(gd, gd.check(key(tenantPK(g.Tenant), groupSK(g.Key))))
	x.plain(
		types.TransactWriteItem{Delete: &types.Delete{Key: agendaKey(AgendaActive, time.UnixMilli(0), g.Tenant, activeSubject(g.Key))}},
		// Where a version planned by an earlier release has it.
		types.TransactWriteItem{Delete: &types.Delete{Key: legacyAgendaKey(AgendaActive, time.UnixMilli(0), g.Tenant, activeSubject(g.Key))}},
		types.TransactWriteItem{Put: &types.Put{Item: agendaItem(AgendaOrphans, orphansAt, g.Tenant, orphansSubject(g))}},
	)
	return st.commit(ctx, "finish "+g.Ref(), x)
}

// orphansSubject names a version in its second-orphan-sweep agenda entry.
func orphansSubject(g Group) string { return fmt.Sprintf("%s@v%d", g.Key, g.Version) }
