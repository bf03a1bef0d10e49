package testworld

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// The Monitor's checks, by name: what Checks counts and a violation
// starts with.
const (
	CheckTypedWrite           = "I5 every write names its transition"
	CheckTransition           = "I5 transition from an allowed state"
	CheckRequires             = "I5 transition's requirements held"
	CheckEffect               = "I5 write did what its transition says"
	CheckFenced               = "I5 transaction holds its fences"
	CheckCommitFenced         = "I5 commit fenced"
	CheckCommitByHolder       = "I5 commit by lease holder"
	CheckLeaseFenced          = "I5 lease fenced"
	CheckLeaseExclusive       = "I5 lease exclusive"
	CheckCompletionAfterParts = "I5 completion after every partition"
	CheckOneUnfinished        = "I5 one unfinished version"
	CheckBlockCreatedOnce     = "I5 block created once"
	CheckOpDecidesAtGen       = "I5 block op decides at current gen"
	CheckOpEffectAtGen        = "I5 block op takes effect at current gen"
	CheckDeleteNamesVersion   = "I4 delete names a VersionId"
	CheckDeleteSparesNeeded   = "I1 delete spares needed versions"
	CheckPublishedFilesExist  = "I3 published meta.json lists existing files"
)

// MonitorChecks lists every check the Monitor makes. A run that exercises
// the whole protocol (the chaos run) must have made each at least once:
// a check that never runs cannot fail.
func MonitorChecks() []string {
	return []string{
		CheckTypedWrite,
		CheckTransition,
		CheckRequires,
		CheckEffect,
		CheckFenced,
		CheckCommitFenced,
		CheckCommitByHolder,
		CheckLeaseFenced,
		CheckLeaseExclusive,
		CheckCompletionAfterParts,
		CheckOneUnfinished,
		CheckBlockCreatedOnce,
		CheckOpDecidesAtGen,
		CheckOpEffectAtGen,
		CheckDeleteNamesVersion,
		CheckDeleteSparesNeeded,
		CheckPublishedFilesExist,
	}
}

// Monitor checks, at the moment each thing happens, what docs/design.md §5 says
// must hold then — judging what each write did, not the conditions the
// code wrote:
//
//   - I5 fencing of records: every write to a block, a group head or a
//     partition names the protocol transition it makes (shared/records
//     tags it with a protocol.Change); an accepted write left a state its
//     transition may leave, every requirement of the transition held on the
//     item as it was just before (the gen read, the lease holder, the
//     claimer…), the item is afterwards as the transition leaves it, and
//     its transaction holds the transition's fences. Besides the table, the
//     design's own rules in their own words: a commit lands only on the
//     current, PLANNED version and only for the lease holder; a lease only
//     on the current PLANNED version and a PENDING or expired partition; a
//     completion only when every partition is DONE; a version only after
//     the previous one is final; a block record is created once.
//   - I5 fencing of block ops: an uploader op acts only while the block is
//     still at the op's gen and in the op's state (the op travels in the
//     context, see WithOp).
//   - I1/I3 online: no delete removes an object version that a block which
//     still needs it names; every meta.json published lists files that exist
//     with their sizes.
//   - I4 online: every delete names a VersionId (no delete markers).
//
// To judge a write against the states it leaves and enters, the Monitor
// serialises the pipeline's DynamoDB writes: it reads the items a write
// touches, sends the write, reads them again if it was accepted, and
// judges. The emulator serialises DynamoDB requests anyway, so this costs
// little.
type Monitor struct {
	table  string
	bucket string
	layout blockkey.Layout
	raw    records.DynamoDB
	rawS3  pipeline.S3

	writes sync.Mutex // held across pre-read, write and judgement

	mu         sync.Mutex
	violations []string
	checks     map[string]int
	commits    []CommitAttempt
	final      map[string]records.Block // blocks read DELETED or DISCARDED: final states
}

// CommitAttempt is one commit transaction the Monitor saw.
type CommitAttempt struct {
	Ref      string // <tenant>/<group>@v<v>/p<p>
	Owner    string
	Accepted bool
}

// NewMonitor watches w's table and bucket. Install it (or wrap clients with
// DynamoDB and S3 yourself) before the pipeline runs.
func NewMonitor(w *World) *Monitor {
	return &Monitor{
		table: w.Config.Table, bucket: w.Config.Bucket, layout: w.Config.Layout,
		raw: w.Env.Clients.DynamoDB, rawS3: w.Env.Clients.S3, checks: map[string]int{},
		final: map[string]records.Block{},
	}
}

// Install puts the Monitor between w's pipeline and AWS: a records.Store
// over the watched DynamoDB, the watched S3 client, and its hook after the
// pipeline's own.
func (m *Monitor) Install(w *World) {
	d := w.Pipeline.Deps
	d.Store = records.NewStore(m.DynamoDB(awslimits.DynamoDB{DynamoDBAPI: m.raw, Refused: w.Pipeline.Refused}), m.table, d.Logger)
	d.S3 = m.S3(d.S3)
	d.Hook = ChainHooks(d.Hook, m.Hook)
}

// ChainHooks calls each non-nil hook in order; the first error wins.
func ChainHooks(hooks ...pipeline.Hook) pipeline.Hook {
	return func(ctx context.Context, step pipeline.Step, subject string) error {
		for _, h := range hooks {
			if h == nil {
				continue
			}
			if err := h(ctx, step, subject); err != nil {
				return err
			}
		}
		return nil
	}
}

// Violations lists what the Monitor caught, in order.
func (m *Monitor) Violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.violations...)
}

// Err joins the violations, nil when there are none.
func (m *Monitor) Err() error {
	v := m.Violations()
	if len(v) == 0 {
		return nil
	}
	return fmt.Errorf("%d violations caught online:\n  %s", len(v), strings.Join(v, "\n  "))
}

// Checks counts the checks made, by name.
func (m *Monitor) Checks() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.checks))
	for k, v := range m.checks {
		out[k] = v
	}
	return out
}

// Forget drops what the Monitor remembers of blocks it read in a final
// state: the explorer calls it when it puts the world back to an earlier
// state, where those blocks may not be final yet.
func (m *Monitor) Forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.final = map[string]records.Block{}
	m.commits = nil
}

// Commits lists every commit transaction seen, accepted or not.
func (m *Monitor) Commits() []CommitAttempt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]CommitAttempt(nil), m.commits...)
}

func (m *Monitor) check(name string, ok bool, format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks[name]++
	if !ok {
		m.violations = append(m.violations, name+": "+fmt.Sprintf(format, args...))
	}
}

// --- block ops in the context ---

type opKey struct{}

// opTrace is one execution of a block op: the op, and the block record as
// the uploader read it (through the watched DynamoDB client).
type opTrace struct {
	op   messages.BlockOp
	mu   sync.Mutex
	read *records.Block
}

// WithOp tells the Monitor (and fault injectors) which block op the
// uploader executes under ctx. Call it once per execution: a duplicate
// delivery of the same op is another execution.
func WithOp(ctx context.Context, op messages.BlockOp) context.Context {
	return context.WithValue(ctx, opKey{}, &opTrace{op: op})
}

// OpFrom is the op WithOp stored, if any.
func OpFrom(ctx context.Context) (messages.BlockOp, bool) {
	t, ok := ctx.Value(opKey{}).(*opTrace)
	if !ok {
		return messages.BlockOp{}, false
	}
	return t.op, true
}

func traceFrom(ctx context.Context) *opTrace {
	t, _ := ctx.Value(opKey{}).(*opTrace)
	return t
}

// Hook checks I5 for block ops at the uploader's steps, where an op has
// decided to act: the record the uploader read for that decision must be
// one the op acts on (protocol.OpActs: at the op's gen, in its states, or
// for UNMARK_NO_COMPACT at a later gen too). (Comparing with the record as it
// is at the step would blame an op whose block moved on after its check; a
// write it then makes is judged by the effect checks below.)
func (m *Monitor) Hook(ctx context.Context, step pipeline.Step, subject string) error {
	if !strings.HasPrefix(string(step), "uploader.before-") {
		return nil
	}
	t := traceFrom(ctx)
	if t == nil {
		return nil
	}
	if _, judged := protocol.OpActs(t.op.Op, t.op.Gen, "", 0); !judged {
		return nil
	}
	t.mu.Lock()
	read := t.read
	t.mu.Unlock()
	if read == nil {
		return nil // not read through this Monitor
	}
	acts, _ := protocol.OpActs(t.op.Op, t.op.Gen, read.State, read.Gen)
	m.check(CheckOpDecidesAtGen, acts,
		"%s op of %s/%s at gen %d proceeds (%s) on a record read %s at gen %d", t.op.Op, t.op.Tenant, t.op.Block, t.op.Gen, step, read.State, read.Gen)
	return nil
}

// opEffect runs an S3 write or delete of a block op while no DynamoDB
// write can land (the Monitor's write lock), and judges it: if it took
// effect, the block must be one the op acts on right then.
func (m *Monitor) opEffect(ctx context.Context, op messages.BlockOp, what string, call func() error) error {
	if _, judged := protocol.OpActs(op.Op, op.Gen, "", 0); !judged {
		return call() // DELETE_STRAY names versions no record names; judged per delete
	}
	m.writes.Lock()
	defer m.writes.Unlock()
	b, found, rerr := m.block(ctx, op.Tenant, op.Block)
	err := call()
	if err != nil || rerr != nil {
		return err // no effect (a PUT that lost to If-None-Match adopts, it writes nothing)
	}
	acts, _ := protocol.OpActs(op.Op, op.Gen, b.State, b.Gen)
	m.check(CheckOpEffectAtGen, found && acts,
		"%s op of %s/%s at gen %d: %s took effect while the block is %s at gen %d", op.Op, op.Tenant, op.Block, op.Gen, what, b.State, b.Gen)
	return nil
}

// --- DynamoDB ---

// DynamoDB wraps db (the client the pipeline's records.Store uses).
func (m *Monitor) DynamoDB(db records.DynamoDB) records.DynamoDB { return &watchedDB{m: m, db: db} }

type watchedDB struct {
	m  *Monitor
	db records.DynamoDB
}

func (w *watchedDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := w.db.GetItem(ctx, in, o...)
	if t := traceFrom(ctx); t != nil && err == nil {
		if r := refOf(in.Key); r.kind == kindBlock && r.tenant == t.op.Tenant && r.blockID == t.op.Block {
			b, _ := unmarshal[records.Block](out.Item)
			t.mu.Lock()
			t.read = &b
			t.mu.Unlock()
		}
	}
	return out, err
}

func (w *watchedDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return w.db.Query(ctx, in, o...)
}

func (w *watchedDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return w.db.BatchGetItem(ctx, in, o...)
}

// BatchWriteItem carries no protocol transition (it cannot hold a
// condition): a protocol item in it is a write that names none.
func (w *watchedDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	w.m.writes.Lock()
	defer w.m.writes.Unlock()
	for _, reqs := range in.RequestItems {
		for _, r := range reqs {
			key := map[string]types.AttributeValue(nil)
			if r.DeleteRequest != nil {
				key = r.DeleteRequest.Key
			} else if r.PutRequest != nil {
				key = r.PutRequest.Item
			}
			ref := refOf(key)
			w.m.check(CheckTypedWrite, !ref.protocolItem(), "a batch write of %s/%s: no transition can be made unconditionally", ref.pk, ref.sk)
		}
	}
	return w.db.BatchWriteItem(ctx, in, o...)
}

func (w *watchedDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	w.m.writes.Lock()
	defer w.m.writes.Unlock()
	return w.db.DeleteItem(ctx, in, o...)
}

func (w *watchedDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	item := types.TransactWriteItem{Put: &types.Put{Item: in.Item, ConditionExpression: in.ConditionExpression,
		ExpressionAttributeNames: in.ExpressionAttributeNames, ExpressionAttributeValues: in.ExpressionAttributeValues}}
	var out *dynamodb.PutItemOutput
	err := w.m.judged(ctx, []types.TransactWriteItem{item}, func() error {
		var err error
		out, err = w.db.PutItem(ctx, in, o...)
		return err
	})
	return out, err
}

func (w *watchedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	item := types.TransactWriteItem{Update: &types.Update{Key: in.Key, UpdateExpression: in.UpdateExpression,
		ConditionExpression: in.ConditionExpression, ExpressionAttributeNames: in.ExpressionAttributeNames,
		ExpressionAttributeValues: in.ExpressionAttributeValues}}
	var out *dynamodb.UpdateItemOutput
	err := w.m.judged(ctx, []types.TransactWriteItem{item}, func() error {
		var err error
		out, err = w.db.UpdateItem(ctx, in, o...)
		return err
	})
	return out, err
}

func (w *watchedDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var out *dynamodb.TransactWriteItemsOutput
	err := w.m.judged(ctx, in.TransactItems, func() error {
		var err error
		out, err = w.db.TransactWriteItems(ctx, in, o...)
		return err
	})
	return out, err
}

// itemKind classifies a key by its sort key (shared/records' key scheme).
type itemKind int

const (
	kindOther itemKind = iota
	kindBlock
	kindHead
	kindPartition
)

type itemRef struct {
	kind     itemKind
	pk, sk   string
	tenant   string
	headSK   string // for partitions: their group head
	version  int64  // for partitions
	index    int    // for partitions
	blockID  string // for blocks
	groupKey string // planning.GroupKey.String()
}

// refOf reads an item's identity through records.ParseItemKey, the
// store's own key format: a change of the format cannot silently make the
// Monitor stop recognising items.
func refOf(key map[string]types.AttributeValue) itemRef {
	pk, _ := key["PK"].(*types.AttributeValueMemberS)
	sk, _ := key["SK"].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return itemRef{}
	}
	k := records.ParseItemKey(pk.Value, sk.Value)
	r := itemRef{pk: pk.Value, sk: sk.Value, tenant: k.Tenant}
	switch k.Kind {
	case records.ItemBlock:
		r.kind, r.blockID = kindBlock, k.Block
	case records.ItemGroupHead:
		r.kind, r.groupKey = kindHead, k.Group.String()
	case records.ItemPartition:
		r.kind, r.groupKey, r.headSK = kindPartition, k.Group.String(), k.HeadSK()
		r.version, r.index = k.Version, k.Partition
	}
	return r
}

// about reports whether change c is about the item r names.
func (r itemRef) about(c protocol.Change) bool {
	if c.Tenant != r.tenant {
		return false
	}
	switch r.kind {
	case kindBlock:
		return c.Item == protocol.ItemBlock && c.Block == r.blockID
	case kindHead:
		return c.Item == protocol.ItemVersion && c.Group == r.groupKey
	case kindPartition:
		return c.Item == protocol.ItemPartition && c.Group == r.groupKey && c.Version == r.version && c.Partition == r.index
	}
	return false
}

func writeKey(it types.TransactWriteItem) map[string]types.AttributeValue {
	switch {
	case it.Put != nil:
		return it.Put.Item
	case it.Update != nil:
		return it.Update.Key
	case it.Delete != nil:
		return it.Delete.Key
	case it.ConditionCheck != nil:
		return it.ConditionCheck.Key
	}
	return nil
}

// preimage is what the items a write touches held just before it.
type preimage struct {
	items map[string]map[string]types.AttributeValue // pk/sk → item (nil: absent)
	parts map[string][]records.Partition             // pk/headSK → the head's version's partitions
}

func newImage() preimage {
	return preimage{items: map[string]map[string]types.AttributeValue{}, parts: map[string][]records.Partition{}}
}

// judgedItem is one item of a write, with the change the store says it
// makes (nil when it names none).
type judgedItem struct {
	ref    itemRef
	write  types.TransactWriteItem
	change *protocol.Change
}

// protocolItem reports whether the protocol's table governs items of r's
// kind: every write to them must name its transition.
func (r itemRef) protocolItem() bool { return r.kind != kindOther }

func (m *Monitor) judged(ctx context.Context, items []types.TransactWriteItem, write func() error) error {
	m.writes.Lock()
	defer m.writes.Unlock()
	changes := protocol.ChangesFrom(ctx)
	var tx []judgedItem
	var keys [][2]string
	for _, it := range items {
		r := refOf(writeKey(it))
		if !r.protocolItem() || it.Delete != nil {
			continue
		}
		ji := judgedItem{ref: r, write: it}
		for i := range changes {
			if r.about(changes[i]) {
				ji.change = &changes[i]
				break
			}
		}
		tx = append(tx, ji)
		keys = append(keys, [2]string{r.pk, r.sk})
		if r.kind == kindPartition {
			keys = append(keys, [2]string{r.pk, r.headSK})
		}
	}
	pre := newImage()
	if err := m.loadAll(ctx, &pre, keys); err != nil {
		return write() // cannot judge: let the write through unjudged
	}
	for _, ji := range tx {
		if ji.change != nil && ji.change.Transition == protocol.Complete {
			if err := m.loadParts(ctx, &pre, ji.ref); err != nil {
				return write()
			}
		}
	}
	err := write()
	post := newImage()
	if err == nil {
		if perr := m.loadAll(ctx, &post, keys); perr != nil {
			post.items = nil // the effect cannot be judged
		}
	}
	m.judgeTransaction(tx, pre, post, err)
	return err
}

// judgeTransaction judges every item of one write: the protocol's rules
// for the transition each names, then the design's own checks. post is
// nil-itemed when the write failed or could not be read back.
func (m *Monitor) judgeTransaction(tx []judgedItem, pre, post preimage, err error) {
	names := map[protocol.Name][]protocol.Change{}
	for _, ji := range tx {
		if ji.change != nil {
			names[ji.change.Transition] = append(names[ji.change.Transition], *ji.change)
		}
	}
	for _, ji := range tx {
		if ji.write.ConditionCheck == nil {
			m.check(CheckTypedWrite, ji.change != nil, "a write of %s/%s names no protocol transition", ji.ref.pk, ji.ref.sk)
		}
		if ji.change == nil {
			continue
		}
		c := *ji.change
		t, lerr := protocol.Lookup(c.Transition)
		if lerr != nil {
			m.check(CheckTypedWrite, false, "a write of %s/%s names %v", ji.ref.pk, ji.ref.sk, lerr)
			continue
		}
		m.judgeDesign(ji, c, pre, err)
		if err != nil || t.Check {
			continue
		}
		m.judgeTransition(ji.ref, t, c, pre, post, names)
	}
}

// state reads an item's state ("" when absent) and gen.
func itemState(item map[string]types.AttributeValue) (state string, gen int64, found bool) {
	if item == nil {
		return "", 0, false
	}
	var v struct {
		State string `dynamodbav:"state"`
		Gen   int64  `dynamodbav:"gen"`
	}
	_ = attributevalue.UnmarshalMap(item, &v)
	return v.State, v.Gen, true
}

// judgeTransition holds an accepted write to its transition's table
// entry: it left a state the transition may leave (the one its writer
// expected), every requirement held on the item as it was, the item is
// now as the transition leaves it, and the transaction holds its fences.
func (m *Monitor) judgeTransition(r itemRef, t protocol.Transition, c protocol.Change, pre, post preimage, names map[protocol.Name][]protocol.Change) {
	k := r.pk + "/" + r.sk
	what := fmt.Sprintf("%s of %s/%s", t.Name, r.pk, r.sk)
	from, gen, found := itemState(pre.items[k])
	m.check(CheckTransition, t.Leaves(from) && from == c.From && found != t.Has(protocol.Absent),
		"%s accepted from %q (the writer expected %q; it leaves %v)", what, from, c.From, t.From)
	var unmet []string
	for _, req := range t.Requires {
		if !m.held(req, r, c, pre, gen) {
			unmet = append(unmet, string(req))
		}
	}
	m.check(CheckRequires, len(unmet) == 0, "%s accepted while not %v", what, unmet)
	for _, w := range t.With {
		fenced := false
		for _, f := range names[w] {
			fenced = fenced || (f.Tenant == c.Tenant && (f.Group == c.Group || c.Item == protocol.ItemBlock) && (f.Version == c.Version || c.Item == protocol.ItemBlock))
		}
		m.check(CheckFenced, fenced, "%s accepted without %s in its transaction", what, w)
	}
	if post.items == nil {
		return
	}
	to, nextGen, exists := itemState(post.items[k])
	ok := exists && to == t.Enters(from)
	if r.kind == kindBlock && found {
		want := gen
		if t.Moves() {
			want = gen + 1
		}
		ok = ok && nextGen == want
		what += fmt.Sprintf(" (gen %d → %d)", gen, nextGen)
	}
	m.check(CheckEffect, ok, "%s left the item %q, the transition enters %q", what, to, t.Enters(from))
}

// held reports whether requirement req of change c held on the item as it
// was before the write.
func (m *Monitor) held(req protocol.Require, r itemRef, c protocol.Change, pre preimage, gen int64) bool {
	item := pre.items[r.pk+"/"+r.sk]
	switch r.kind {
	case kindHead:
		head, found := unmarshal[records.Group](item)
		switch req {
		case protocol.Absent:
			return !found
		case protocol.AtVersion:
			if c.Transition == protocol.CreateNext {
				return found && head.Version+1 == c.Version
			}
			return found && head.Version == c.Version
		}
	case kindPartition:
		part, found := unmarshal[records.Partition](item)
		switch req {
		case protocol.Absent:
			return !found
		case protocol.LeaseHolder:
			return found && part.LeaseOwner == c.Owner
		case protocol.LeaseExpired:
			return found && part.LeaseOwner == c.Prev && part.LeaseUntil < c.Now
		}
	case kindBlock:
		b, found := unmarshal[records.Block](item)
		switch req {
		case protocol.Absent:
			return !found
		case protocol.AtGen:
			return found && gen == c.Gen
		case protocol.ClaimedByWriter:
			return found && b.ClaimedBy == c.By
		case protocol.Unclaimed:
			return found && b.ClaimedBy == ""
		case protocol.Published:
			return found && b.Published
		case protocol.ProducedByWriter:
			return found && b.ProducedBy == c.By
		case protocol.MarkRecorded:
			return found && b.MarkVersionID != ""
		case protocol.NoCompactMarkNamed:
			return found && b.NoCompactMarkVersionID != ""
		case protocol.NoOtherMark:
			return found && (b.MarkVersionID == "" || b.MarkVersionID == c.Vid)
		case protocol.Compactable:
			return found && !b.NoCompact
		case protocol.Downsampled:
			return found && b.Downsampled > 0
		}
	}
	return true // a requirement on values the change does not carry (the attempt limit): DynamoDB's to enforce
}

// judgeDesign makes the design's own checks (docs/design.md §5), which
// say what must hold in words of their own rather than the table's.
func (m *Monitor) judgeDesign(ji judgedItem, c protocol.Change, pre preimage, err error) {
	r := ji.ref
	switch c.Transition {
	case protocol.Commit:
		m.judgeCommit(r, c, pre, err)
	case protocol.Lease, protocol.TakeOver:
		if err == nil {
			m.judgeLease(r, c, pre)
		}
	case protocol.Complete:
		if err == nil {
			m.judgeCompletion(r, c, pre)
		}
	case protocol.CreateFirst, protocol.CreateNext:
		if err == nil {
			prev, found := unmarshal[records.Group](pre.items[r.pk+"/"+r.sk])
			ok := !found || ((prev.State == protocol.GroupRetired || prev.State == protocol.GroupSuperseded) && c.Version == prev.Version+1)
			m.check(CheckOneUnfinished, ok, "%s/%s@v%d created while v%d is %s", r.tenant, r.groupKey, c.Version, prev.Version, prev.State)
		}
	case protocol.RegisterBlock, protocol.RegisterRejected, protocol.PutOutput:
		if err == nil {
			_, existed := unmarshal[records.Block](pre.items[r.pk+"/"+r.sk])
			m.check(CheckBlockCreatedOnce, !existed, "block %s/%s was put over an existing record", r.tenant, r.blockID)
		}
	}
}

func (m *Monitor) judgeCommit(r itemRef, c protocol.Change, pre preimage, err error) {
	head, _ := unmarshal[records.Group](pre.items[r.pk+"/"+r.headSK])
	part, found := unmarshal[records.Partition](pre.items[r.pk+"/"+r.sk])
	ref := fmt.Sprintf("%s/%s@v%d/p%d", r.tenant, r.groupKey, r.version, r.index)
	m.mu.Lock()
	m.commits = append(m.commits, CommitAttempt{Ref: ref, Owner: c.Owner, Accepted: err == nil})
	m.mu.Unlock()
	if err != nil {
		return
	}
	current := head.Version == r.version && head.State == protocol.GroupPlanned
	m.check(CheckCommitFenced, current, "commit of %s by %s accepted while the group is at v%d %s", ref, c.Owner, head.Version, head.State)
	m.check(CheckCommitByHolder, found && part.State == protocol.PartitionRunning && part.LeaseOwner == c.Owner,
		"commit of %s by %s accepted while the partition is %s held by %q", ref, c.Owner, part.State, part.LeaseOwner)
}

func (m *Monitor) judgeLease(r itemRef, c protocol.Change, pre preimage) {
	head, _ := unmarshal[records.Group](pre.items[r.pk+"/"+r.headSK])
	part, found := unmarshal[records.Partition](pre.items[r.pk+"/"+r.sk])
	ref := fmt.Sprintf("%s/%s@v%d/p%d", r.tenant, r.groupKey, r.version, r.index)
	current := head.Version == r.version && head.State == protocol.GroupPlanned
	m.check(CheckLeaseFenced, current, "lease of %s by %s accepted while the group is at v%d %s", ref, c.Owner, head.Version, head.State)
	free := found && (part.State == protocol.PartitionPending || (part.State == protocol.PartitionRunning && part.LeaseUntil < c.Now))
	m.check(CheckLeaseExclusive, free, "lease of %s by %s accepted while the partition is %s held by %q until %d (now %d)",
		ref, c.Owner, part.State, part.LeaseOwner, part.LeaseUntil, c.Now)
}

func (m *Monitor) judgeCompletion(r itemRef, c protocol.Change, pre preimage) {
	head, _ := unmarshal[records.Group](pre.items[r.pk+"/"+r.sk])
	ref := fmt.Sprintf("%s/%s@v%d", r.tenant, r.groupKey, head.Version)
	parts := pre.parts[r.pk+"/"+r.sk]
	done := len(parts) == head.Partitions && head.Version == c.Version
	var notDone []string
	for _, p := range parts {
		if p.State != protocol.PartitionDone {
			done = false
			notDone = append(notDone, fmt.Sprintf("p%d %s", p.Index, p.State))
		}
	}
	m.check(CheckCompletionAfterParts, done, "%s completed with %d of %d partition items, not done: %v",
		ref, len(parts), head.Partitions, notDone)
}

// loadAll reads the items (one strongly consistent batch) into pre.
func (m *Monitor) loadAll(ctx context.Context, pre *preimage, keys [][2]string) error {
	var req []map[string]types.AttributeValue
	for _, k := range keys {
		if _, ok := pre.items[k[0]+"/"+k[1]]; ok {
			continue
		}
		pre.items[k[0]+"/"+k[1]] = nil
		req = append(req, map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: k[0]}, "SK": &types.AttributeValueMemberS{Value: k[1]}})
	}
	for len(req) > 0 {
		n := min(len(req), 100)
		in := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{m.table: {Keys: req[:n], ConsistentRead: aws.Bool(true)}}}
		req = req[n:]
		for len(in.RequestItems) > 0 {
			res, err := m.raw.BatchGetItem(ctx, in)
			if err != nil {
				return err
			}
			for _, it := range res.Responses[m.table] {
				pk, _ := it["PK"].(*types.AttributeValueMemberS)
				sk, _ := it["SK"].(*types.AttributeValueMemberS)
				if pk != nil && sk != nil {
					pre.items[pk.Value+"/"+sk.Value] = it
				}
			}
			in.RequestItems = res.UnprocessedKeys
		}
	}
	return nil
}

func (m *Monitor) load(ctx context.Context, pre *preimage, pk, sk string) error {
	if _, ok := pre.items[pk+"/"+sk]; ok {
		return nil
	}
	res, err := m.raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(m.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: pk}, "SK": &types.AttributeValueMemberS{Value: sk}}})
	if err != nil {
		return err
	}
	if len(res.Item) == 0 {
		pre.items[pk+"/"+sk] = nil
	} else {
		pre.items[pk+"/"+sk] = res.Item
	}
	return nil
}

func (m *Monitor) loadParts(ctx context.Context, pre *preimage, head itemRef) error {
	if err := m.load(ctx, pre, head.pk, head.sk); err != nil {
		return err
	}
	var g records.Group
	if it := pre.items[head.pk+"/"+head.sk]; it != nil {
		_ = attributevalue.UnmarshalMap(it, &g)
	}
	prefix := fmt.Sprintf("%s#V#%d#P#", head.sk, g.Version)
	var parts []records.Partition
	in := &dynamodb.QueryInput{TableName: aws.String(m.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String("PK = :pk AND begins_with(SK, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: head.pk}, ":p": &types.AttributeValueMemberS{Value: prefix}}}
	for {
		res, err := m.raw.Query(ctx, in)
		if err != nil {
			return err
		}
		for _, it := range res.Items {
			var p records.Partition
			if err := attributevalue.UnmarshalMap(it, &p); err == nil {
				parts = append(parts, p)
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Index < parts[j].Index })
	pre.parts[head.pk+"/"+head.sk] = parts
	return nil
}

func unmarshal[T any](item map[string]types.AttributeValue) (T, bool) {
	var v T
	if item == nil {
		return v, false
	}
	return v, attributevalue.UnmarshalMap(item, &v) == nil
}

// block reads a block record; one read DELETED or DISCARDED is
// remembered, those states being final.
func (m *Monitor) block(ctx context.Context, tenant, id string) (records.Block, bool, error) {
	m.mu.Lock()
	b, ok := m.final[tenant+"/"+id]
	m.mu.Unlock()
	if ok {
		return b, true, nil
	}
	b, ok, err := m.readBlock(ctx, tenant, id)
	if err == nil && ok && (b.State == protocol.BlockDeleted || b.State == protocol.BlockDiscarded) {
		m.mu.Lock()
		m.final[tenant+"/"+id] = b
		m.mu.Unlock()
	}
	return b, ok, err
}

func (m *Monitor) readBlock(ctx context.Context, tenant, id string) (records.Block, bool, error) {
	res, err := m.raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(m.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "T#" + tenant}, "SK": &types.AttributeValueMemberS{Value: "B#" + id}}})
	if err != nil {
		return records.Block{}, false, err
	}
	b, ok := unmarshal[records.Block](res.Item)
	return b, ok, nil
}

// --- S3 ---

// S3 wraps c (the client the pipeline uses).
func (m *Monitor) S3(c pipeline.S3) pipeline.S3 { return &watchedS3{S3: c, m: m} }

type watchedS3 struct {
	pipeline.S3
	m *Monitor
}

// DeleteObjects is judged as its deletes one by one would be.
func (w *watchedS3) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, o ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error) {
	var keys []string
	if in.Delete != nil {
		for _, id := range in.Delete.Objects {
			w.m.beforeDelete(ctx, aws.ToString(id.Key), aws.ToString(id.VersionId))
			keys = append(keys, aws.ToString(id.Key))
		}
	}
	var out *s3.DeleteObjectsOutput
	call := func() (err error) { out, err = w.S3.DeleteObjects(ctx, in, o...); return err }
	if op, ok := OpFrom(ctx); ok && op.Op == messages.OpDelete {
		return out, w.m.opEffect(ctx, op, "delete "+strings.Join(keys, ", "), call)
	}
	return out, call()
}

func (w *watchedS3) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	key := aws.ToString(in.Key)
	var out *s3.PutObjectOutput
	call := func() (err error) { out, err = w.S3.PutObject(ctx, in, o...); return err }
	if strings.HasSuffix(key, "/"+blockkey.MetaFile) && in.Body != nil {
		if rs, ok := in.Body.(interface {
			Read([]byte) (int, error)
			Seek(int64, int) (int64, error)
		}); ok {
			var sb strings.Builder
			buf := make([]byte, 32<<10)
			for {
				n, err := rs.Read(buf)
				sb.Write(buf[:n])
				if err != nil {
					break
				}
			}
			_, _ = rs.Seek(0, 0)
			w.m.checkPublished(ctx, key, []byte(sb.String()))
		}
	}
	if op, ok := OpFrom(ctx); ok && (strings.HasSuffix(key, "/"+blockkey.MetaFile) || strings.HasSuffix(key, "/"+blockkey.DeletionMarkFile)) {
		return out, w.m.opEffect(ctx, op, "put "+key, call)
	}
	return out, call()
}

func (m *Monitor) beforeDelete(ctx context.Context, key, vid string) {
	m.check(CheckDeleteNamesVersion, vid != "", "DELETE of %s without a VersionId leaves a delete marker", key)
	k, err := blockkey.Parse(key, m.layout)
	if err != nil || vid == "" {
		return
	}
	b, found, err := m.block(ctx, k.Tenant, k.Block.String())
	if err != nil {
		return
	}
	needed := found && b.Names(k.File, vid) && b.State != protocol.BlockDeleted && b.State != protocol.BlockDiscarded &&
		!releasedMark(b, k.File)
	m.check(CheckDeleteSparesNeeded, !needed, "DELETE of %s version %s, which the %s block's record names", key, vid, b.State)
}

// releasedMark tells whether file of block b is the no-compact mark Sluice
// wrote when it quarantined b, which b has left since: the release's
// UNMARK_NO_COMPACT deletes the mark, then forgets it, in a LIVE or
// CLAIMED block (protocol.OpActs). A QUARANTINED block still needs it.
func releasedMark(b records.Block, file string) bool {
	return file == blockkey.NoCompactMarkFile && b.NoCompactMarkOurs &&
		(b.State == protocol.BlockLive || b.State == protocol.BlockClaimed)
}

func (m *Monitor) checkPublished(ctx context.Context, key string, body []byte) {
	meta, err := blockmeta.Parse(body, key)
	if err != nil {
		m.check(CheckPublishedFilesExist, false, "%s: unparsable meta.json published: %v", key, err)
		return
	}
	prefix := strings.TrimSuffix(key, blockkey.MetaFile)
	var errs []error
	if meta.Thanos != nil {
		for _, f := range meta.Thanos.Files {
			if f.RelPath == blockkey.MetaFile {
				continue
			}
			h, err := m.rawS3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(m.bucket), Key: aws.String(prefix + f.RelPath)})
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s missing: %w", f.RelPath, err))
			case f.SizeBytes != 0 && aws.ToInt64(h.ContentLength) != f.SizeBytes:
				errs = append(errs, fmt.Errorf("%s has %d bytes, meta.json lists %d", f.RelPath, aws.ToInt64(h.ContentLength), f.SizeBytes))
			}
		}
	}
	m.check(CheckPublishedFilesExist, len(errs) == 0, "%s published while: %v", key, errors.Join(errs...))
}
