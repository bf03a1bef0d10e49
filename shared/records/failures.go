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

// maxErrorText bounds a failure's text in a record (items are at most
// 400 KB; an error can quote a whole series).
const maxErrorText = 2000

func clip(s string) string {
	if len(s) > maxErrorText {
		return s[:maxErrorText] + "…"
	}
	return s
}

// failureSet is the part of an update that records a failure on the head.
// The blamed block is kept until another source failure blames another:
// a failure that blames none (a deadline, a dead job) says nothing about
// the sources, and must not make a corrupt source's group look innocent.
func failureSet(f Failure, vals map[string]types.AttributeValue) string {
	vals[":zero"], vals[":one"] = n(0), n(1)
	vals[":err"], vals[":kind"] = s(clip(f.Message)), s(string(f.Kind))
	set := "failures = if_not_exists(failures, :zero) + :one, lastError = :err, lastErrorKind = :kind"
	if f.Block != "" {
		vals[":eblock"] = s(f.Block)
		set += ", lastErrorBlock = :eblock"
	}
	return set
}

// RecordFailure records a failed attempt of partition p of version v by
// the lease holder owner, in one transaction fenced on the group (version
// = v AND PLANNED) and on the lease (RUNNING, leaseOwner = owner): the
// head's failures + 1 with the failure, and the partition back to PENDING
// with its lease released (the next attempt need not wait for it to
// expire) and its own failures + 1.
func (st *Store) RecordFailure(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, owner string, f Failure, now time.Time) error {
	head := Group{Tenant: tenant, Key: g, Version: v}
	headVals := map[string]types.AttributeValue{":now": n(now.UnixMilli())}
	set := failureSet(f, headVals)
	hg, hit, err := versionWrite(protocol.CountFailure, head, protocol.GroupPlanned, now, set+", updatedAt = :now", "", headVals)
	if err != nil {
		return err
	}
	on := versionOf(head)
	on.partition = p
	pg, err := guard(protocol.RecordFailure, on, expect{owner: owner, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	var x tx
	x.add(hg, hit)
	x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)),
		"failures = if_not_exists(failures, :zero) + :one, lastError = :err, updatedAt = :now", "leaseOwner, leaseUntil",
		map[string]types.AttributeValue{":zero": n(0), ":one": n(1), ":err": s(clip(f.Message)), ":now": n(now.UnixMilli())}))
	return st.commit(ctx, "record failure of "+partitionRef(tenant, g, v, p), x)
}

// RecordFailureAll records one failed attempt of the job that leased the
// partitions ps of version v (a split's one pass over all of them), in one
// transaction: the version's failure counted once, each partition's lease
// released (RUNNING → PENDING), fenced on owner's leases.
func (st *Store) RecordFailureAll(ctx context.Context, tenant string, g planning.GroupKey, v int64, ps []int, owner string, f Failure, now time.Time) error {
	if len(ps) == 1 {
		return st.RecordFailure(ctx, tenant, g, v, ps[0], owner, f, now)
	}
	head := Group{Tenant: tenant, Key: g, Version: v}
	headVals := map[string]types.AttributeValue{":now": n(now.UnixMilli())}
	set := failureSet(f, headVals)
	hg, hit, err := versionWrite(protocol.CountFailure, head, protocol.GroupPlanned, now, set+", updatedAt = :now", "", headVals)
	if err != nil {
		return err
	}
	var x tx
	x.add(hg, hit)
	for _, p := range ps {
		on := versionOf(head)
		on.partition = p
		pg, err := guard(protocol.RecordFailure, on, expect{owner: owner, now: now.UnixMilli()})
		if err != nil {
			return err
		}
		x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)),
			"failures = if_not_exists(failures, :zero) + :one, lastError = :err, updatedAt = :now", "leaseOwner, leaseUntil",
			map[string]types.AttributeValue{":zero": n(0), ":one": n(1), ":err": s(clip(f.Message)), ":now": n(now.UnixMilli())}))
	}
	return st.commit(ctx, fmt.Sprintf("record failure of %d partitions of %s", len(ps), head.Ref()), x)
}

// QuarantineSource abandons version g.Version (PLANNED → SUPERSEDED, with
// the reason) and quarantines its source b (CLAIMED by the version →
// QUARANTINED, unclaimed, with the reason), in one transaction. It returns
// the block's new gen, which the op writing its no-compact mark carries.
// The version's other sources are released by the superseded version's
// cleanup, and the group re-plans without b.
func (st *Store) QuarantineSource(ctx context.Context, g Group, b Block, reason string, now time.Time) (int64, error) {
	ref := g.Ref()
	hg, hit, err := versionWrite(protocol.QuarantineFence, g, protocol.GroupPlanned, now,
		"reason = :reason, quarantinedSource = :block, updatedAt = :now", "",
		map[string]types.AttributeValue{":reason": s(clip(reason)), ":block": s(b.ID), ":now": n(now.UnixMilli())})
	if err != nil {
		return 0, err
	}
	bg, bit, err := blockWrite(protocol.QuarantineSource, b, expect{by: ref}, now, "reason = :reason, updatedAt = :now", "claimedBy",
		map[string]types.AttributeValue{":reason": s(clip(reason)), ":now": n(now.UnixMilli())})
	if err != nil {
		return 0, err
	}
	var x tx
	x.add(hg, hit)
	x.add(bg, bit)
	return b.Gen + 1, st.commit(ctx, "quarantine "+b.Key()+" of "+ref, x)
}

// QuarantineGroup moves version g.Version PLANNED → QUARANTINED with the
// reason: its sources stay claimed, and no new version is planned until
// ReleaseGroup.
func (st *Store) QuarantineGroup(ctx context.Context, g Group, reason string, now time.Time) error {
	return st.writeVersion(ctx, protocol.QuarantineGroup, g, protocol.GroupPlanned, now, "reason = :reason, updatedAt = :now", "",
		map[string]types.AttributeValue{":reason": s(clip(reason)), ":now": n(now.UnixMilli())})
}

// ReleaseGroup is `sluice retry` of a quarantined group: QUARANTINED →
// SUPERSEDED with its failures forgotten, so the superseded version's
// cleanup releases the claims and the next version starts afresh.
func (st *Store) ReleaseGroup(ctx context.Context, g Group, now time.Time) error {
	return st.writeVersion(ctx, protocol.ReleaseGroup, g, protocol.GroupQuarantined, now, "reason = :reason, updatedAt = :now",
		"failures, lastError, lastErrorBlock, lastErrorKind",
		map[string]types.AttributeValue{":reason": s("released by sluice retry"), ":now": n(now.UnixMilli())})
}

// ReleaseBlock is `sluice retry` of a quarantined block: QUARANTINED at
// b.Gen → LIVE at gen + 1, the reason forgotten, with the block as it is
// in the bucket now (re-read: an operator may have re-uploaded fixed
// files under the same ULID): its meta.json, files and their versions
// (its time range and stream are the caller's to keep as they were: the
// range memberships depend on them), and b.Superseded, the versions the
// re-upload replaced, for a redelivered retry to delete again. Its
// publishedAt becomes now: the bucket index never dates the block before
// a meta.json re-uploaded under it.
// It returns the new gen, which the ops deleting Sluice's no-compact mark
// and the versions the record no longer names carry.
func (st *Store) ReleaseBlock(ctx context.Context, b Block, now time.Time) (int64, error) {
	files, err := attributevalue.Marshal(b.Files)
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", b.Key(), err)
	}
	b, parts, err := splitMeta(b)
	if err != nil {
		return 0, err
	}
	set := "files = :files, meta = :meta, metaParts = :parts, metaVid = :mvid, " +
		"series = :series, samples = :samples, indexBytes = :ib, publishedAt = :now, updatedAt = :now"
	vals := map[string]types.AttributeValue{
		":now": n(now.UnixMilli()), ":files": files, ":meta": s(b.Meta), ":parts": n(int64(b.MetaParts)), ":mvid": s(b.MetaVersionID),
		":series": n(int64(b.Series)), ":samples": n(int64(b.Samples)), ":ib": n(int64(b.IndexBytes)),
	}
	if len(b.Superseded) > 0 {
		sup, err := attributevalue.Marshal(b.Superseded)
		if err != nil {
			return 0, fmt.Errorf("release %s: %w", b.Key(), err)
		}
		set += ", superseded = :sup"
		vals[":sup"] = sup
	}
	bg, bit, err := blockWrite(protocol.ReleaseBlock, b, expect{}, now, set, "reason", vals)
	if err != nil {
		return 0, err
	}
	var x tx
	x.add(bg, bit)
	x.plain(parts...)
	return b.Gen + 1, st.commit(ctx, "release "+b.Key(), x)
}

// RecordNoCompactMark records the no-compact-mark.json version the
// uploader wrote (ours) or found (another tool's) for a QUARANTINED block
// at gen.
// globalVid is the global marker's version ("" when none was written).
func (st *Store) RecordNoCompactMark(ctx context.Context, tenant, id string, gen int64, vid string, ours bool, globalVid string, now time.Time) error {
	b := Block{Tenant: tenant, ID: id, Gen: gen}
	set := "ncVid = :vid, ncOurs = :ours, updatedAt = :now"
	vals := map[string]types.AttributeValue{":vid": s(vid), ":ours": &types.AttributeValueMemberBOOL{Value: ours}, ":now": n(now.UnixMilli())}
	if globalVid != "" {
		set += ", gncVid = :gvid"
		vals[":gvid"] = s(globalVid)
	}
	return st.writeBlock(ctx, "no-compact mark of "+b.Key(), protocol.RecordNoCompact, b, expect{}, now, set, "", vals)
}

// ForgetNoCompactMark records that Sluice's no-compact mark, version vid,
// is gone from the bucket, for a block read (from) at gen: LIVE or CLAIMED
// when the uploader removed it after a release, QUARANTINED when a
// NO_COMPACT op found it deleted by such a removal. The record no longer
// names that version.
func (st *Store) ForgetNoCompactMark(ctx context.Context, tenant, id string, from protocol.BlockState, gen int64, vid string, now time.Time) error {
	b := Block{Tenant: tenant, ID: id, Gen: gen}
	return st.writeBlock(ctx, "forget no-compact mark of "+b.Key(), protocol.ForgetNoCompact, b, expect{from: string(from), vid: vid}, now,
		"updatedAt = :now", "ncVid, ncOurs, gncVid", map[string]types.AttributeValue{":now": n(now.UnixMilli())})
}
