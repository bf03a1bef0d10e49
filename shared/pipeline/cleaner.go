package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// Cleaner completes group versions, makes outputs live, retires sources,
// supersedes stuck versions and sweeps orphans (docs/design.md §4.3).
type Cleaner struct{ *Deps }

// records is the store as this handler uses it.
func (c Cleaner) records() cleanerRecords { return c.Store }

// cleanerRecords is what the cleaner reads and writes of the records: a
// version's completion, retirement, supersession and quarantine, the
// outputs' activation, the sources' retirement and deletion, and the
// agenda (with the version work's own).
type cleanerRecords interface {
	versionRecords
	Activate(ctx context.Context, b records.Block, empty []int, now time.Time) (int64, error)
	Complete(ctx context.Context, g records.Group, now time.Time) error
	DoneAgendaAll(ctx context.Context, entries []records.AgendaEntry) error
	DueAll(ctx context.Context, now time.Time) ([]records.AgendaEntry, error)
	GetGroup(ctx context.Context, tenant string, g planning.GroupKey) (records.Group, bool, error)
	GetStream(ctx context.Context, tenant, id string) (records.StreamRecord, bool, error)
	KeepSource(ctx context.Context, ref string, b records.Block, res int64, now time.Time) (int64, error)
	PutAgenda(ctx context.Context, k records.AgendaKind, due time.Time, tenant, subject string) error
	QuarantineGroup(ctx context.Context, g records.Group, reason string, now time.Time) error
	QuarantineSource(ctx context.Context, g records.Group, b records.Block, reason string, now time.Time) (int64, error)
	RetireAll(ctx context.Context, ref string, bs []records.Block, retireAt, now time.Time) ([]int64, []error)
	SetGroupState(ctx context.Context, g records.Group, from, to protocol.GroupState, now time.Time) error
	StartDeleteAll(ctx context.Context, ds []records.DeletionStart, now time.Time) ([]int64, []error)
	Supersede(ctx context.Context, g records.Group, from protocol.GroupState, reason string, now time.Time) error
}

// Handle processes a batch from the cleaner-events queue.
func (c Cleaner) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, emit := c.measured(ctx)
	defer emit()
	return eachMessage(ctx, c.Logger, "cleaner", ev, func(ctx context.Context, m events.SQSMessage) error {
		msg, err := messages.Decode(m.Body)
		if err != nil {
			return fmt.Errorf("cleaner: message %s: %w", m.MessageId, err)
		}
		switch v := msg.(type) {
		case messages.CleanerNote:
			g, err := planning.ParseGroupKey(v.Group)
			if err != nil {
				return err
			}
			return c.Advance(ctx, v.Tenant, g, false)
		case messages.Sweep:
			return c.Sweep(ctx)
		}
		return fmt.Errorf("cleaner: unexpected %T on the cleaner-events queue", msg)
	}), nil
}

// HandleInvoke is the Lambda entry point: an SQS batch, or a schedule's
// schedule's event (spec.SweepEvent, RetentionEvent, BucketIndexEvent,
// MetricsEvent) delivered directly.
func (c Cleaner) HandleInvoke(ctx context.Context, raw json.RawMessage) (any, error) {
	ctx, emit := c.measured(ctx)
	defer emit()
	var probe struct {
		Records []json.RawMessage `json:"Records"`
		Sluice  string            `json:"sluice"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("cleaner: undecodable invocation: %w", err)
	}
	switch probe.Sluice {
	case string(messages.KindSweep):
		return nil, c.Sweep(ctx)
	case retentionKind:
		return nil, c.Retention(ctx)
	case bucketIndexKind:
		return nil, c.BucketIndexes(ctx)
	case metricsKind:
		return nil, c.Metrics(ctx)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("cleaner: undecodable SQS event: %w", err)
	}
	return c.Handle(ctx, ev)
}

// Advance takes group g one or more idempotent steps towards a final
// state. sweeping is true when the sweep calls it: only then are stuck
// versions superseded and lost jobs re-sent.
func (c Cleaner) Advance(ctx context.Context, tenant string, g planning.GroupKey, sweeping bool) error {
	head, ok, err := c.records().GetGroup(ctx, tenant, g)
	if err != nil || !ok {
		return err
	}
	log := c.Logger.With(logattr.Version(tenant, g, head.Version), "state", head.State)
	now := c.now()
	switch head.State {
	case protocol.GroupClaiming:
		// Only the planner that created it moves it on; once that
		// planner's invocation is over, nobody will. StuckAfter bounds
		// every unfinished state, this one too: a deployment that sets it
		// below the planner's invocation gets what it asked for (the
		// chaos run, whose 40 s would otherwise wait up to 15 minutes of
		// its clock for a planner it crashed).
		switch {
		case !sweeping:
		case head.ClaimAbandoned(now):
			return c.supersede(ctx, head, protocol.GroupClaiming, "its planner's invocation ended before it was planned")
		case now.UnixMilli()-head.UpdatedAt > c.Config.StuckAfter.Milliseconds():
			return c.supersede(ctx, head, protocol.GroupClaiming, "claiming made no progress")
		}
		return nil
	case protocol.GroupPlanned:
		parts, err := c.records().Partitions(ctx, tenant, g, head.Version)
		if err != nil {
			return err
		}
		if !allDone(parts, head.Partitions) {
			switch {
			case head.LastErrorKind == records.FailureDoesNotFit:
				// Not a failed attempt: the planner doubles the partitions.
				return c.supersede(ctx, head, protocol.GroupPlanned, "a job did not fit its function at this partition count: "+head.LastError)
			case head.Failures >= c.Config.MaxJobAttempts || head.LastErrorKind == records.FailureTooBig:
				return c.quarantine(ctx, head)
			case head.LastErrorKind == records.FailureNotDeterministic:
				// New output ULIDs: the next version writes under new keys.
				return c.supersede(ctx, head, protocol.GroupPlanned, "an attempt found its output keys holding other bytes (not deterministic): "+head.LastError)
			case sweeping:
				return c.redrive(ctx, head, parts)
			}
			return c.retryFailed(ctx, head, parts)
		}
		if err := c.step(ctx, "cleaner.before-complete", head.Ref()); err != nil {
			return err
		}
		if err := c.records().Complete(ctx, head, now); err != nil {
			if records.IsConditionLost(err) {
				log.InfoContext(ctx, "completion lost its condition; someone else moved the group", "lost", err)
				return nil
			}
			return err
		}
		log.InfoContext(ctx, "version complete", "partitions", head.Partitions)
		head.State = protocol.GroupComplete
		return c.finishComplete(ctx, head, parts)
	case protocol.GroupComplete:
		parts, err := c.records().Partitions(ctx, tenant, g, head.Version)
		if err != nil {
			return err
		}
		return c.finishComplete(ctx, head, parts)
	case protocol.GroupSuperseded:
		return c.cleanupSuperseded(ctx, head)
	case protocol.GroupQuarantined:
		return c.cleanupQuarantined(ctx, head)
	case protocol.GroupRetired:
		if !sweeping {
			return nil
		}
		parts, err := c.records().Partitions(ctx, tenant, g, head.Version)
		if err != nil {
			return err
		}
		return c.finishRetired(ctx, head, parts)
	}
	return nil
}

func allDone(parts []records.Partition, n int) bool {
	if len(parts) != n {
		return false
	}
	for _, p := range parts {
		if p.State != protocol.PartitionDone {
			return false
		}
	}
	return true
}

// finishComplete re-drives a COMPLETE version until it is RETIRED: outputs
// PENDING → LIVE with PUBLISH ops; once every output is published, sources
// CLAIMED → RETIRING with MARK ops; then RETIRED and a re-plan of the group
// and of the next level. Each step is idempotent.
func (c Cleaner) finishComplete(ctx context.Context, head records.Group, parts []records.Partition) error {
	log := c.Logger.With(logattr.Version(head.Tenant, head.Key, head.Version))
	now := c.now()
	// The sources are read with the outputs, before these are published,
	// and used only once every output is: each retirement is fenced on
	// what was read, as after any read.
	outs, srcs, err := c.outputsAnd(ctx, head, parts, head.Sources)
	if err != nil {
		return err
	}
	published, err := c.publishOutputs(ctx, outs, emptyPartitions(head, parts, srcs), now, log)
	if err != nil {
		return err
	}
	if published < len(outs) {
		log.InfoContext(ctx, "waiting for outputs to be published", "published", published, "outputs", len(outs))
		return nil
	}
	if err := c.retireSources(ctx, head, srcs, now, log); err != nil {
		return err
	}
	if err := c.records().SetGroupState(ctx, head, protocol.GroupComplete, protocol.GroupRetired, now); err != nil {
		if records.IsConditionLost(err) {
			return nil
		}
		return err
	}
	head.State = protocol.GroupRetired
	log.InfoContext(ctx, "version retired", "outputs", len(outs), "sources", len(srcs))
	if err := c.indexChanged(ctx, head); err != nil {
		return err
	}
	return c.finishRetired(ctx, head, parts)
}

// emptyPartitions are the partitions of its outputs' count that the
// completed version head over srcs leaves with no block because they hold
// no series (Block.EmptyPartitions): its partitions committed empty and,
// for a downsample, those its members record (a block of the target
// resolution names the same sources as its member). A compaction's own
// partitions hold every series of their residue its sources had, so its
// sources' empty partitions need not be carried.
func emptyPartitions(head records.Group, parts []records.Partition, srcs []records.Block) []int {
	empty := map[int]bool{}
	if !head.Key.IsDownsample() {
		for _, p := range parts {
			if p.Empty && head.Partitions > 1 {
				empty[p.Index] = true
			}
		}
		return slices.Sorted(maps.Keys(empty))
	}
	first, err := downsampleJobOf(head, srcs, 0)
	if err != nil {
		return nil // no job ran either: the version cannot have completed
	}
	for _, p := range parts {
		if !p.Empty {
			continue
		}
		if job, err := downsampleJobOf(head, srcs, p.Index); err == nil {
			if count, id := job.output(); count > 1 {
				empty[id] = true
			}
		}
	}
	for _, mb := range downsampleMembers(head, srcs) {
		if n := mb.PartitionCount; n > 1 {
			for _, e := range mb.EmptyPartitions {
				for j := range first.m {
					empty[e+n*j] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(empty))
}

// publishOutputs activates a completed version's PENDING outputs,
// recording the partitions that version leaves empty, and sends their
// PUBLISH ops (again for those LIVE but not yet published), and counts
// those published already.
func (c Cleaner) publishOutputs(ctx context.Context, outs []records.Block, empty []int, now time.Time, log *slog.Logger) (published int, err error) {
	var ops []messages.BlockOp
	for _, b := range outs {
		switch {
		case b.State == protocol.BlockPending:
			if err := c.step(ctx, "cleaner.before-activate", b.Key()); err != nil {
				return 0, err
			}
			gen, err := c.records().Activate(ctx, b, empty, now)
			if err != nil {
				if records.IsConditionLost(err) {
					log.InfoContext(ctx, "output activation lost; re-driven later", "block", b.ID, "lost", err)
					continue
				}
				return 0, err
			}
			ops = append(ops, messages.BlockOp{Op: messages.OpPublish, Tenant: b.Tenant, Block: b.ID, Gen: gen})
		case b.State == protocol.BlockLive && !b.Published:
			ops = append(ops, messages.BlockOp{Op: messages.OpPublish, Tenant: b.Tenant, Block: b.ID, Gen: b.Gen})
		case b.Published:
			published++
		}
	}
	// An activation whose op does not go out (a crash) is re-driven: a
	// LIVE output not yet published gets its op again.
	return published, c.Send.Ops(ctx, ops)
}

// retireSources moves the version's sources to RETIRING and sends their
// MARK ops (again for those retiring with no mark recorded).
func (c Cleaner) retireSources(ctx context.Context, head records.Group, srcs []records.Block, now time.Time, log *slog.Logger) error {
	var (
		ops    []messages.BlockOp
		retire []records.Block
	)
	for _, b := range srcs {
		switch {
		case head.Key.IsDownsample() && b.Stream == head.Key.Stream:
			// Downsampling keeps its block and the sibling partitions
			// downsampled with it.
			if b.State == protocol.BlockClaimed && b.ClaimedBy == head.Ref() {
				if err := c.keepSource(ctx, head, b, now); err != nil {
					return err
				}
			}
		case b.State == protocol.BlockClaimed && b.ClaimedBy == head.Ref():
			if err := c.step(ctx, "cleaner.before-retire", b.Key()); err != nil {
				return err
			}
			retire = append(retire, b)
		case b.State == protocol.BlockRetiring && b.MarkVersionID == "":
			ops = append(ops, messages.BlockOp{Op: messages.OpMark, Tenant: b.Tenant, Block: b.ID, Gen: b.Gen})
		}
	}
	// One request retires them all, unless a rival moved one of them.
	gens, errs := c.records().RetireAll(ctx, head.Ref(), retire, c.markDue(now), now)
	for i, b := range retire {
		gen, err := gens[i], errs[i]
		if err != nil {
			if !records.IsConditionLost(err) {
				return err
			}
			// A rival retired it and may die before its MARK op goes
			// out: look again, and send the MARK while none is recorded.
			log.InfoContext(ctx, "retiring a source lost its condition", "block", b.ID, "lost", err)
			cur, ok, err := c.records().GetBlock(ctx, b.Tenant, b.ID)
			if err != nil {
				return err
			}
			if !ok || cur.State != protocol.BlockRetiring || cur.MarkVersionID != "" {
				continue
			}
			gen = cur.Gen
		}
		ops = append(ops, messages.BlockOp{Op: messages.OpMark, Tenant: b.Tenant, Block: b.ID, Gen: gen})
	}
	// A retirement whose MARK does not go out (a crash) is re-driven: a
	// RETIRING source with no mark recorded gets its op again.
	return c.Send.Ops(ctx, ops)
}

// finishRetired runs the first orphan sweep of a retired version, takes it
// off the active agenda (scheduling the second sweep) and re-plans.
func (c Cleaner) finishRetired(ctx context.Context, head records.Group, parts []records.Partition) error {
	if err := c.orphans(ctx, head, parts); err != nil {
		return err
	}
	// Re-plan before leaving the agenda: once off it, nothing brings the
	// group back if this step dies.
	if err := c.replan(ctx, head); err != nil {
		return err
	}
	if err := c.planDownsamples(ctx, head, parts); err != nil {
		return err
	}
	if err := c.records().FinishVersion(ctx, head, c.now().Add(c.Config.OrphanDelay)); err != nil && !records.IsConditionLost(err) {
		return err
	}
	return nil
}

// supersede abandons a stuck version: CLAIMING|PLANNED → SUPERSEDED, then
// its cleanup. A job of a superseded version fails its commit: fencing,
// not timing, keeps it out.
func (c Cleaner) supersede(ctx context.Context, head records.Group, from protocol.GroupState, why string) error {
	if err := c.step(ctx, "cleaner.before-supersede", head.Ref()); err != nil {
		return err
	}
	if err := c.records().Supersede(ctx, head, from, why, c.now()); err != nil {
		if records.IsConditionLost(err) {
			return nil
		}
		return err
	}
	c.Logger.WarnContext(ctx, "version superseded", logattr.Version(head.Tenant, head.Key, head.Version), "why", why)
	head.State = protocol.GroupSuperseded
	return c.cleanupSuperseded(ctx, head)
}

// retryFailed re-sends at once the jobs of partitions whose last attempt
// failed and released its lease (PENDING with failures): a job's failure
// note need not wait for the sweep's RedriveAfter. The failure count is
// the re-send's nonce, so a duplicate note sends nothing new.
func (c Cleaner) retryFailed(ctx context.Context, head records.Group, parts []records.Partition) error {
	for _, p := range parts {
		if p.State == protocol.PartitionPending && p.Failures > 0 {
			if err := c.sendJobs(ctx, head, []int{p.Index}, int64(p.Failures)); err != nil {
				return err
			}
			if head.Key.IsSplit() {
				return nil // its one job retries every partition
			}
		}
	}
	return nil
}

// quarantine ends a version whose jobs failed MaxJobAttempts times. When
// a failure blamed one of its sources, that source is quarantined
// (QUARANTINED, with a no-compact mark) and the version superseded, so
// the group re-plans without it and its neighbours compact. Otherwise the
// group is quarantined: its sources stay claimed and readable, nothing
// re-plans it until `sluice retry`.
func (c Cleaner) quarantine(ctx context.Context, head records.Group) error {
	log := c.Logger.With(logattr.Version(head.Tenant, head.Key, head.Version))
	if err := c.step(ctx, "cleaner.before-quarantine", head.Ref()); err != nil {
		return err
	}
	now := c.now()
	reason := fmt.Sprintf("%d failed attempts; last (%s): %s", head.Failures, head.LastErrorKind, head.LastError)
	if head.LastErrorBlock != "" && slices.Contains(head.Sources, head.LastErrorBlock) {
		reason = fmt.Sprintf("%d failed attempts blaming source %s; last (%s): %s", head.Failures, head.LastErrorBlock, head.LastErrorKind, head.LastError)
		b, ok, err := c.records().GetBlock(ctx, head.Tenant, head.LastErrorBlock)
		if err != nil {
			return err
		}
		if ok && b.State == protocol.BlockClaimed && b.ClaimedBy == head.Ref() {
			if _, err := c.records().QuarantineSource(ctx, head, b, reason, now); err != nil {
				if records.IsConditionLost(err) {
					log.InfoContext(ctx, "quarantine lost its condition; someone else moved the group", "lost", err)
					return nil
				}
				return err
			}
			log.ErrorContext(ctx, "source block quarantined; the group re-plans without it", "block", b.ID, "reason", reason)
			metrics.From(ctx).Add(metrics.Quarantines, 1, head.Tenant, "block")
			if err := c.step(ctx, "cleaner.after-quarantine-source", b.Key()); err != nil {
				return err // the superseded version's cleanup sends the op
			}
			head.State = protocol.GroupSuperseded
			return c.cleanupSuperseded(ctx, head)
		}
	}
	if err := c.records().QuarantineGroup(ctx, head, reason, now); err != nil {
		if records.IsConditionLost(err) {
			log.InfoContext(ctx, "quarantine lost its condition; someone else moved the group", "lost", err)
			return nil
		}
		return err
	}
	log.ErrorContext(ctx, "group quarantined: its sources stay as they are until 'sluice retry'", "reason", reason)
	metrics.From(ctx).Add(metrics.Quarantines, 1, head.Tenant, "group")
	head.State = protocol.GroupQuarantined
	return c.cleanupQuarantined(ctx, head)
}

// cleanupQuarantined discards a quarantined version's outputs (DELETE
// ops), sweeps orphans under its output keys and takes it off the active
// agenda; its sources stay claimed. Idempotent.
func (c Cleaner) cleanupQuarantined(ctx context.Context, head records.Group) error {
	parts, err := c.records().Partitions(ctx, head.Tenant, head.Key, head.Version)
	if err != nil {
		return err
	}
	if err := c.clearOutputs(ctx, head, parts); err != nil {
		return err
	}
	if err := c.records().FinishVersion(ctx, head, c.now().Add(c.Config.OrphanDelay)); err != nil && !records.IsConditionLost(err) {
		return err
	}
	return nil
}

// redrive re-sends the jobs of partitions that have sat PENDING, or with
// an expired lease, for longer than RedriveAfter, and supersedes a version
// with no progress for StuckAfter.
func (c Cleaner) redrive(ctx context.Context, head records.Group, parts []records.Partition) error {
	now := c.now().UnixMilli()
	last := head.UpdatedAt
	var lost []int
	for _, p := range parts {
		last = max(last, p.UpdatedAt)
		stale := now-p.UpdatedAt > c.Config.RedriveAfter.Milliseconds()
		if (p.State == protocol.PartitionPending && stale) || (p.State == protocol.PartitionRunning && p.LeaseUntil < now) {
			lost = append(lost, p.Index)
		}
	}
	if now-last > c.Config.StuckAfter.Milliseconds() {
		return c.supersede(ctx, head, protocol.GroupPlanned, "no partition made progress")
	}
	if len(lost) == 0 {
		return nil
	}
	return c.sendJobs(ctx, head, lost, now)
}

// Sweep is the scheduled pass: re-drive every unfinished version, delete
// retired blocks whose delay is over, re-plan ranges that closed, and run
// second orphan sweeps that are due.
func (c Cleaner) Sweep(ctx context.Context) error {
	now := c.now()
	c.Logger.InfoContext(ctx, "sweep started")
	var errs []error
	// One Query per agenda shard reads every kind that is due.
	due, err := c.records().DueAll(ctx, now)
	if err != nil {
		return err
	}
	byKind := records.ByKind(due)
	active, deletes, ranges, orphans := byKind[records.AgendaActive], byKind[records.AgendaDelete], byKind[records.AgendaRange], byKind[records.AgendaOrphans]
	// A version younger than RedriveAfter is left to its jobs and notes:
	// nothing the sweep does for one (re-send a lost job, complete or
	// clean up after a lost note, supersede a stuck one) is due before.
	young := 0
	for _, e := range active {
		if now.Before(e.Since.Add(c.Config.RedriveAfter)) {
			young++
			continue
		}
		g, err := planning.ParseGroupKey(e.Subject)
		if err == nil {
			err = c.Advance(ctx, e.Tenant, g, true)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("advance %s/%s: %w", e.Tenant, e.Subject, err))
		}
	}
	errs = append(errs, c.deleteRetired(ctx, deletes)...)
	// The range and orphan entries finished, taken off the agenda together.
	// A range is asked for once however many of its entries are due (each
	// planning that found it waiting left one), the requests sent
	// together; should the send fail, every entry stays for the next sweep.
	var done []records.AgendaEntry
	var plans []messages.PlanRequest
	asked := map[string]bool{}
	for _, e := range ranges {
		if k := e.Tenant + "/" + e.Subject; !asked[k] {
			asked[k] = true
			plans = append(plans, messages.PlanRequest{Tenant: e.Tenant, Group: e.Subject, Why: "range closed"})
		}
	}
	if err := c.Send.Plans(ctx, plans); err != nil {
		errs = append(errs, err)
	} else {
		done = append(done, ranges...)
	}
	for _, e := range orphans {
		if err := c.secondOrphanSweep(ctx, e); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, e)
	}
	if err := c.records().DoneAgendaAll(ctx, done); err != nil {
		errs = append(errs, err)
	}
	c.Logger.InfoContext(ctx, "sweep done", "active", len(active)-young, "young", young, "deletes", len(deletes), "ranges", len(ranges),
		"orphanSweeps", len(orphans), "errors", len(errs))
	if len(errs) > 0 {
		return fmt.Errorf("sweep: %d errors: %w", len(errs), errors.Join(errs...))
	}
	return nil
}

// forEach runs fn for every entry, at most limit at a time, and returns
// the errors.
func forEach(ctx context.Context, entries []records.AgendaEntry, limit int, fn func(context.Context, records.AgendaEntry) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, limit)
	for _, e := range entries {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, e); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// markDue is when the sweep first looks at a block retired at now, its
// MARK op on the way: the deletion delay, or RedriveAfter if that is
// longer. Until the mark is recorded its DEL entry is due then, and the
// sweep re-sends a MARK it finds unrecorded; a MARK merely slower than a
// short delay (the demo's 5 s) was sent again, an op its block's FIFO
// group then carried for nothing. Recording the mark moves the entry to
// the mark's time plus the delay, so the delay itself is unchanged.
func (c Cleaner) markDue(now time.Time) time.Time {
	return now.Add(max(c.Config.DeletionDelay, c.Config.RedriveAfter))
}

// deleteRetired handles the due DEL entries. A RETIRING block is deleted
// only once its deletion mark is recorded and the delay has passed since
// then (a MARK op that was lost is sent again, the entry waits); RETIRING
// → DELETED, then the DELETE op, then the entry goes. A sweep that dies in
// between finds the block DELETED next time and sends its DELETE op again
// (ops are idempotent), so no deleted block keeps its objects. The blocks
// are read together, and the ops sent together, once every transition is
// made.
func (c Cleaner) deleteRetired(ctx context.Context, entries []records.AgendaEntry) []error {
	if len(entries) == 0 {
		return nil
	}
	byTenant := map[string][]string{}
	for _, e := range entries {
		byTenant[e.Tenant] = append(byTenant[e.Tenant], e.Subject)
	}
	blocks := map[string]records.Block{}
	for tenant, ids := range byTenant {
		bs, err := c.records().GetBlocks(ctx, tenant, ids)
		if err != nil {
			return []error{err}
		}
		for _, b := range bs {
			blocks[tenant+"/"+b.ID] = b
		}
	}
	var (
		mu sync.Mutex
		// done are the entries finished once ops go out; settled those
		// finished whatever happens to the ops; starts the blocks whose
		// deletion starts now, and their entries.
		ops           []messages.BlockOp
		done, settled []records.AgendaEntry
		starts        []records.DeletionStart
		startEntries  []records.AgendaEntry
	)
	errs := forEach(ctx, entries, max(c.Config.SweepParallelism, 1), func(ctx context.Context, e records.AgendaEntry) error {
		b, ok := blocks[e.Tenant+"/"+e.Subject]
		d, err := c.deleteOne(ctx, e, b, ok)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case d.start:
			starts = append(starts, records.DeletionStart{Block: b, Ranges: c.Config.Policy.MemberRanges(b.Stream, b.Level, b.MinT, b.MaxT)})
			startEntries = append(startEntries, e)
		case d.op != nil:
			ops = append(ops, *d.op)
			if d.finished {
				done = append(done, e)
			}
		case d.finished:
			settled = append(settled, e)
		}
		return err
	})
	// One request starts every due deletion, unless a rival moved one.
	gens, serrs := c.records().StartDeleteAll(ctx, starts, c.now())
	for i, s := range starts {
		switch err := serrs[i]; {
		case err == nil:
			ops = append(ops, messages.BlockOp{Op: messages.OpDelete, Tenant: s.Block.Tenant, Block: s.Block.ID, Gen: gens[i]})
			done = append(done, startEntries[i])
		case records.IsConditionLost(err):
			// A rival sweep moved it; the next sweep sees where it is.
		default:
			errs = append(errs, err)
		}
	}
	if err := c.Send.Ops(ctx, ops); err != nil {
		// The entries whose ops did not go out stay, and are re-driven.
		errs, done = append(errs, err), nil
	}
	if err := c.records().DoneAgendaAll(ctx, append(settled, done...)); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// deletion is what the sweep does with a due DEL entry: the op to send
// (nil: none), or start the block's deletion first and then send its
// DELETE (start); and whether the entry is done once the op is sent.
type deletion struct {
	op       *messages.BlockOp
	start    bool
	finished bool
}

// deleteOne decides a due DEL entry of block b (ok: its record exists).
func (c Cleaner) deleteOne(ctx context.Context, e records.AgendaEntry, b records.Block, ok bool) (deletion, error) {
	now := c.now()
	switch {
	case !ok || (b.State != protocol.BlockRetiring && b.State != protocol.BlockDeleted):
		return deletion{finished: true}, nil
	case b.State == protocol.BlockRetiring && b.MarkVersionID == "":
		c.Logger.WarnContext(ctx, "retired block has no recorded deletion mark yet; sending its MARK again", logattr.Block(b.Tenant, b.ID), "gen", b.Gen)
		return deletion{op: &messages.BlockOp{Op: messages.OpMark, Tenant: b.Tenant, Block: b.ID, Gen: b.Gen}}, nil
	case b.State == protocol.BlockRetiring && now.UnixMilli() < b.MarkedAt+c.Config.DeletionDelay.Milliseconds():
		due := time.UnixMilli(b.MarkedAt + c.Config.DeletionDelay.Milliseconds())
		if err := c.records().PutAgenda(ctx, records.AgendaDelete, due, b.Tenant, b.ID); err != nil {
			return deletion{}, err
		}
		return deletion{finished: !due.Equal(e.Due)}, nil
	case b.State == protocol.BlockRetiring:
		if err := c.step(ctx, "cleaner.before-delete", b.Key()); err != nil {
			return deletion{}, err
		}
		return deletion{start: true}, nil
	}
	return deletion{op: &messages.BlockOp{Op: messages.OpDelete, Tenant: b.Tenant, Block: b.ID, Gen: b.Gen}, finished: true}, nil
}

// secondOrphanSweep is a retired version's last visit (its ORPH entry e):
// its outputs are cleared once more. The entry is done when it returns
// nil, and the sweep removes it with the others it finished; an entry that
// names no version is done at once.
func (c Cleaner) secondOrphanSweep(ctx context.Context, e records.AgendaEntry) error {
	at := strings.LastIndex(e.Subject, "@v")
	if at < 0 {
		return nil
	}
	var v int64
	if _, err := fmt.Sscan(e.Subject[at+2:], &v); err != nil {
		return nil
	}
	g, err := planning.ParseGroupKey(e.Subject[:at])
	if err != nil {
		return nil
	}
	parts, err := c.records().Partitions(ctx, e.Tenant, g, v)
	if err != nil {
		return err
	}
	version := records.Group{Tenant: e.Tenant, Key: g, Version: v, Partitions: len(parts)}
	// A cleanup that died after discarding an output and before its DELETE
	// op went out is not re-driven once the next version holds the group's
	// active entry; this sweep is the version's last visit, so it clears
	// the outputs as every cleanup does, re-sending those ops (chaos seed
	// 11: the discarded output's files stayed for good).
	return c.clearOutputs(ctx, version, parts)
}
