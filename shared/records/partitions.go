package records

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/awslimits"
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
// returns what the job reads then (ReadJob: the attempt it runs is its
// partition's). The lease is one transaction: a condition on the
// group (version = v AND PLANNED, fewer than maxFailures failures) and a
// conditional update of the partition (PENDING → RUNNING, attempt + 1).
//
// A partition still RUNNING under a lease that expired before now is
// taken over in a second transaction, which also counts the dead
// attempt as a failure on the head (the job died without a commit or a
// report: a timeout, out of memory, a crash): its condition names the
// holder whose lease expired, so each dead attempt is counted once.
func (st *Store) Lease(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, owner string, now, leaseUntil time.Time, maxFailures int) (JobView, error) {
	ref := partitionRef(tenant, g, v, p)
	if maxFailures < 1 {
		return JobView{}, fmt.Errorf("lease %s: the attempt limit must be at least 1, not %d", ref, maxFailures)
	}
	fg, err := guard(protocol.LeaseFence, subject{tenant: tenant, group: g.String(), version: v},
		expect{version: v, max: maxFailures, now: now.UnixMilli()})
	if err != nil {
		return JobView{}, err
	}
	pg, err := guard(protocol.Lease, partitionOf(tenant, g, v, p), expect{owner: owner, now: now.UnixMilli()})
	if err != nil {
		return JobView{}, err
	}
	var x tx
	x.add(fg, fg.check(key(tenantPK(tenant), groupSK(g))))
	x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p)), leaseSet, "", leaseVals(owner, now, leaseUntil)))
	err = st.commit(ctx, "lease "+ref, x)
	if IsConditionLost(err) {
		err = st.takeOver(ctx, tenant, g, v, p, ref, owner, now, leaseUntil, maxFailures, err)
	}
	if err != nil {
		return JobView{}, err
	}
	return st.ReadJob(ctx, tenant, g, v, p)
}

// JobView is what a job reads of the records once it holds its lease: its
// version's head, its partition (the attempt it runs) and the record of
// its group's stream.
type JobView struct {
	Head      Group
	HeadFound bool
	Partition Partition     // zero when not asked for
	Stream    *StreamRecord // nil: the stream has no record
}

// ReadJob reads the head of g, partition p of version v (none for p < 0)
// and the record of g's stream, strongly consistent, in one request where
// one read each made three.
func (st *Store) ReadJob(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int) (JobView, error) {
	sks := []string{groupSK(g), streamSK(g.Stream)}
	if p >= 0 {
		sks = append(sks, partitionSK(g, v, p))
	}
	items, err := st.batchGet(ctx, tenantPK(tenant), sks)
	if err != nil {
		return JobView{}, fmt.Errorf("read the job of %s: %w", partitionRef(tenant, g, v, p), err)
	}
	var jv JobView
	for _, it := range items {
		var sk string
		if err := attributevalue.Unmarshal(it["SK"], &sk); err != nil {
			return JobView{}, fmt.Errorf("read the job of %s: %w", partitionRef(tenant, g, v, p), err)
		}
		switch sk {
		case groupSK(g):
			if jv.Head, err = decodeGroup(tenant, it); err != nil {
				return JobView{}, err
			}
			jv.HeadFound = true
		case streamSK(g.Stream):
			jv.Stream = &StreamRecord{}
			err = attributevalue.UnmarshalMap(it, jv.Stream)
		default:
			err = attributevalue.UnmarshalMap(it, &jv.Partition)
		}
		if err != nil {
			return JobView{}, fmt.Errorf("decode %s/%s: %w", tenantPK(tenant), sk, err)
		}
	}
	return jv, nil
}

// LeaseAll takes for owner, until leaseUntil, every partition of version
// v among parts (as the caller read them) that is PENDING or RUNNING under
// a lease that expired before now: the partitions one job writes in one
// pass (a split). The pending ones are leased in one transaction with the
// lease fence; those a dead job left are taken over in a second, which
// counts that dead attempt once on the head (one job died, whatever it
// held). It returns the partitions leased, and none when every one is
// DONE or held by a live lease. A lost condition is returned as Lease
// returns it, ErrAttemptsExhausted when the version's jobs failed too
// often.
func (st *Store) LeaseAll(ctx context.Context, tenant string, g planning.GroupKey, v int64, parts []Partition, owner string, now, leaseUntil time.Time, maxFailures int) ([]int, error) {
	ref := fmt.Sprintf("%s/%s@v%d", tenant, g, v)
	if maxFailures < 1 {
		return nil, fmt.Errorf("lease %s: the attempt limit must be at least 1, not %d", ref, maxFailures)
	}
	var pending, dead []Partition
	for _, p := range parts {
		switch {
		case p.State == protocol.PartitionPending:
			pending = append(pending, p)
		case p.State == protocol.PartitionRunning && p.LeaseOwner != "" && p.LeaseUntil < now.UnixMilli():
			dead = append(dead, p)
		}
	}
	exhausted := func(lost error) error {
		var head Group
		if _, err := st.get(ctx, tenantPK(tenant), groupSK(g), &head); err != nil {
			return err
		}
		if head.Version == v && head.State == protocol.GroupPlanned && head.Failures >= maxFailures {
			return fmt.Errorf("lease %s: %d failures: %w", ref, head.Failures, ErrAttemptsExhausted)
		}
		return lost
	}
	var leased []int
	if len(pending) > 0 {
		fg, err := guard(protocol.LeaseFence, subject{tenant: tenant, group: g.String(), version: v},
			expect{version: v, max: maxFailures, now: now.UnixMilli()})
		if err != nil {
			return nil, err
		}
		var x tx
		x.add(fg, fg.check(key(tenantPK(tenant), groupSK(g))))
		for _, p := range pending {
			pg, err := guard(protocol.Lease, partitionOf(tenant, g, v, p.Index), expect{owner: owner, now: now.UnixMilli()})
			if err != nil {
				return nil, err
			}
			x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p.Index)), leaseSet, "", leaseVals(owner, now, leaseUntil)))
			leased = append(leased, p.Index)
		}
		if err := st.commit(ctx, fmt.Sprintf("lease %d partitions of %s", len(pending), ref), x); err != nil {
			if IsConditionLost(err) {
				return nil, exhausted(err)
			}
			return nil, err
		}
	}
	if len(dead) > 0 {
		died := Failure{Kind: FailureDied, Message: fmt.Sprintf("the job of %s died: its lease expired at %s without a commit or a report (timeout, out of memory, crash?)",
			dead[0].LeaseOwner, time.UnixMilli(dead[0].LeaseUntil).UTC().Format(time.RFC3339))}
		headVals := map[string]types.AttributeValue{":now": n(now.UnixMilli())}
		set := failureSet(died, headVals)
		hg, err := guard(protocol.CountDeadAttempt, subject{tenant: tenant, group: g.String(), version: v},
			expect{version: v, max: maxFailures, now: now.UnixMilli()})
		if err != nil {
			return leased, err
		}
		var x tx
		x.add(hg, hg.update(key(tenantPK(tenant), groupSK(g)), set+", updatedAt = :now", "", headVals))
		for _, p := range dead {
			pg, err := guard(protocol.TakeOver, partitionOf(tenant, g, v, p.Index), expect{owner: owner, prev: p.LeaseOwner, now: now.UnixMilli()})
			if err != nil {
				return leased, err
			}
			vals := leaseVals(owner, now, leaseUntil)
			vals[":zero"], vals[":err"] = n(0), s(clip(died.Message))
			x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, p.Index)),
				leaseSet+", failures = if_not_exists(failures, :zero) + :one, lastError = :err", "", vals))
		}
		if err := st.commit(ctx, fmt.Sprintf("take over %d partitions of %s from %s", len(dead), ref, dead[0].LeaseOwner), x); err != nil {
			switch {
			case !IsConditionLost(err):
				return leased, err
			case len(leased) > 0:
				// Another job took them over: this one runs what the
				// first transaction leased.
				return leased, nil
			}
			return nil, exhausted(err)
		}
		for _, p := range dead {
			leased = append(leased, p.Index)
		}
	}
	sort.Ints(leased)
	return leased, nil
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
	return st.CommitAll(ctx, tenant, g, v, owner, []Committed{{Partition: p, Output: output, Ranges: ranges}}, now)
}

// Committed is one partition a job commits: its output (nil for an empty
// partition) and the ranges the output is a member of.
type Committed struct {
	Partition int
	Output    *Block
	Ranges    []planning.GroupKey
}

// CommitAll commits several partitions of version v leased by owner (the
// partitions one job wrote in one pass: a split), each as Commit does, in
// as few transactions as DynamoDB's limits allow (100 items, 4 MB), each
// fenced on the group. Every partition's commit is whole in one
// transaction; a later batch that loses its condition leaves the earlier
// ones committed, as separate jobs' commits would be.
func (st *Store) CommitAll(ctx context.Context, tenant string, g planning.GroupKey, v int64, owner string, parts []Committed, now time.Time) error {
	fg, err := guard(protocol.JobFence, subject{tenant: tenant, group: g.String(), version: v}, expect{version: v, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	fence := fg.check(key(tenantPK(tenant), groupSK(g)))
	var (
		x     tx
		size  int
		refs  []string
		flush = func() error {
			if len(refs) == 0 {
				return nil
			}
			err := st.commit(ctx, "commit "+strings.Join(refs, ", "), x)
			x, size, refs = tx{}, 0, nil
			return err
		}
	)
	for _, c := range parts {
		var one tx
		if err := commitItems(&one, tenant, g, v, c, owner, now); err != nil {
			return err
		}
		n := 0
		for _, it := range one.items {
			n += transactItemSize(it)
		}
		if len(refs) > 0 && (len(x.items)+len(one.items) > awslimits.MaxTransactItems || size+n > awslimits.MaxTransactBytes*3/4) {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(refs) == 0 {
			x.add(fg, fence)
			size = transactItemSize(fence)
		}
		x.items = append(x.items, one.items...)
		x.changes = append(x.changes, one.changes...)
		size += n
		refs = append(refs, partitionRef(tenant, g, v, c.Partition))
	}
	return flush()
}

// commitItems adds partition c's commit to x: the partition DONE with its
// output named (or empty), and the output record with its meta.json parts
// and range memberships.
func commitItems(x *tx, tenant string, g planning.GroupKey, v int64, c Committed, owner string, now time.Time) error {
	pg, err := guard(protocol.Commit, partitionOf(tenant, g, v, c.Partition), expect{owner: owner, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	output := c.Output
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
	x.add(pg, pg.update(key(tenantPK(tenant), partitionSK(g, v, c.Partition)), set, "", vals))
	if output == nil {
		return nil
	}
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
	for _, r := range c.Ranges {
		x.plain(memberPut(*output, r))
	}
	return nil
}

// transactItemSize is an item's share of a transaction's 4 MB.
func transactItemSize(it types.TransactWriteItem) int {
	switch {
	case it.Put != nil:
		return awslimits.ItemSize(it.Put.Item)
	case it.Update != nil:
		return awslimits.ItemSize(it.Update.Key) + awslimits.ItemSize(it.Update.ExpressionAttributeValues)
	case it.Delete != nil:
		return awslimits.ItemSize(it.Delete.Key)
	case it.ConditionCheck != nil:
		return awslimits.ItemSize(it.ConditionCheck.Key)
	}
	return 0
}
