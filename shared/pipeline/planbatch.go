package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/s3event"
)

// planBatch is the planning one batch of block events asks for. Each
// message registers its blocks (or honours its mark, or releases what
// `sluice retry` names) at once and only names what is to be planned; the
// batch then plans each group once, after every message's own work. A
// batch of blocks into one range — replicas uploading the same two hours,
// a backfill, `sluice adopt`, a version's partition outputs published
// together — plans that range once instead of once per block, and the
// heads of every level above the batch's blocks are read in one
// BatchGetItem per tenant.
//
// No group is planned on fewer blocks than before: it is planned after every
// registration in the batch that asked for it, so its one planning reads
// every block any of the per-message plannings would have read. Planning
// stays what it was (every change fenced on the version it read); the
// batch only asks fewer times. A message is deleted only when the
// planning it asked for succeeded: a group's failure fails every message
// that asked for it. A redelivery asks again wherever the delivery that
// failed may have done its work: an upload's (recognised as registered), a
// plan request's, another tool's deletion mark found honoured already
// (honourMark), a block retry found released already (retry). A group
// retry's need not: its superseded version stays on the agenda until its
// cleanup, re-plan included, is done.
type planBatch struct {
	groups []*batchGroup
	byKey  map[batchGroupKey]*batchGroup
	blocks []batchBlock
	// marked are the records of the blocks whose marks the batch's
	// events name, read together before any message (readMarked).
	marked map[string]records.Block
}

type batchGroupKey struct{ tenant, group string }

// batchGroup is one group the batch plans, with the messages that asked.
type batchGroup struct {
	tenant string
	key    planning.GroupKey
	// head is the group's head when the batch read it to find a block's
	// target (after every registration); nil: planning reads it.
	head *records.Group
	msgs []string
	// upload is the newest arrival (ms) of the level-0 blocks the batch
	// found this group to be the target of, 0 for none.
	upload int64
}

// batchBlock is a block whose group is found at the end of the batch: the
// level above it, or the highest level that compacted its range already.
type batchBlock struct {
	block records.Block
	msg   string
}

func newPlanBatch() *planBatch {
	return &planBatch{byKey: map[batchGroupKey]*batchGroup{}}
}

// planAsks is how one message of a batch asks for planning.
type planAsks struct {
	batch *planBatch
	msg   string
}

func (q *planBatch) asks(msg string) planAsks { return planAsks{batch: q, msg: msg} }

// markedBlock is the record of block id of tenant as the batch read it
// before its first message, when it was RETIRING or DELETED then (ok).
// Those states only ever lead to DELETED, so a decision made on the record
// is the one a fresh read would make; a block in any other state may have
// moved since (an earlier message of the batch may have released it), and
// is read anew. Each record is handed out once.
func (a planAsks) markedBlock(tenant, id string) (b records.Block, ok bool) {
	k := tenant + "/" + id
	b, ok = a.batch.marked[k]
	delete(a.batch.marked, k)
	return b, ok && (b.State == protocol.BlockRetiring || b.State == protocol.BlockDeleted)
}

// group asks for group g of tenant to be planned.
func (a planAsks) group(tenant string, g planning.GroupKey) {
	a.batch.add(tenant, g, a.msg)
}

// targetOf asks for the group block b goes to to be planned.
func (a planAsks) targetOf(b records.Block) {
	a.batch.blocks = append(a.batch.blocks, batchBlock{block: b, msg: a.msg})
}

func (q *planBatch) add(tenant string, g planning.GroupKey, msg string) *batchGroup {
	k := batchGroupKey{tenant, g.String()}
	bg, ok := q.byKey[k]
	if !ok {
		bg = &batchGroup{tenant: tenant, key: g}
		q.byKey[k] = bg
		q.groups = append(q.groups, bg)
	}
	if len(bg.msgs) == 0 || bg.msgs[len(bg.msgs)-1] != msg {
		bg.msgs = append(bg.msgs, msg)
	}
	return bg
}

// Handle processes a batch from the block-events queue: S3 ObjectCreated
// events, the cleaner's plan requests and `sluice retry`'s requests. Each
// message's own work is done first, then the planning the batch asked for
// (planBatch).
func (p Planner) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, emit := p.measured(ctx)
	defer emit()
	q := newPlanBatch()
	q.marked = p.readMarked(ctx, ev)
	resp := eachMessage(ctx, p.Logger, "planner", ev, func(ctx context.Context, m events.SQSMessage) error {
		return p.handleMessage(ctx, m, q.asks(m.MessageId))
	})
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, id := range p.planBatch(ctx, q) {
		if !failed[id] {
			failed[id] = true
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
	}
	return resp, nil
}

// readMarked reads the records of the blocks whose marks the batch's S3
// events name, in one BatchGetItem per tenant. Most are Sluice's own
// deletion marks, written for a batch of retired sources and notified
// together: each would otherwise cost a read of its own to find that
// nothing is to be done (markedBlock hands out only those). A failed read
// is logged and left to handleMark.
func (p Planner) readMarked(ctx context.Context, ev events.SQSEvent) map[string]records.Block {
	byTenant := map[string][]string{}
	var tenants []string
	for _, m := range ev.Records {
		objs, err := s3event.Decode([]byte(m.Body))
		if err != nil {
			continue // a Sluice message, or malformed: its own handling says so
		}
		for _, o := range objs {
			k, err := blockkey.Parse(o.Key, p.Config.Layout)
			if err != nil || (k.File != blockkey.DeletionMarkFile && k.File != blockkey.NoCompactMarkFile) {
				continue
			}
			if _, ok := byTenant[k.Tenant]; !ok {
				tenants = append(tenants, k.Tenant)
			}
			byTenant[k.Tenant] = append(byTenant[k.Tenant], k.Block.String())
		}
	}
	marked := map[string]records.Block{}
	for _, tenant := range tenants {
		if len(byTenant[tenant]) < 2 {
			continue // no cheaper than handleMark's own read
		}
		bs, err := p.records().GetBlocks(ctx, tenant, byTenant[tenant])
		if err != nil {
			p.Logger.WarnContext(ctx, "reading the marked blocks of a batch failed; each mark reads its own", logattr.Tenant(tenant), "blocks", len(byTenant[tenant]), "err", err)
			continue
		}
		for _, b := range bs {
			marked[tenant+"/"+b.ID] = b
		}
	}
	return marked
}

// planBatch finds the groups of the batch's blocks and plans every group
// the batch asked for once: a block's own groups (its split, its
// downsample) first, then the ranges, each kind in the order first asked.
// A range takes any live, unclaimed block in it, so a range planned first
// would take a big block whole where its split was due (a cleaner's
// re-plan of the range in the same batch as the block's upload), or a
// block ahead of its downsample; a split or downsample planned first
// claims the block, and the range waits for it, as when the block's own
// message planned before the range's came. It returns the messages whose
// planning failed.
func (p Planner) planBatch(ctx context.Context, q *planBatch) (failed []string) {
	fail := func(msgs []string, subject slog.Attr, err error) {
		p.Logger.ErrorContext(ctx, "planning failed; SQS will redeliver the messages that asked for it", subject, "messages", msgs, "err", err)
		failed = append(failed, msgs...)
	}
	byTenant := map[string][]batchBlock{}
	var tenants []string
	for _, bb := range q.blocks {
		if _, ok := byTenant[bb.block.Tenant]; !ok {
			tenants = append(tenants, bb.block.Tenant)
		}
		byTenant[bb.block.Tenant] = append(byTenant[bb.block.Tenant], bb)
	}
	for _, tenant := range tenants {
		blocks := byTenant[tenant]
		if err := recovered(func() error { return p.targets(ctx, q, tenant, blocks) }); err != nil {
			msgs := make([]string, 0, len(blocks))
			for _, bb := range blocks {
				msgs = append(msgs, bb.msg)
			}
			fail(msgs, logattr.Tenant(tenant), fmt.Errorf("reading the heads above %d block(s): %w", len(blocks), err))
		}
	}
	ordered := slices.Clone(q.groups)
	slices.SortStableFunc(ordered, func(a, b *batchGroup) int {
		return cmp.Compare(planOrder(a.key), planOrder(b.key))
	})
	for _, bg := range ordered {
		err := recovered(func() error {
			if due, ok := p.uploadWaitDue(ctx, bg); ok {
				p.Logger.InfoContext(ctx, "nothing to plan: an upload in range arrived less than the upload wait ago", logattr.Group(bg.tenant, bg.key), "until", due)
				return p.records().PutAgenda(ctx, records.AgendaRange, due, bg.tenant, bg.key.String())
			}
			return p.planGroup(ctx, bg.tenant, bg.key, bg.head)
		})
		if err != nil {
			fail(bg.msgs, logattr.Group(bg.tenant, bg.key), err)
		}
	}
	return failed
}

// uploadWaitDue reports when range bg may be planned, when the batch knows
// without reading it that it may not be planned now: a level-0 block the
// batch registered into it arrived less than the tenant's upload wait ago,
// and planning.Policy.Plan plans no range holding such a block before its
// wait is over. Its head, members and their records are then read once,
// when the wait is over (the sweep asks for it at due), not also now to
// find that it waits. Nothing is written but the agenda entry; planning
// then decides on what it reads, and may wait on (for coverage, say).
func (p Planner) uploadWaitDue(ctx context.Context, bg *batchGroup) (time.Time, bool) {
	if bg.upload == 0 || bg.key.IsSplit() || bg.key.IsDownsample() {
		return time.Time{}, false
	}
	wait := p.overrides(ctx).Policy(bg.tenant, p.Config.Policy).Defaults().UploadWait
	due := timeMs(bg.upload + wait.Milliseconds())
	return due, wait > 0 && p.now().Before(due)
}

// planOrder ranks a group in a batch's planning: a block's own groups
// before ranges.
func planOrder(g planning.GroupKey) int {
	if g.IsSplit() || g.IsDownsample() {
		return 0
	}
	return 1
}

// targets reads, in one go after every registration of the batch, the
// heads of every level above tenant's blocks and asks for the group each
// block goes to, that head with it (planning starts from it).
func (p Planner) targets(ctx context.Context, q *planBatch, tenant string, blocks []batchBlock) error {
	var cands []planning.GroupKey
	seen := map[planning.GroupKey]bool{}
	for _, bb := range blocks {
		b := bb.block
		for _, g := range p.Config.Policy.TargetCandidates(b.Stream, b.Level, b.MinT, b.MaxT) {
			if !seen[g] {
				seen[g] = true
				cands = append(cands, g)
			}
		}
	}
	heads := map[planning.GroupKey]records.Group{}
	if len(cands) > 0 {
		var err error
		if heads, err = p.groupHeads(ctx, tenant, cands); err != nil {
			return err
		}
	}
	for _, bb := range blocks {
		b := bb.block
		g, ok := p.Config.Policy.Target(b.Stream, b.Level, b.MinT, b.MaxT, func(g planning.GroupKey) bool {
			return heads[g].EverCompleted
		})
		if !ok {
			p.Logger.DebugContext(ctx, "block has no group to go to", logattr.Block(b.Tenant, b.ID), "level", b.Level)
			continue
		}
		bg := q.add(tenant, g, bb.msg)
		if head, ok := heads[g]; ok {
			bg.head = &head
		}
		if b.Level == 0 {
			bg.upload = max(bg.upload, b.Arrived)
		}
	}
	return nil
}

// recovered runs fn, a panic its error: one poison group or tenant fails
// the messages that asked for it, as a message's panic fails that message
// alone in eachMessage, not the whole batch.
func recovered(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return fn()
}
