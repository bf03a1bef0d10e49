package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockcheck"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/s3errors"
	"github.com/sluice-dev/sluice/shared/s3event"
	"github.com/sluice-dev/sluice/shared/stream"
)

// Planner registers uploaded blocks and plans group versions (docs/design.md §4.1).
type Planner struct{ *Deps }

// records is the store as this handler uses it.
func (p Planner) records() plannerRecords { return p.Store }

// plannerRecords is what the planner reads and writes of the records:
// registrations, a range's blocks, a group's head, its versions and claims,
// and what `sluice retry` releases (with the version work's own).
type plannerRecords interface {
	versionRecords
	Claim(ctx context.Context, g records.Group, srcs []records.Block, now time.Time) error
	CreateVersion(ctx context.Context, prev, next records.Group, now, prevOrphansAt time.Time) error
	GetGroup(ctx context.Context, tenant string, g planning.GroupKey) (records.Group, bool, error)
	GetGroups(ctx context.Context, tenant string, gs []planning.GroupKey) (map[planning.GroupKey]records.Group, error)
	GetStream(ctx context.Context, tenant, id string) (records.StreamRecord, bool, error)
	HonourDeletionMark(ctx context.Context, b records.Block, retireAt, now time.Time) (int64, error)
	NoteForeignMark(ctx context.Context, b records.Block, from protocol.BlockState, file, vid string, markedAt, now time.Time) error
	NoteDownsampled(ctx context.Context, b records.Block, res int64, holders []records.Block, now time.Time) error
	PutAgenda(ctx context.Context, k records.AgendaKind, due time.Time, tenant, subject string) error
	PutStream(ctx context.Context, tenant string, sr records.StreamRecord) error
	RangeBlocks(ctx context.Context, tenant string, g planning.GroupKey) ([]records.Block, error)
	RegisterBlock(ctx context.Context, b records.Block, ranges []planning.GroupKey, sr *records.StreamRecord) error
	ReleaseBlock(ctx context.Context, b records.Block, now time.Time) (int64, error)
	ReleaseGroup(ctx context.Context, g records.Group, now time.Time) error
	SetGroupState(ctx context.Context, g records.Group, from, to protocol.GroupState, now time.Time) error
	Supersede(ctx context.Context, g records.Group, from protocol.GroupState, reason string, now time.Time) error
}

// handleMessage does one message's own work and asks for the planning it
// needs.
func (p Planner) handleMessage(ctx context.Context, m events.SQSMessage, ask planAsks) error {
	msg, err := messages.Decode(m.Body)
	if err == nil {
		switch req := msg.(type) {
		case messages.PlanRequest:
			g, err := planning.ParseGroupKey(req.Group)
			if err != nil {
				return err
			}
			ask.group(req.Tenant, g)
			return nil
		case messages.RetryRequest:
			return p.retry(ctx, req, ask)
		}
		return fmt.Errorf("planner: unexpected %T on the block-events queue", msg)
	}
	if !errors.Is(err, messages.ErrNotSluice) {
		return err
	}
	objs, err := s3event.Decode([]byte(m.Body))
	if err != nil {
		return fmt.Errorf("planner: message %s: %w", m.MessageId, err)
	}
	for _, o := range objs {
		if err := p.handleObject(ctx, o, ask); err != nil {
			return fmt.Errorf("planner: %s: %w", o.Key, err)
		}
	}
	return nil
}

func (p Planner) handleObject(ctx context.Context, o s3event.ObjectCreated, ask planAsks) error {
	k, err := blockkey.Parse(o.Key, p.Config.Layout)
	if err != nil {
		if p.Config.Layout.IsGlobalMarker(o.Key) {
			// Sluice writes one beside each of its own marks in a Cortex or
			// Mimir bucket; the block's own mark is the one it reads.
			p.Logger.DebugContext(ctx, "skipping a global marker", "key", o.Key)
			return nil
		}
		p.Logger.WarnContext(ctx, "skipping an object outside the block layout", "key", o.Key, "err", err)
		return nil
	}
	switch k.File {
	case blockkey.MetaFile:
	case blockkey.DeletionMarkFile, blockkey.NoCompactMarkFile:
		return p.handleMark(ctx, k, o.VersionID, ask)
	default:
		p.Logger.DebugContext(ctx, "skipping an object that is neither meta.json nor a mark", "key", o.Key)
		return nil
	}
	log := p.Logger.With(logattr.Block(k.Tenant, k.Block.String()))
	body, vid, err := p.getObject(ctx, o.Key, o.VersionID)
	if err != nil {
		if s3errors.IsNotFound(err) {
			// NoSuchKey, or NoSuchVersion for a late event whose version
			// was deleted since (compacted and retired, or a stray).
			log.WarnContext(ctx, "meta.json (version) is gone; skipping a late event", "key", o.Key, "versionId", o.VersionID)
			return nil
		}
		return err
	}
	var (
		b     records.Block
		known bool
	)
	if mayBeRegistered(body) {
		if b, known, err = p.records().GetBlock(ctx, k.Tenant, k.Block.String()); err != nil {
			return err
		}
	}
	if !known {
		b, err = p.register(ctx, k, body, vid, log)
		if records.IsConditionLost(err) {
			// A rival registered it first, perhaps from other versions:
			// ours are then a re-upload's.
			b, known, err = p.records().GetBlock(ctx, k.Tenant, k.Block.String())
			if err == nil && !known {
				err = fmt.Errorf("register %s: lost to a record that is gone", k.BlockKey())
			}
			if err == nil {
				err = p.recognise(ctx, k, b, vid, log)
			}
		}
		if err != nil {
			return err
		}
	} else if err := p.recognise(ctx, k, b, vid, log); err != nil {
		return err
	}
	if b.State == protocol.BlockRejected || b.State == protocol.BlockRetiring {
		return nil
	}
	return p.planFor(ctx, b, ask)
}

// mayBeRegistered tells, from its meta.json, whether a block may be
// registered already before its event: a compactor's output (Sluice
// registers its own before they are published) or a downsampled block.
// An upload (a sidecar's, a receiver's, a ruler's, promtool's: level 1,
// raw) is almost always new, so the planner registers it without reading
// its record first; the registration's condition (no record of this
// block) catches the rare duplicate event or re-upload, which is then
// read and recognised as before. It only orders two reads: either answer
// is safe.
func mayBeRegistered(body []byte) bool {
	m, err := blockmeta.Parse(body, "")
	if err != nil {
		return false // registered REJECTED, or recognised when it exists
	}
	return m.Compaction.Level > 1 || (m.Thanos != nil && (m.Thanos.Source == compaction.SourceCompactor || m.Thanos.Downsample.Resolution > 0))
}

// recognise handles an event for a block that is already registered: a
// duplicate event, Sluice's own publication, or a re-upload, whose new
// versions are scheduled for deletion and never compacted twice.
func (p Planner) recognise(ctx context.Context, k blockkey.Key, b records.Block, vid string, log *slog.Logger) error {
	switch {
	case vid == b.MetaVersionID:
		log.InfoContext(ctx, "block already registered; duplicate event", "state", b.State, "gen", b.Gen)
		// The registration that sent the older versions' deletion may
		// have died right after putting the record: send it again.
		return p.sendSuperseded(ctx, k, b)
	case b.ProducedBy != "" && (b.State == protocol.BlockLive || b.State == protocol.BlockPending) && !b.Published:
		log.InfoContext(ctx, "event for Sluice's own output being published", "state", b.State, "gen", b.Gen)
		return nil
	case b.State == protocol.BlockQuarantined:
		// An operator fixing a quarantined block: its new versions are
		// kept for `sluice retry`, which reads the block again.
		log.WarnContext(ctx, "re-upload of a quarantined block; kept as it is until 'sluice retry'", "gen", b.Gen)
		return nil
	}
	// A re-upload. One LIST finds its versions and those of any upload
	// before the registered one, whose event may come only now.
	l, err := p.listBlock(ctx, k)
	if err != nil {
		return fmt.Errorf("re-upload of %s: %w", k.BlockKey(), err)
	}
	stray := l.notNamedBy(b)
	log.WarnContext(ctx, "re-upload of a block Sluice already knows; the versions its record does not name will be deleted",
		"state", b.State, "gen", b.Gen, "versions", len(stray))
	return p.sendStray(ctx, k, b, stray)
}

// register reads what the block is made of and puts its record: LIVE, or
// REJECTED with the reason when it cannot be compacted.
func (p Planner) register(ctx context.Context, k blockkey.Key, body []byte, vid string, log *slog.Logger) (records.Block, error) {
	b, st, reason, err := p.readBlock(ctx, k, body, vid)
	if err != nil {
		return b, err
	}
	if reason != "" {
		b.State, b.Reason = protocol.BlockRejected, reason
		if len(b.Meta) > records.InlineMetaBytes {
			b.Meta = "" // never read again; the reason tells what was wrong
		}
		log.ErrorContext(ctx, "block rejected: it will not be compacted", "key", k.Object(blockkey.MetaFile), "reason", reason)
		if err := p.records().RegisterBlock(ctx, b, nil, nil); err != nil {
			return b, err
		}
		metrics.From(ctx).Add(metrics.Rejections, 1, b.Tenant)
		return b, nil
	}
	if b.NoCompact {
		log.InfoContext(ctx, "block carries a no-compact mark; it is never a source")
	}
	ranges := p.Config.Policy.MemberRanges(b.Stream, b.Level, b.MinT, b.MaxT)
	if b.State == protocol.BlockRetiring {
		log.InfoContext(ctx, "block carries a deletion mark; it is never a source and is deleted when the deletion delay from its mark ends",
			"markedAt", time.UnixMilli(b.MarkedAt).UTC(), "deleteAt", time.UnixMilli(b.RetireAt).UTC())
		ranges = nil
	}
	if err := p.step(ctx, "planner.before-register", b.Key()); err != nil {
		return b, err
	}
	sr := &records.StreamRecord{ID: b.Stream, Labels: st.Labels, Resolution: st.Resolution}
	if err := p.records().RegisterBlock(ctx, b, ranges, sr); err != nil {
		return b, err
	}
	log.InfoContext(ctx, "block registered", "state", b.State, "stream", st.String(), "streamID", b.Stream, "minT", b.MinT, "maxT", b.MaxT, "level", b.Level,
		"series", b.Series, "files", len(b.Files), "noCompact", b.NoCompact, "superseded", len(b.Superseded))
	return b, p.sendSuperseded(ctx, k, b)
}

// readBlock reads what the block at k is made of — its meta.json body (at
// version vid), one LIST of its prefix, a few bytes of its files — into a
// LIVE record. reason is non-empty when the block cannot be compacted
// (corrupt meta.json, a file missing, damaged or outside the block); err
// is a failure to read, worth a retry.
func (p Planner) readBlock(ctx context.Context, k blockkey.Key, body []byte, vid string) (b records.Block, st stream.Stream, reason string, err error) {
	b = records.Block{Tenant: k.Tenant, ID: k.Block.String(), Gen: 1, Meta: string(body), MetaVersionID: vid,
		Published: true, UpdatedAt: p.now().UnixMilli(), Arrived: p.now().UnixMilli()}
	meta, err := blockmeta.Parse(body, k.Object(blockkey.MetaFile))
	if err != nil {
		return b, st, err.Error(), nil
	}
	if err := records.CheckMetaSize(body); err != nil {
		return b, st, fmt.Sprintf("meta.json of %s: %v", k.BlockKey(), err), nil
	}
	if meta.ULID != k.Block {
		return b, st, fmt.Sprintf("meta.json names block %s but lives under %s", meta.ULID, k.Block), nil
	}
	l, err := p.listBlock(ctx, k)
	if err != nil {
		return b, st, "", err
	}
	if t, ok := l.metaWritten[vid]; ok && !t.IsZero() {
		// An upload is complete when its meta.json was written, as
		// Cortex's and Mimir's updaters date it too: an adopted block
		// keeps its age in the bucket index.
		b.PublishedAt = t.UnixMilli()
	}
	if meta.Thanos != nil {
		for _, f := range meta.Thanos.Files {
			if err := blockcheck.RelPath(f.RelPath); err != nil {
				return b, st, fmt.Sprintf("meta.json of %s lists a bad file: %v", k.BlockKey(), err), nil
			}
		}
	}
	files, err := l.files(k, meta)
	if err != nil {
		return b, st, err.Error(), nil
	}
	if err := p.checkFiles(ctx, k, files); err != nil {
		if errors.Is(err, blockcheck.ErrCorrupt) {
			return b, st, err.Error(), nil
		}
		return b, st, "", err
	}
	b.Files = files
	b.Superseded = l.notNamedBy(b)
	st = stream.Of(meta, p.Config.ReplicaLabels)
	b.Stream = st.ID()
	b.MinT, b.MaxT = meta.MinTime, meta.MaxTime
	b.Level = p.Config.Policy.LevelOf(meta.MinTime, meta.MaxTime)
	b.Series, b.Samples = meta.Stats.NumSeries, meta.Stats.NumSamples
	for _, f := range files {
		if f.RelPath == blockkey.IndexFile {
			b.IndexBytes = uint64(f.Size)
		}
	}
	if pi, ok := meta.PartitionInfo(); ok && pi.PartitionCount > 1 {
		b.PartitionCount, b.PartitionID = pi.PartitionCount, pi.PartitionID
	}
	if nc, ok := l.latest[blockkey.NoCompactMarkFile]; ok {
		b.NoCompact, b.NoCompactMarkVersionID = true, nc.VersionID
	}
	b.State = protocol.BlockLive
	if dm, ok := l.latest[blockkey.DeletionMarkFile]; ok {
		body, _, err := p.getObject(ctx, k.Object(blockkey.DeletionMarkFile), dm.VersionID)
		if err != nil {
			return b, st, "", err
		}
		markedAt := p.markTime(ctx, k, body)
		b.State, b.MarkVersionID, b.MarkedAt = protocol.BlockRetiring, dm.VersionID, markedAt.UnixMilli()
		b.RetireAt = markedAt.Add(p.Config.DeletionDelay).UnixMilli()
	}
	return b, st, "", nil
}

// retry releases a quarantined block or group (`sluice retry`).
//
// A block is read again as it is in the bucket now — an operator may have
// re-uploaded fixed files under its ULID — checked as at registration, and
// made LIVE with those files (QUARANTINED → LIVE, fenced on its gen); the
// versions its record no longer names are deleted, Sluice's no-compact
// mark too, and its group is planned. A block that still fails the
// registration checks stays quarantined, with the new reason logged.
//
// A group goes QUARANTINED → SUPERSEDED with its failures forgotten; the
// cleanup of a superseded version releases the claims and re-plans.
func (p Planner) retry(ctx context.Context, req messages.RetryRequest, ask planAsks) error {
	log := p.Logger.With(logattr.Block(req.Tenant, req.Block), "group", req.Group)
	if req.Group != "" {
		g, err := planning.ParseGroupKey(req.Group)
		if err != nil {
			return err
		}
		head, ok, err := p.records().GetGroup(ctx, req.Tenant, g)
		if err != nil {
			return err
		}
		if !ok || head.State != protocol.GroupQuarantined {
			log.WarnContext(ctx, "retry of a group that is not quarantined; nothing to do", "state", head.State)
			return nil
		}
		if err := p.records().ReleaseGroup(ctx, head, p.now()); err != nil {
			if records.IsConditionLost(err) {
				return nil
			}
			return err
		}
		log.InfoContext(ctx, "quarantined group released; re-planning", "version", head.Version)
		head.State = protocol.GroupSuperseded
		return p.cleanupSuperseded(ctx, head)
	}
	b, ok, err := p.records().GetBlock(ctx, req.Tenant, req.Block)
	if err != nil {
		return err
	}
	if !ok {
		log.WarnContext(ctx, "retry of a block Sluice does not know; nothing to do")
		return nil
	}
	id, err := ulid.ParseStrict(b.ID)
	if err != nil {
		return err
	}
	k, err := p.Config.Layout.Block(b.Tenant, id)
	if err != nil {
		return err
	}
	switch b.State {
	case protocol.BlockQuarantined, protocol.BlockLive:
	case protocol.BlockClaimed, protocol.BlockRetiring, protocol.BlockDeleted:
		// Released by an earlier delivery that died before sending the
		// removal of Sluice's mark and the deletion of the versions the
		// re-upload replaced, and planned, compacted or deleted since
		// (chaos seed 1490): those ops are sent again. Each is judged
		// when it runs — the removal by the block's state and gen, each
		// version by whether the record names it then — and the
		// block's own DELETE deletes only what its record names, so
		// nothing else would ever delete the replaced versions.
		if b.NoCompactMarkOurs || len(b.Superseded) > 0 {
			log.InfoContext(ctx, "retry of a block released and moved on since; its release's ops are sent again",
				"state", b.State, "gen", b.Gen, "replacedVersions", len(b.Superseded))
			return p.sendReleaseOps(ctx, k, b)
		}
		fallthrough
	default:
		log.WarnContext(ctx, "retry of a block that is not quarantined; nothing to do", "state", b.State)
		return nil
	}
	if b.State == protocol.BlockLive {
		// Released by an earlier delivery, which may have died before
		// sending what follows the release, or whose planning failed
		// (the batch handed this message back for it): send it all
		// again, or the replaced versions stay in the bucket and nothing
		// plans the block's range until its next event.
		log.InfoContext(ctx, "retry of a block that is live (released already); what follows the release is sent again", "gen", b.Gen)
		return p.afterRelease(ctx, k, b, ask)
	}
	body, vid, err := p.getObject(ctx, k.Object(blockkey.MetaFile), "")
	if err != nil {
		return err
	}
	fresh, _, reason, err := p.readBlock(ctx, k, body, vid)
	if err != nil {
		return err
	}
	if reason == "" && (fresh.MinT != b.MinT || fresh.MaxT != b.MaxT || fresh.Stream != b.Stream) {
		reason = "the re-uploaded meta.json changes the block's time range or stream; upload it under a new ULID"
	}
	if reason != "" {
		log.ErrorContext(ctx, "retry: the block still fails its checks; it stays quarantined", "reason", reason)
		return nil
	}
	old := b
	b.Files, b.Meta, b.MetaVersionID = fresh.Files, fresh.Meta, fresh.MetaVersionID
	b.Series, b.Samples, b.IndexBytes = fresh.Series, fresh.Samples, fresh.IndexBytes
	// The versions the re-upload replaced are kept with the record, as a
	// registration keeps those it finds superseded: a redelivery sends
	// their deletion again.
	for _, v := range old.AllVersions() {
		if v.RelPath != blockkey.NoCompactMarkFile && !b.Names(v.RelPath, v.VersionID) && !slices.Contains(b.Superseded, v) {
			b.Superseded = append(b.Superseded, v)
		}
	}
	gen, err := p.records().ReleaseBlock(ctx, b, p.now())
	if err != nil {
		if records.IsConditionLost(err) {
			return nil
		}
		return err
	}
	b.Gen, b.State = gen, protocol.BlockLive
	log.InfoContext(ctx, "quarantined block released", "gen", gen, "replacedVersions", len(b.Superseded))
	if err := p.step(ctx, "planner.after-release", b.Key()); err != nil {
		return err
	}
	return p.afterRelease(ctx, k, b, ask)
}

// afterRelease sends what follows the release of quarantined block b: the
// removal of Sluice's no-compact mark, the deletion of the versions its
// re-upload replaced, and the planning of its range. A redelivered retry
// sends it all again. Another tool's no-compact mark is left to the block
// and named by its record (a LIVE block may carry one, and a retry request
// can find the block LIVE); a mark not recorded yet is never written, its
// op stale once the block is LIVE.
func (p Planner) afterRelease(ctx context.Context, k blockkey.Key, b records.Block, ask planAsks) error {
	if err := p.sendReleaseOps(ctx, k, b); err != nil {
		return err
	}
	return p.planFor(ctx, b, ask)
}

// sendReleaseOps sends the ops of released block b: the removal of
// Sluice's no-compact mark and the deletion of the versions its
// re-upload replaced.
func (p Planner) sendReleaseOps(ctx context.Context, k blockkey.Key, b records.Block) error {
	if b.NoCompactMarkOurs {
		if err := p.Send.Op(ctx, messages.BlockOp{Op: messages.OpUnmarkNoCompact, Tenant: b.Tenant, Block: b.ID, Gen: b.Gen}); err != nil {
			return err
		}
	}
	return p.sendSuperseded(ctx, k, b)
}

// checkFiles reads a few bytes of the block's files by their VersionIds
// (the index's table of contents, each chunk segment's header: one ranged
// GET each) and checks every file's path, so that a truncated or corrupt
// upload is rejected at registration rather than found by compaction. An
// error wrapping blockcheck.ErrCorrupt names the file; any other is a
// failure to read, worth a retry.
func (p Planner) checkFiles(ctx context.Context, k blockkey.Key, files []records.ObjectVersion) error {
	for _, f := range files {
		if err := blockcheck.RelPath(f.RelPath); err != nil {
			return fmt.Errorf("%s: %w", k.BlockKey(), err)
		}
		key := k.Object(f.RelPath)
		switch {
		case f.RelPath == blockkey.IndexFile:
			if f.Size < blockcheck.TOCSize {
				return blockcheck.IndexTOC(nil, f.Size)
			}
			tail, err := p.getRange(ctx, key, f.VersionID, fmt.Sprintf("bytes=%d-%d", f.Size-blockcheck.TOCSize, f.Size-1))
			if err != nil {
				return err
			}
			if err := blockcheck.IndexTOC(tail, f.Size); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		case strings.HasPrefix(f.RelPath, blockkey.ChunksDir+"/"):
			if !chunkSegmentName(f.RelPath) {
				return fmt.Errorf("%s: not a chunk segment (want chunks/ and six digits): %w", key, blockcheck.ErrCorrupt)
			}
			if f.Size < blockcheck.ChunkHeaderSize {
				return fmt.Errorf("%s: %w", key, blockcheck.ChunkHeader(nil))
			}
			head, err := p.getRange(ctx, key, f.VersionID, fmt.Sprintf("bytes=0-%d", blockcheck.ChunkHeaderSize-1))
			if err != nil {
				return err
			}
			if err := blockcheck.ChunkHeader(head); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
	}
	return nil
}

// chunkSegmentName reports a chunk segment's path, chunks/NNNNNN, as
// Prometheus names and reads them.
func chunkSegmentName(rel string) bool {
	name := strings.TrimPrefix(rel, blockkey.ChunksDir+"/")
	if len(name) != 6 {
		return false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// getRange reads a byte range of one object version.
func (p Planner) getRange(ctx context.Context, key, vid, rng string) ([]byte, error) {
	res, err := p.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(p.Config.Bucket), Key: aws.String(key),
		VersionId: aws.String(vid), Range: aws.String(rng)})
	if err != nil {
		return nil, fmt.Errorf("get %s (%s): %w", key, rng, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s (%s): %w", key, rng, err)
	}
	return b, nil
}

// sendSuperseded sends the deletion of the versions registration found
// superseded, or a release found replaced (none on the happy path:
// nothing is sent).
func (p Planner) sendSuperseded(ctx context.Context, k blockkey.Key, b records.Block) error {
	if len(b.Superseded) == 0 {
		return nil
	}
	p.Logger.WarnContext(ctx, "deleting versions of the block that its record does not name (uploaded more than once before registration, or replaced by a re-upload before `sluice retry`)",
		logattr.Block(k.Tenant, b.ID), "versions", len(b.Superseded))
	return p.sendStray(ctx, k, b, b.Superseded)
}

// sendStray sends DELETE_STRAY ops for versions of b that its record does
// not name.
func (p Planner) sendStray(ctx context.Context, k blockkey.Key, b records.Block, vs []records.ObjectVersion) error {
	stray := make([]messages.StrayVersion, 0, len(vs))
	for _, v := range vs {
		stray = append(stray, messages.StrayVersion{RelPath: v.RelPath, VersionID: v.VersionID})
	}
	return sendStray(ctx, p.Send, k.Tenant, k.Block.String(), b.Gen, stray)
}

func (d *Deps) getObject(ctx context.Context, key, vid string) ([]byte, string, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(d.Config.Bucket), Key: aws.String(key)}
	if vid != "" {
		in.VersionId = aws.String(vid)
	}
	res, err := d.S3.GetObject(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("get %s: %w", key, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", key, err)
	}
	return body, aws.ToString(res.VersionId), nil
}

// planFor asks for the planning of the group a block goes to: its own
// split when it is big enough to be split on arrival (Policy.SplitCount:
// the range's group then reads only its own partition of it), else the
// next level up, or — for a late block — the highest level that already
// compacted its range (found when the batch ends: planBatch.targets).
func (p Planner) planFor(ctx context.Context, b records.Block, ask planAsks) error {
	c := candidate(b)
	pol := p.overrides(ctx).Policy(b.Tenant, p.Config.Policy)
	plannable := b.State == protocol.BlockLive && b.Published && b.ClaimedBy == "" && !b.NoCompact
	if plannable && pol.SplitCount(c) > 0 {
		ask.group(b.Tenant, planning.SplitKey(b.Stream, b.MinT, b.ID))
		return nil
	}
	if plannable && pol.Downsample {
		sr, ok, err := p.records().GetStream(ctx, b.Tenant, b.Stream)
		if err != nil {
			return err
		}
		if to, due := downsampleDue(pol, b, sr.Resolution); ok && due {
			ask.group(b.Tenant, planning.DownsampleKey(b.Stream, b.MinT, b.ID, to))
		}
	}
	ask.targetOf(b)
	return nil
}

// groupHeads reads the heads of gs: one GetItem for one group, one
// BatchGetItem for more. A group with no head yet maps to the zero Group,
// which planning starts from as it is.
func (p Planner) groupHeads(ctx context.Context, tenant string, gs []planning.GroupKey) (map[planning.GroupKey]records.Group, error) {
	heads := map[planning.GroupKey]records.Group{}
	if len(gs) == 1 {
		head, _, err := p.records().GetGroup(ctx, tenant, gs[0])
		heads[gs[0]] = head
		return heads, err
	}
	found, err := p.records().GetGroups(ctx, tenant, gs)
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		heads[g] = found[g]
	}
	return heads, nil
}

// disabledRecheck is how often a range of a tenant whose compaction the
// overrides disable is looked at again.
const disabledRecheck = 15 * time.Minute

// maxPlanRounds bounds re-planning after lost claims within one message.
const maxPlanRounds = 3

// PlanGroup plans group g of tenant: if nothing is unfinished and the
// range is ready, it creates version v+1 with its partitions, claims the
// sources, moves it to PLANNED and sends one job per partition. It backs
// off (returns nil) whenever another actor holds the group or its blocks:
// completion re-plans.
func (p Planner) PlanGroup(ctx context.Context, tenant string, g planning.GroupKey) error {
	return p.planGroup(ctx, tenant, g, nil)
}

// planGroup is PlanGroup starting from head when the caller has just read
// it (its first round reads it no second time).
func (p Planner) planGroup(ctx context.Context, tenant string, g planning.GroupKey, head *records.Group) error {
	if p.overrides(ctx).CompactionDisabled(tenant) {
		// Its blocks keep being registered; the range looks again later,
		// so that clearing the override needs no new upload.
		p.Logger.InfoContext(ctx, "compaction disabled for this tenant by the runtime overrides; looking again later",
			logattr.Group(tenant, g), "again", disabledRecheck)
		return p.records().PutAgenda(ctx, records.AgendaRange, p.now().Add(disabledRecheck), tenant, g.String())
	}
	for round := 0; round < maxPlanRounds; round++ {
		again, err := p.planOnce(ctx, tenant, g, head)
		if err != nil || !again {
			return err
		}
		head = nil // the version moved on: read it again
	}
	p.Logger.WarnContext(ctx, "giving up planning after lost claims; the sweep will re-plan", logattr.Group(tenant, g))
	return nil
}

func (p Planner) planOnce(ctx context.Context, tenant string, g planning.GroupKey, read *records.Group) (again bool, err error) {
	log := p.Logger.With(logattr.Group(tenant, g))
	var head records.Group
	if read != nil {
		head = *read
	} else if head, _, err = p.records().GetGroup(ctx, tenant, g); err != nil {
		return false, err
	}
	if head.ClaimAbandoned(p.now()) {
		return p.supersedeAbandoned(ctx, head, log)
	}
	if head.State.Unfinished() {
		log.InfoContext(ctx, "group busy; backing off", "version", head.Version, "state", head.State)
		return false, nil
	}
	if head.State == protocol.GroupQuarantined {
		log.WarnContext(ctx, "group quarantined; not planning until 'sluice retry'", "version", head.Version, "reason", head.Reason)
		return false, nil
	}
	var (
		blocks []records.Block
		cands  []planning.Candidate
		target records.StreamRecord
	)
	if g.IsDownsample() {
		blocks, cands, target, err = p.downsampleBlocks(ctx, tenant, g)
		if err == nil && len(blocks) > 0 && blocks[0].Downsampled >= g.Resolution {
			log.InfoContext(ctx, "block downsampled already; nothing to plan", "downsampled", blocks[0].Downsampled)
			return false, nil
		}
	} else {
		blocks, err = p.records().RangeBlocks(ctx, tenant, g)
		cands = withMeta(candidates(blocks), blocks)
	}
	if err != nil {
		return false, err
	}
	now := p.now()
	dec := p.overrides(ctx).Policy(tenant, p.Config.Policy).Plan(g, cands, now)
	if len(dec.DownsampledBy) > 0 {
		return false, p.noteDownsampled(ctx, tenant, g, blocks, dec.DownsampledBy)
	}
	if len(dec.Sources) == 0 {
		log.InfoContext(ctx, "nothing to plan", "why", dec.Wait, "blocks", len(blocks))
		if dec.ClosesAt > 0 {
			return false, p.records().PutAgenda(ctx, records.AgendaRange, timeMs(dec.ClosesAt), tenant, g.String())
		}
		return false, nil
	}
	if head.Key == (planning.GroupKey{}) {
		head.Key, head.Tenant = g, tenant
	}
	next := records.Group{
		Tenant: tenant, Key: g, Version: head.Version + 1, State: protocol.GroupClaiming,
		CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli(), Partitions: dec.Partitions,
		EverCompleted: head.EverCompleted, ClaimUntil: claimUntil(ctx, now).UnixMilli(),
	}
	byID := map[string]records.Block{}
	for _, b := range blocks {
		byID[b.ID] = b
	}
	var srcs []records.Block
	for _, c := range dec.Sources {
		next.Sources = append(next.Sources, c.ID)
		srcs = append(srcs, byID[c.ID])
	}
	if head.Version > 0 {
		next.History = head.NextHistory()
	}
	if head.State == protocol.GroupSuperseded && head.LastErrorKind == records.FailureDoesNotFit {
		// A job found its partition too big for its function (its limits
		// may be tighter than this planner's): more partitions this time.
		members := 1
		if g.IsDownsample() {
			members = len(downsampleMembers(next, srcs))
		}
		next.Partitions = p.Config.Policy.MoreJobs(next.Partitions, head.Partitions, members)
		log.WarnContext(ctx, "the last version's job did not fit; re-planning with more partitions", "partitions", next.Partitions, "was", head.Partitions, "why", head.LastError)
	} else if head.State == protocol.GroupSuperseded && slices.Equal(head.Sources, next.Sources) && head.QuarantinedSource != "" {
		// The version quarantined a source, which is a source again: an
		// operator released it (`sluice retry`), repaired or not. Carried,
		// the failures that blamed it would quarantine it again before a
		// job ran (chaos seed 10, a retry before the re-plan).
		log.InfoContext(ctx, "the source the last version quarantined was released; its failures are not carried",
			"block", head.QuarantinedSource, "failures", head.Failures)
	} else if head.State == protocol.GroupSuperseded && slices.Equal(head.Sources, next.Sources) {
		// The same work again: its failures keep counting, so a version
		// superseded over a source that always fails does not start over.
		next.Failures, next.LastError, next.LastErrorBlock, next.LastErrorKind = head.Failures, head.LastError, head.LastErrorBlock, head.LastErrorKind
		if next.LastErrorKind == records.FailureNotDeterministic {
			next.LastErrorKind = records.FailureOther // already acted on: this version has new output ULIDs
		}
	}
	log = log.With("version", next.Version)
	if g.IsDownsample() {
		// The output's stream: no upload registered it.
		if err := p.records().PutStream(ctx, tenant, target); err != nil {
			return false, err
		}
	}
	if err := p.step(ctx, "planner.before-create", next.Ref()); err != nil {
		return false, err
	}
	if err := p.records().CreateVersion(ctx, head, next, now, now.Add(p.Config.OrphanDelay)); err != nil {
		if records.IsConditionLost(err) {
			log.InfoContext(ctx, "another planner created this version first; backing off", "lost", err)
			return false, nil
		}
		return false, err
	}
	log.InfoContext(ctx, "version created", "sources", len(srcs), "partitions", next.Partitions)
	if dec.DoesNotFit != "" {
		log.ErrorContext(ctx, "no partition count fits this group's jobs; they will refuse and the group be quarantined", "why", dec.DoesNotFit)
	}
	if err := p.step(ctx, "planner.before-claim", next.Ref()); err != nil {
		return false, err
	}
	if err := p.records().Claim(ctx, next, srcs, now); err != nil {
		if !records.IsConditionLost(err) {
			return false, err
		}
		log.WarnContext(ctx, "a claim was lost; abandoning the version and re-planning", "lost", err)
		if err := p.records().Supersede(ctx, next, protocol.GroupClaiming, "a claim was lost: "+err.Error(), p.now()); err != nil && !records.IsConditionLost(err) {
			return false, err
		}
		next.State = protocol.GroupSuperseded
		return true, p.cleanupSuperseded(ctx, next)
	}
	if err := p.step(ctx, "planner.before-planned", next.Ref()); err != nil {
		return false, err
	}
	if err := p.records().SetGroupState(ctx, next, protocol.GroupClaiming, protocol.GroupPlanned, p.now()); err != nil {
		if records.IsConditionLost(err) {
			log.WarnContext(ctx, "version was superseded while claiming", "lost", err)
			return false, nil
		}
		return false, err
	}
	next.State = protocol.GroupPlanned
	return false, p.sendJobs(ctx, next, nil, 0)
}

// supersedeAbandoned ends a version left CLAIMING by a planner whose
// invocation is over (a timeout, a crash between creating the version and
// planning it): its retry, or any planner that looks at the group after,
// would otherwise back off from a busy group that nobody moves on, until
// the sweep's StuckAfter. The supersede is fenced on the version and its
// state, and a claim or plan of it after that is lost, so a planner that
// is slow rather than dead cannot finish it. The group is planned again.
func (p Planner) supersedeAbandoned(ctx context.Context, head records.Group, log *slog.Logger) (again bool, err error) {
	log = log.With("version", head.Version)
	if err := p.records().Supersede(ctx, head, protocol.GroupClaiming, "its planner's invocation ended before it was planned", p.now()); err != nil {
		if records.IsConditionLost(err) {
			log.InfoContext(ctx, "abandoned version moved on first; reading it again", "lost", err)
			return true, nil
		}
		return false, err
	}
	log.WarnContext(ctx, "version abandoned while claiming (its planner's invocation ended); superseded and re-planned",
		"claimUntil", time.UnixMilli(head.ClaimUntil).UTC())
	head.State = protocol.GroupSuperseded
	return true, p.cleanupSuperseded(ctx, head)
}

// claimUntil is when the invocation planning a version at now ends: its
// context's deadline, measured on the planner's clock, or Lambda's longest
// invocation without one.
func claimUntil(ctx context.Context, now time.Time) time.Time {
	if deadline, ok := ctx.Deadline(); ok {
		return now.Add(min(time.Until(deadline), records.MaxInvocation))
	}
	return now.Add(records.MaxInvocation)
}

// candidates tells planning what it needs of each block in a range.
func candidates(blocks []records.Block) []planning.Candidate {
	out := make([]planning.Candidate, 0, len(blocks))
	for _, b := range blocks {
		switch b.State {
		case protocol.BlockDeleted, protocol.BlockDiscarded, protocol.BlockRejected, protocol.BlockRetiring, protocol.BlockQuarantined:
			continue
		}
		c := candidate(b)
		c.Plannable = b.State == protocol.BlockLive && b.Published && b.ClaimedBy == "" && !b.NoCompact
		c.Busy = b.State == protocol.BlockClaimed || b.State == protocol.BlockPending ||
			(b.State == protocol.BlockLive && !b.Published)
		out = append(out, c)
	}
	return out
}

// withMeta adds to cands the compaction sources and the resolution their
// blocks' meta.json give, when any of them is a partition: planning then
// tells whether merging them would make a block that names a source of
// which it holds only some partitions (planning.Plan, for downsampled
// streams). An unpartitioned range needs neither, and nothing is parsed.
func withMeta(cands []planning.Candidate, blocks []records.Block) []planning.Candidate {
	if !slices.ContainsFunc(cands, func(c planning.Candidate) bool { return c.PartitionCount > 1 }) {
		return cands
	}
	byID := map[string]records.Block{}
	for _, b := range blocks {
		byID[b.ID] = b
	}
	for i := range cands {
		addMeta(&cands[i], byID[cands[i].ID])
	}
	return cands
}

// addMeta sets c's compaction sources and resolution from b's meta.json
// (left unset when it does not parse: a candidate's record was written
// from a meta.json that did).
func addMeta(c *planning.Candidate, b records.Block) {
	m, err := blockmeta.Parse([]byte(b.Meta), b.Key())
	if err != nil {
		return
	}
	if m.Thanos != nil {
		c.Resolution = m.Thanos.Downsample.Resolution
	}
	for _, id := range m.Compaction.Sources {
		c.Sources = append(c.Sources, id.String())
	}
}

// candidate is what planning's sizing needs of a block: its range, level,
// series, sizes and partition.
func candidate(b records.Block) planning.Candidate {
	c := planning.Candidate{
		ID: b.ID, MinT: b.MinT, MaxT: b.MaxT, Level: b.Level, ProducedBy: b.ProducedBy,
		Series: b.Series, IndexBytes: b.IndexBytes, Arrived: b.Arrived,
		PartitionCount: b.PartitionCount, PartitionID: b.PartitionID, EmptyPartitions: b.EmptyPartitions,
	}
	for _, f := range b.Files {
		if strings.HasPrefix(f.RelPath, "chunks/") && f.Size > 0 {
			c.ChunkBytes += uint64(f.Size)
		}
	}
	return c
}
