package records

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
)

// maxTransactItems is DynamoDB's limit on one transaction.
const maxTransactItems = 100

// RegisterBlock records a newly uploaded (or rejected) block: put-if-absent
// of its item, its membership in every group range it falls in, its
// stream (when the block has one: sr is nil for a rejected upload) and its
// tenant. A block that is already registered loses the condition and comes
// back as *ConditionLostError with the existing record.
//
// A block found with another tool's deletion mark (a bucket adopted from
// a running compactor) is registered RETIRING, its mark recorded, and put
// on the agenda for deletion when the deletion delay from its mark ends:
// it is never a source, and it is deleted as the mark asked.
func (st *Store) RegisterBlock(ctx context.Context, b Block, ranges []planning.GroupKey, sr *StreamRecord) error {
	b, parts, err := splitMeta(b)
	if err != nil {
		return err
	}
	item, err := marshalItem(b, tenantPK(b.Tenant), blockSK(b.ID))
	if err != nil {
		return err
	}
	var name protocol.Name
	switch b.State {
	case protocol.BlockLive:
		name = protocol.RegisterBlock
	case protocol.BlockRejected:
		name = protocol.RegisterRejected
	case protocol.BlockRetiring:
		if b.MarkVersionID == "" || b.RetireAt == 0 {
			return fmt.Errorf("register %s: a block registered RETIRING needs its deletion mark's version and deletion time", b.Key())
		}
		name = protocol.RegisterMarked
	default:
		return fmt.Errorf("register %s: an upload is registered LIVE, REJECTED or RETIRING, not %s", b.Key(), b.State)
	}
	bg, err := guard(name, subject{tenant: b.Tenant, block: b.ID}, expect{gen: b.Gen})
	if err != nil {
		return err
	}
	var x tx
	x.add(bg, bg.put(item))
	x.plain(parts...)
	for _, g := range ranges {
		x.plain(memberPut(b, g))
	}
	if b.State == protocol.BlockRetiring {
		x.plain(types.TransactWriteItem{Put: &types.Put{Item: agendaItem(AgendaDelete, time.UnixMilli(b.RetireAt), b.Tenant, b.ID)}})
	}
	if sr != nil {
		// The same stream always has the same record (its id is a hash of
		// its labels and resolution), so an unconditional put is idempotent.
		sr.Tenant = b.Tenant
		it, err := marshalItem(sr, tenantPK(b.Tenant), streamSK(sr.ID))
		if err != nil {
			return err
		}
		x.plain(types.TransactWriteItem{Put: &types.Put{Item: it}})
	}
	x.plain(types.TransactWriteItem{Put: &types.Put{
		Item: map[string]types.AttributeValue{"PK": s(tenantsPK), "SK": s(b.Tenant), "tenant": s(b.Tenant)},
	}})
	return st.commit(ctx, "register "+b.Key(), x)
}

func memberPut(b Block, g planning.GroupKey) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{Item: map[string]types.AttributeValue{
		"PK": s(tenantPK(b.Tenant)), "SK": s(memberSK(g, b.ID)), "id": s(b.ID),
	}}}
}

// GetBlock reads one block; ok is false when it is not registered.
func (st *Store) GetBlock(ctx context.Context, tenant, id string) (b Block, ok bool, err error) {
	ok, err = st.get(ctx, tenantPK(tenant), blockSK(id), &b)
	if err == nil && ok {
		err = st.loadMeta(ctx, &b)
	}
	return b, ok, err
}

// GetBlocks reads blocks by id (strongly consistent), in id order; ids
// that are not registered are left out, and an id given twice is read
// once (DynamoDB refuses a batch that names a key twice: a sweep with two
// agenda entries of one block, which a crash between their put and
// delete leaves, must not fail on it).
func (st *Store) GetBlocks(ctx context.Context, tenant string, ids []string) ([]Block, error) {
	sks := make([]string, 0, len(ids))
	for _, id := range ids {
		sks = append(sks, blockSK(id))
	}
	items, err := st.batchGet(ctx, tenantPK(tenant), sks)
	if err != nil {
		return nil, fmt.Errorf("read blocks of %s: %w", tenant, err)
	}
	out, err := st.decodeBlocks(ctx, tenant, items)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// batchGet reads the items of pk with the given sort keys (strongly
// consistent), a hundred to a BatchGetItem, re-asking for the keys
// DynamoDB leaves unprocessed. Keys not found are left out, and a key
// given twice is read once (DynamoDB refuses a batch naming a key twice).
func (st *Store) batchGet(ctx context.Context, pk string, sks []string) ([]map[string]types.AttributeValue, error) {
	sks = slices.Compact(slices.Sorted(slices.Values(sks)))
	var out []map[string]types.AttributeValue
	for start := 0; start < len(sks); start += 100 {
		end := min(start+100, len(sks))
		keys := make([]map[string]types.AttributeValue, 0, end-start)
		for _, sk := range sks[start:end] {
			keys = append(keys, key(pk, sk))
		}
		req := map[string]types.KeysAndAttributes{st.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for backoff := 10 * time.Millisecond; len(req) > 0; backoff *= 2 {
			var res *dynamodb.BatchGetItemOutput
			err := st.retry(ctx, "batch get "+pk, func() error {
				var err error
				res, err = st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
				return err
			})
			if err != nil {
				return nil, err
			}
			out = append(out, res.Responses[st.table]...)
			req = res.UnprocessedKeys
			if len(req) > 0 {
				if err := sleep(ctx, backoff); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// RangeBlocks reads every block registered in group g's range.
func (st *Store) RangeBlocks(ctx context.Context, tenant string, g planning.GroupKey) ([]Block, error) {
	if g.IsSplit() {
		// A split's range is its block.
		return st.GetBlocks(ctx, tenant, []string{g.Block})
	}
	items, err := st.query(ctx, tenantPK(tenant), memberPrefix(g))
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(items))
	for _, it := range items {
		if id, ok := it["id"].(*types.AttributeValueMemberS); ok {
			ids = append(ids, id.Value)
		}
	}
	return st.GetBlocks(ctx, tenant, ids)
}

// TenantBlocks reads every block of a tenant (status and verify; never on
// the hot path).
func (st *Store) TenantBlocks(ctx context.Context, tenant string) ([]Block, error) {
	items, err := st.query(ctx, tenantPK(tenant), "B#")
	if err != nil {
		return nil, err
	}
	return st.decodeBlocks(ctx, tenant, items)
}

// decodeBlocks decodes block items of tenant, their meta.json with them.
func (st *Store) decodeBlocks(ctx context.Context, tenant string, items []map[string]types.AttributeValue) ([]Block, error) {
	out := make([]Block, 0, len(items))
	for _, it := range items {
		var b Block
		if err := attributevalue.UnmarshalMap(it, &b); err != nil {
			return nil, fmt.Errorf("decode block of %s: %w", tenant, err)
		}
		if err := st.loadMeta(ctx, &b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// GetStream reads one stream's record; ok is false when none exists.
func (st *Store) GetStream(ctx context.Context, tenant, id string) (r StreamRecord, ok bool, err error) {
	ok, err = st.get(ctx, tenantPK(tenant), streamSK(id), &r)
	return r, ok, err
}

// TenantStreams reads every stream of a tenant (status).
func (st *Store) TenantStreams(ctx context.Context, tenant string) ([]StreamRecord, error) {
	items, err := st.query(ctx, tenantPK(tenant), "S#")
	if err != nil {
		return nil, err
	}
	out := make([]StreamRecord, 0, len(items))
	for _, it := range items {
		var r StreamRecord
		if err := attributevalue.UnmarshalMap(it, &r); err != nil {
			return nil, fmt.Errorf("decode stream of %s: %w", tenant, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Tenants lists every tenant that ever registered a block.
func (st *Store) Tenants(ctx context.Context) ([]string, error) {
	items, err := st.query(ctx, tenantsPK, "")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		if t, ok := it["tenant"].(*types.AttributeValueMemberS); ok {
			out = append(out, t.Value)
		}
	}
	return out, nil
}

// blockWrite is transition name of block b (at b.Gen): the update of its
// item that also sets set (and removes remove).
func blockWrite(name protocol.Name, b Block, e expect, now time.Time, set, remove string,
	vals map[string]types.AttributeValue) (guarded, types.TransactWriteItem, error) {
	e.gen, e.now = b.Gen, now.UnixMilli()
	g, err := guard(name, subject{tenant: b.Tenant, block: b.ID}, e)
	if err != nil {
		return guarded{}, types.TransactWriteItem{}, fmt.Errorf("%s %s: %w", name, b.Key(), err)
	}
	return g, g.update(key(tenantPK(b.Tenant), blockSK(b.ID)), set, remove, vals), nil
}

// writeBlock sends one transition of a block as a one-item transaction,
// so that its ClientRequestToken makes an SDK retry of a write that
// already landed succeed, instead of reporting a lost condition against
// itself.
func (st *Store) writeBlock(ctx context.Context, op string, name protocol.Name, b Block, e expect, now time.Time,
	set, remove string, vals map[string]types.AttributeValue) error {
	g, it, err := blockWrite(name, b, e, now, set, remove, vals)
	if err != nil {
		return err
	}
	var x tx
	x.add(g, it)
	return st.commit(ctx, op, x)
}

// Claim claims sources for version g, in transactions of at most 100.
// Each claim expects the block LIVE, published, unclaimed and at the gen
// that planning read; a lost claim abandons the version (the caller
// releases what was claimed). Claiming is idempotent per (ref, batch).
func (st *Store) Claim(ctx context.Context, g Group, srcs []Block, now time.Time) error {
	ref := g.Ref()
	// Every batch is fenced on the version: still the head and CLAIMING.
	// Without the fence a planner slowed between creating the version and
	// claiming could claim for a version the sweep had superseded and
	// cleaned up already, and nothing would ever release those claims
	// (chaos seed 18: the range stayed "busy with another group").
	fg, err := guard(protocol.ClaimFence, versionOf(g), expect{version: g.Version, now: now.UnixMilli()})
	if err != nil {
		return err
	}
	fence := fg.check(key(tenantPK(g.Tenant), groupSK(g.Key)))
	for start := 0; start < len(srcs); start += maxTransactItems - 1 {
		batch := srcs[start:min(start+maxTransactItems-1, len(srcs))]
		var x tx
		x.add(fg, fence)
		for _, b := range batch {
			bg, it, err := blockWrite(protocol.Claim, b, expect{by: ref}, now, "claimedBy = :ref, updatedAt = :now", "",
				map[string]types.AttributeValue{":ref": s(ref), ":now": n(now.UnixMilli())})
			if err != nil {
				return err
			}
			x.add(bg, it)
		}
		if err := st.commit(ctx, "claim sources for "+ref, x); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseClaim returns a source claimed by ref to LIVE. Releasing a block
// that ref no longer holds is a lost condition (already released).
func (st *Store) ReleaseClaim(ctx context.Context, ref string, b Block, now time.Time) error {
	return st.writeBlock(ctx, "release "+b.Key()+" from "+ref, protocol.ReleaseClaim, b, expect{by: ref}, now,
		"updatedAt = :now", "claimedBy", map[string]types.AttributeValue{":now": n(now.UnixMilli())})
}

// Activate makes an output of a completed version LIVE (PENDING → LIVE),
// recording the partitions of its count that hold none of its data
// (Block.EmptyPartitions). It returns the block's new gen, which the
// PUBLISH op carries.
func (st *Store) Activate(ctx context.Context, b Block, empty []int, now time.Time) (int64, error) {
	set, vals := "updatedAt = :now", map[string]types.AttributeValue{":now": n(now.UnixMilli())}
	if len(empty) > 0 {
		l, err := attributevalue.Marshal(empty)
		if err != nil {
			return 0, fmt.Errorf("activate %s: %w", b.Key(), err)
		}
		set += ", emptyParts = :empty"
		vals[":empty"] = l
	}
	return b.Gen + 1, st.writeBlock(ctx, "activate "+b.Key(), protocol.Activate, b, expect{by: b.ProducedBy}, now, set, "", vals)
}

// Discard retires an output of a superseded version (PENDING → DISCARDED)
// and returns the gen its DELETE op carries.
func (st *Store) Discard(ctx context.Context, b Block, now time.Time) (int64, error) {
	return b.Gen + 1, st.writeBlock(ctx, "discard "+b.Key(), protocol.Discard, b, expect{by: b.ProducedBy}, now,
		"updatedAt = :now", "", map[string]types.AttributeValue{":now": n(now.UnixMilli())})
}

// MarkPublished records that the uploader wrote meta.json version vid for
// the block at gen (LIVE, same gen), and when (publishedAt).
func (st *Store) MarkPublished(ctx context.Context, tenant, id string, gen int64, vid string, now time.Time) error {
	b := Block{Tenant: tenant, ID: id, Gen: gen}
	return st.writeBlock(ctx, "published "+b.Key(), protocol.MarkPublished, b, expect{}, now,
		"published = :t, metaVid = :vid, publishedAt = :now, updatedAt = :now", "", map[string]types.AttributeValue{
			":t": &types.AttributeValueMemberBOOL{Value: true}, ":vid": s(vid), ":now": n(now.UnixMilli()),
		})
}

// Retire moves a source of completed version ref to RETIRING (CLAIMED by
// ref → RETIRING) and puts it on the agenda for deletion at retireAt. It
// returns the gen the MARK and DELETE ops carry.
func (st *Store) Retire(ctx context.Context, ref string, b Block, retireAt, now time.Time) (int64, error) {
	return st.toRetiring(ctx, "retire "+b.Key()+" for "+ref, protocol.Retire, b, expect{by: ref}, retireAt, now)
}

// RetireAll retires several sources of version ref, each as Retire does,
// in as few requests as DynamoDB's limits allow (commitTogether). It
// returns, per block, the gen its MARK and DELETE ops carry and the
// retirement's error (a *ConditionLostError for a block a rival moved).
func (st *Store) RetireAll(ctx context.Context, ref string, bs []Block, retireAt, now time.Time) ([]int64, []error) {
	return st.blocksTogether(ctx, bs, func(i int) (named, error) {
		x, err := retiringTx(protocol.Retire, bs[i], expect{by: ref}, retireAt, now)
		return named{op: "retire " + bs[i].Key() + " for " + ref, x: x}, err
	})
}

// toRetiring is transition name of block b into RETIRING, with its DEL
// agenda entry at retireAt in the same transaction; it returns the gen
// the MARK and DELETE ops carry.
func (st *Store) toRetiring(ctx context.Context, op string, name protocol.Name, b Block, e expect, retireAt, now time.Time) (int64, error) {
	x, err := retiringTx(name, b, e, retireAt, now)
	if err != nil {
		return 0, err
	}
	return b.Gen + 1, st.commit(ctx, op, x)
}

// retiringTx is the transaction toRetiring commits.
func retiringTx(name protocol.Name, b Block, e expect, retireAt, now time.Time) (tx, error) {
	g, it, err := blockWrite(name, b, e, now, "retireAt = :at, updatedAt = :now", "",
		map[string]types.AttributeValue{":at": n(retireAt.UnixMilli()), ":now": n(now.UnixMilli())})
	if err != nil {
		return tx{}, err
	}
	var x tx
	x.add(g, it)
	x.plain(types.TransactWriteItem{Put: &types.Put{Item: agendaItem(AgendaDelete, retireAt, b.Tenant, b.ID)}})
	return x, nil
}

// RecordMark records the deletion-mark.json version the uploader wrote for
// a RETIRING block at gen, and when: the deletion delay runs from then, so
// the block's DEL agenda entry moves in the same transaction from
// retireAt (when it was retired) to deleteAt (the delay after the mark),
// and the sweep visits it once, when it is due, instead of first finding
// it early. globalVid is the global marker's version in a Cortex or Mimir
// bucket ("" when none was written). It never replaces another recorded
// version (protocol.NoOtherMark): a duplicate MARK op loses instead.
func (st *Store) RecordMark(ctx context.Context, tenant, id string, gen int64, vid, globalVid string, retireAt, deleteAt, now time.Time) error {
	b := Block{Tenant: tenant, ID: id, Gen: gen}
	set := "markVid = :vid, markedAt = :now, retireAt = :at, updatedAt = :now"
	vals := map[string]types.AttributeValue{":vid": s(vid), ":now": n(now.UnixMilli()), ":at": n(deleteAt.UnixMilli())}
	if globalVid != "" {
		set += ", gmVid = :gvid"
		vals[":gvid"] = s(globalVid)
	}
	g, it, err := blockWrite(protocol.RecordMark, b, expect{vid: vid}, now, set, "", vals)
	if err != nil {
		return err
	}
	var x tx
	x.add(g, it)
	x.plain(types.TransactWriteItem{Put: &types.Put{Item: agendaItem(AgendaDelete, deleteAt, tenant, id)}})
	if !retireAt.Equal(deleteAt) {
		x.plain(types.TransactWriteItem{Delete: &types.Delete{Key: agendaKey(AgendaDelete, retireAt, tenant, id)}})
	}
	return st.commit(ctx, "marked "+b.Key(), x)
}

// NoteForeignMark records a mark another tool wrote for a LIVE or CLAIMED
// block at gen (from is the state read): from now on the block is never
// claimed (the claim requires no no-compact mark). A no-compact mark is
// named as another's (a release of the block leaves it); a deletion mark
// is recorded with its time, and the deletion delay runs from then.
func (st *Store) NoteForeignMark(ctx context.Context, b Block, from protocol.BlockState, file, vid string, markedAt, now time.Time) error {
	set := "noCompact = :t, updatedAt = :now"
	vals := map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}, ":vid": s(vid), ":now": n(now.UnixMilli())}
	switch file {
	case "deletion-mark.json":
		set += ", markVid = :vid, markedAt = :at"
		vals[":at"] = n(markedAt.UnixMilli())
	case "no-compact-mark.json":
		set += ", ncVid = :vid, ncOurs = :f"
		vals[":f"] = &types.AttributeValueMemberBOOL{Value: false}
	default:
		return fmt.Errorf("note a mark of %s: %q is no mark", b.Key(), file)
	}
	return st.writeBlock(ctx, "note "+file+" of "+b.Key(), protocol.NoteMark, b, expect{from: string(from)}, now, set, "", vals)
}

// HonourDeletionMark retires a LIVE, unclaimed block whose deletion mark
// (another tool's) is recorded: LIVE → RETIRING at gen, on the agenda for
// deletion at retireAt. It returns the block's new gen.
func (st *Store) HonourDeletionMark(ctx context.Context, b Block, retireAt, now time.Time) (int64, error) {
	return st.toRetiring(ctx, "honour the deletion mark of "+b.Key(), protocol.HonourDeletion, b, expect{}, retireAt, now)
}

// Expire retires a LIVE, published, unclaimed block that is past its
// retention (LIVE → RETIRING at gen) and puts it on the agenda for deletion
// at retireAt, as a retired source. A block a version has claimed is
// never expired: retention waits for what that version makes of it. It
// returns the gen the MARK and DELETE ops carry.
func (st *Store) Expire(ctx context.Context, b Block, retireAt, now time.Time) (int64, error) {
	return st.toRetiring(ctx, "expire "+b.Key(), protocol.Expire, b, expect{}, retireAt, now)
}

// ExpireDownsampled is Expire for a block that is due a downsample: its
// condition also demands the downsample recorded (Block.Downsampled), so a
// retention pass that read the block before can never delete raw data
// whose downsample is not published (Thanos #3716, #5664).
func (st *Store) ExpireDownsampled(ctx context.Context, b Block, retireAt, now time.Time) (int64, error) {
	return st.toRetiring(ctx, "expire "+b.Key()+" (downsampled)", protocol.ExpireDownsampled, b, expect{}, retireAt, now)
}

// KeepSource returns a downsample version's source to LIVE once the
// version's output is published (CLAIMED by ref → LIVE at gen) and
// records the resolution it was downsampled to. It returns the new gen.
func (st *Store) KeepSource(ctx context.Context, ref string, b Block, res int64, now time.Time) (int64, error) {
	return b.Gen + 1, st.writeBlock(ctx, "keep "+b.Key()+" downsampled by "+ref, protocol.KeepSource, b, expect{by: ref}, now,
		"downsampled = :res, updatedAt = :now", "claimedBy", map[string]types.AttributeValue{":res": n(res), ":now": n(now.UnixMilli())})
}

// NoteDownsampled records that blocks of resolution res (holders, LIVE
// and published at the gens read) already hold every source of block b
// (LIVE, unclaimed, at its gen): b needs no downsample of its own, and
// retention may delete it. One transaction, so at most 99 holders.
func (st *Store) NoteDownsampled(ctx context.Context, b Block, res int64, holders []Block, now time.Time) error {
	if len(holders)+1 > maxTransactItems {
		return fmt.Errorf("note %s downsampled: %d holders are more than one transaction holds", b.Key(), len(holders))
	}
	bg, it, err := blockWrite(protocol.NoteDownsampled, b, expect{}, now, "downsampled = :res, updatedAt = :now", "",
		map[string]types.AttributeValue{":res": n(res), ":now": n(now.UnixMilli())})
	if err != nil {
		return err
	}
	var x tx
	x.add(bg, it)
	for _, h := range holders {
		hg, err := guard(protocol.HolderCheck, subject{tenant: h.Tenant, block: h.ID}, expect{gen: h.Gen, now: now.UnixMilli()})
		if err != nil {
			return err
		}
		x.add(hg, hg.check(key(tenantPK(h.Tenant), blockSK(h.ID))))
	}
	return st.commit(ctx, "note "+b.Key()+" downsampled", x)
}

// PutStream writes a stream's record (a downsample's target stream, which
// no upload registered): the same stream always has the same record, so
// an unconditional put is idempotent.
func (st *Store) PutStream(ctx context.Context, tenant string, sr StreamRecord) error {
	sr.Tenant = tenant
	it, err := marshalItem(&sr, tenantPK(tenant), streamSK(sr.ID))
	if err != nil {
		return err
	}
	return st.retry(ctx, "put stream "+sr.ID, func() error {
		_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.table), Item: it})
		return err
	})
}

// BlocksView reads what the cleaner's retention and metrics passes need
// of every block of a tenant — state, gen, range, level, stream, claim,
// publication, marks, arrival, its meta.json's version — and nothing else
// (no meta.json, no file list), so a pass over a big tenant reads little.
func (st *Store) BlocksView(ctx context.Context, tenant string) ([]Block, error) {
	names := map[string]string{}
	var projection []string
	for i, a := range []string{"tenant", "id", "state", "gen", "minT", "maxT", "stream", "level", "claimedBy", "published", "noCompact", "arrived", "metaVid", "downsampled"} {
		n := fmt.Sprintf("#a%d", i)
		names[n] = a
		projection = append(projection, n)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(st.table),
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk AND begins_with(SK, :p)"),
		ProjectionExpression:      aws.String(strings.Join(projection, ", ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(tenantPK(tenant)), ":p": s("B#")},
	}
	var out []Block
	for {
		var res *dynamodb.QueryOutput
		err := st.retry(ctx, "retention view of "+tenant, func() error {
			var err error
			res, err = st.db.Query(ctx, in)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("retention view of %s: %w", tenant, err)
		}
		for _, it := range res.Items {
			var b Block
			if err := attributevalue.UnmarshalMap(it, &b); err != nil {
				return nil, fmt.Errorf("decode block of %s: %w", tenant, err)
			}
			out = append(out, b)
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// StartDelete moves a RETIRING block whose deletion mark is recorded to
// DELETED (expecting the gen read), takes it out of its ranges, and returns
// the gen the DELETE op carries. The condition on the mark's version means
// a MARK op can never lose its record to the deletion, so every mark
// written is named by the record its DELETE op reads. The agenda entry
// stays until the DELETE op is sent (the caller removes it).
func (st *Store) StartDelete(ctx context.Context, b Block, ranges []planning.GroupKey, now time.Time) (int64, error) {
	x, err := startDeleteTx(b, ranges, now)
	if err != nil {
		return 0, err
	}
	return b.Gen + 1, st.commit(ctx, "delete "+b.Key(), x)
}

// DeletionStart is one block StartDeleteAll moves to DELETED, and the
// ranges it leaves.
type DeletionStart struct {
	Block  Block
	Ranges []planning.GroupKey
}

// StartDeleteAll starts the deletion of several blocks, each as
// StartDelete does, in as few requests as DynamoDB's limits allow
// (commitTogether). It returns, per block, the gen its DELETE op carries
// and the write's error (a *ConditionLostError for a block a rival moved).
func (st *Store) StartDeleteAll(ctx context.Context, ds []DeletionStart, now time.Time) ([]int64, []error) {
	bs := make([]Block, len(ds))
	for i, d := range ds {
		bs[i] = d.Block
	}
	return st.blocksTogether(ctx, bs, func(i int) (named, error) {
		x, err := startDeleteTx(ds[i].Block, ds[i].Ranges, now)
		return named{op: "delete " + ds[i].Block.Key(), x: x}, err
	})
}

// startDeleteTx is the transaction StartDelete commits.
func startDeleteTx(b Block, ranges []planning.GroupKey, now time.Time) (tx, error) {
	g, it, err := blockWrite(protocol.StartDelete, b, expect{}, now, "updatedAt = :now", "",
		map[string]types.AttributeValue{":now": n(now.UnixMilli())})
	if err != nil {
		return tx{}, err
	}
	var x tx
	x.add(g, it)
	for _, r := range ranges {
		x.plain(types.TransactWriteItem{Delete: &types.Delete{Key: key(tenantPK(b.Tenant), memberSK(r, b.ID))}})
	}
	return x, nil
}
