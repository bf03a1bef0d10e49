package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/s3errors"
	"github.com/sluice-dev/sluice/shared/s3event"
)

// markRounds bounds how often one mark event re-reads its block after a
// lost condition or a superseded version before it leaves the rest to a
// redelivery.
const markRounds = 5

// errMarkNotYet is a mark that cannot be honoured yet (its block is an
// output still being published): the event is retried.
var errMarkNotYet = errors.New("the block is not settled yet; the mark is honoured on a later delivery")

// handleMark honours a deletion-mark.json or no-compact-mark.json that
// another tool (`thanos tools bucket mark`, a Cortex or Mimir compactor, an
// operator) wrote for a block: Thanos' compactor would never compact such
// a block again, and would delete a marked one after its deletion delay.
//
// The mark is noted on the block's record first (LIVE or CLAIMED, fenced
// on its gen), which keeps it from every later claim. A block that a
// running version has claimed takes that version down with it (CLAIMING or
// PLANNED → SUPERSEDED, fenced on the version): a job of it can no longer
// commit, so the marked block's data is not carried into an output — a
// `thanos tools bucket rewrite` that deleted series and marked the
// original would otherwise be undone. Released, a block marked for
// deletion is retired (LIVE → RETIRING) and deleted by the sweep when the
// deletion delay from its mark ends, with its mark.
//
// Sluice's own marks arrive here too (a retired source's deletion mark, a
// quarantined block's no-compact mark): their blocks are RETIRING or
// QUARANTINED, and nothing is done.
func (p Planner) handleMark(ctx context.Context, k blockkey.Key, vid string, ask planAsks) error {
	log := p.Logger.With(logattr.Block(k.Tenant, k.Block.String()), "mark", k.File)
	var err error
	b, known := ask.markedBlock(k.Tenant, k.Block.String())
	if !known {
		if b, known, err = p.records().GetBlock(ctx, k.Tenant, k.Block.String()); err != nil {
			return err
		}
	}
	if !known {
		// The block's meta.json event may be on its way, or its
		// registration may have listed the prefix before the mark was
		// written and not put its record yet. Registering the block now,
		// from its meta.json, closes that gap: the registration's LIST
		// sees the mark; a rival registration that wins is read back.
		meta := k
		meta.File = blockkey.MetaFile
		if err := p.handleObject(ctx, s3event.ObjectCreated{Key: meta.String()}, ask); err != nil {
			return err
		}
		if b, known, err = p.records().GetBlock(ctx, k.Tenant, k.Block.String()); err != nil {
			return err
		}
		if !known {
			log.WarnContext(ctx, "mark for a block with no meta.json (a partial upload, or one deleted since): left alone", "key", k.String())
			return nil
		}
	}
	for round := 0; round < markRounds; round++ {
		again, err := p.honourMark(ctx, k, b, vid, log, ask)
		if err != nil || !again {
			return err
		}
		if b, known, err = p.records().GetBlock(ctx, k.Tenant, k.Block.String()); err != nil || !known {
			return err
		}
	}
	return fmt.Errorf("mark %s: the block kept moving for %d rounds; retried", k, markRounds)
}

// honourMark takes one step for the mark of block b; again asks for the
// record to be read again and another step.
func (p Planner) honourMark(ctx context.Context, k blockkey.Key, b records.Block, vid string, log *slog.Logger, ask planAsks) (again bool, err error) {
	deletion := k.File == blockkey.DeletionMarkFile
	switch b.State {
	case protocol.BlockLive, protocol.BlockClaimed:
	case protocol.BlockPending:
		return false, fmt.Errorf("mark %s: %w", k, errMarkNotYet)
	case protocol.BlockRetiring, protocol.BlockDeleted:
		if deletion && b.NoCompact && b.MarkVersionID != "" {
			// Another tool's deletion mark, honoured by an earlier
			// delivery whose planning may have failed (the batch handed
			// this message back for it): ask for it again, or nothing
			// plans the range until its next event. The block may be
			// deleted by now (a mark older than the deletion delay is due
			// at once, and the sweep's deletion plans nothing). Sluice's
			// own mark passes here only for a block another tool marked
			// no-compact, which Sluice then retired (retention, or a
			// version that took it before the no-compact mark came), and
			// costs one planning that finds nothing.
			log.DebugContext(ctx, "deletion mark honoured already; its range is planned again", "state", b.State)
			return false, p.planFor(ctx, b, ask)
		}
		if deletion && b.State == protocol.BlockRetiring && (vid == "" || vid == b.MarkVersionID) {
			// Sluice's own mark, almost always. An event without the
			// mark's version (the emulator's) cannot tell it from
			// another tool's without a LIST of every retired block:
			// left alone (docs/protocol.md, "Marks written by other
			// tools", step 4).
			log.DebugContext(ctx, "mark of a block that is leaving already; nothing to do", "state", b.State)
			return false, nil
		}
		if deletion && b.State == protocol.BlockRetiring && b.MarkVersionID == "" {
			// The retirement's MARK op writes its mark before its record
			// names it, so this is its own mark, or another tool's that
			// the MARK will find in place and record, or another tool's
			// written beside Sluice's in that gap, which the block's
			// DELETE would leave behind. The DELETE_STRAY goes to the
			// block's FIFO group behind the MARK op (which was sent
			// before any mark of it could be written), so it runs once
			// the MARK has recorded the version it wrote or found, and
			// deletes this one only if the record does not name it then.
			log.InfoContext(ctx, "deletion mark of a retiring block its record does not name yet; checked after the block's MARK",
				"markVersion", vid)
			return false, p.sendStray(ctx, k, b, []records.ObjectVersion{{RelPath: k.File, VersionID: vid}})
		}
		return false, p.deleteLeftMarks(ctx, k, b, vid, log)
	default:
		log.DebugContext(ctx, "mark of a block that is leaving or left alone already; nothing to do", "state", b.State)
		return false, nil
	}
	noted := b.NoCompact && (!deletion || b.MarkVersionID != "")
	if !noted {
		// Read the mark itself: a late notification of a mark deleted
		// since is nothing to honour, and a deletion mark says when it
		// was made.
		body, cur, err := p.getObject(ctx, k.String(), vid)
		if s3errors.IsNotFound(err) {
			log.InfoContext(ctx, "mark is gone; nothing to honour", "markVersion", vid)
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !deletion && ownNoCompactMark(body, k) {
			// Sluice's own mark of a block quarantined once and released
			// since, its notification late. The release removes a mark
			// the record names; the NO_COMPACT op that wrote one the
			// record does not name, for a quarantine the block left
			// before the op recorded it, deletes it itself
			// (dropStrayOwnMarks). Noted as another tool's, it would keep
			// the repaired block from every compaction, and the record
			// would name a version that op deletes.
			log.InfoContext(ctx, "late notification of Sluice's own no-compact mark; nothing to honour", "markVersion", cur,
				"named", cur == b.NoCompactMarkVersionID)
			return false, nil
		}
		markedAt := p.now()
		if deletion {
			markedAt = p.markTime(ctx, k, body)
		}
		if err := p.records().NoteForeignMark(ctx, b, b.State, k.File, cur, markedAt, p.now()); err != nil {
			if records.IsConditionLost(err) {
				return true, nil
			}
			return false, err
		}
		log.InfoContext(ctx, "another tool's mark noted; the block is never a source again", "state", b.State, "gen", b.Gen, "markVersion", cur)
		return true, nil
	}
	if b.State == protocol.BlockClaimed {
		return p.supersedeFor(ctx, b, log)
	}
	if !deletion {
		log.InfoContext(ctx, "no-compact mark honoured; its range is compacted around the block")
		return false, nil
	}
	retireAt := time.UnixMilli(b.MarkedAt).Add(p.Config.DeletionDelay)
	if _, err := p.records().HonourDeletionMark(ctx, b, retireAt, p.now()); err != nil {
		if records.IsConditionLost(err) {
			return true, nil
		}
		return false, err
	}
	log.InfoContext(ctx, "deletion mark honoured: the block is retired and deleted when its delay ends", "deleteAt", retireAt.UTC())
	return false, p.planFor(ctx, b, ask)
}

// supersedeFor takes down the version that claims marked block b, unless
// it completed already (then its retirement deletes the block, and its
// outputs hold the block's data: the mark came too late to keep it out).
func (p Planner) supersedeFor(ctx context.Context, b records.Block, log *slog.Logger) (again bool, err error) {
	ref, err := protocol.ParseVersionRef(b.ClaimedBy)
	if err != nil {
		return false, fmt.Errorf("block %s is claimed by %q: %w", b.Key(), b.ClaimedBy, err)
	}
	head, ok, err := p.records().GetGroup(ctx, ref.Tenant, ref.Group)
	if err != nil {
		return false, err
	}
	if !ok || head.Version != ref.Version {
		// The claim outlived its version's head: the cleanup that
		// releases it is on its way.
		return false, fmt.Errorf("marked block %s is claimed by %s, which is not its group's version; retried", b.Key(), b.ClaimedBy)
	}
	switch head.State {
	case protocol.GroupClaiming, protocol.GroupPlanned:
		err := p.records().Supersede(ctx, head, head.State, "a source was marked by another tool: "+b.ID, p.now())
		if records.IsConditionLost(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		log.WarnContext(ctx, "the version compacting a marked block is superseded; its group is planned again without it", logattr.InVersion(head.Key, head.Version))
		head.State = protocol.GroupSuperseded
		fallthrough
	case protocol.GroupSuperseded:
		return true, p.cleanupSuperseded(ctx, head)
	case protocol.GroupComplete, protocol.GroupRetired:
		log.WarnContext(ctx, "mark arrived after the version compacting the block completed: its data is in that version's outputs, and the block is deleted as a retired source", logattr.InVersion(head.Key, head.Version))
		return false, nil
	default:
		log.WarnContext(ctx, "marked block is a source of a quarantined version; it stays claimed until `sluice retry` of the group", logattr.InVersion(head.Key, head.Version))
		return false, nil
	}
}

// markTime is when a deletion mark says its block was marked: its
// deletion_time. A mark that cannot be read as Thanos writes it counts
// from now, so the block is still kept for the whole delay.
func (p Planner) markTime(ctx context.Context, k blockkey.Key, body []byte) time.Time {
	m, err := blockmeta.ParseDeletionMark(body, k.BlockKey())
	if err != nil {
		p.Logger.WarnContext(ctx, "deletion mark is not one Thanos would write; its delay runs from now",
			"key", k.Object(blockkey.DeletionMarkFile), "err", err)
		return p.now()
	}
	return time.Unix(m.DeletionTime, 0)
}

// deleteLeftMarks deletes, by its version, a mark under the prefix of
// block b that its record does not name and nothing else will delete: b
// is DELETED (an operator's script working from a stale list, or a zombie
// of Sluice's own MARK that wrote after the block's DELETE), or RETIRING
// and the mark is a no-compact one (Sluice writes those only for
// quarantined blocks) or a second deletion mark beside the one the record
// names (Sluice's MARK writes one only where none is: If-None-Match). The
// block's DELETE deletes only the versions its record names, so such a
// mark would stay alone under a prefix with no meta.json, a partial block
// to every reader. The event names the mark's version (vid) in AWS; an
// event without one (the emulator's) costs one LIST of the block's own
// prefix, which finds every such mark. The uploader never deletes a
// version the record names.
func (p Planner) deleteLeftMarks(ctx context.Context, k blockkey.Key, b records.Block, vid string, log *slog.Logger) error {
	var left []records.ObjectVersion
	if vid != "" {
		if !b.Names(k.File, vid) {
			left = append(left, records.ObjectVersion{RelPath: k.File, VersionID: vid})
		}
	} else {
		l, err := p.listBlock(ctx, k)
		if err != nil {
			return fmt.Errorf("marks left on %s: %w", k.BlockKey(), err)
		}
		for _, v := range l.versions {
			mark := v.RelPath == blockkey.NoCompactMarkFile || (v.RelPath == blockkey.DeletionMarkFile && b.State == protocol.BlockDeleted)
			if mark && !b.Names(v.RelPath, v.VersionID) {
				left = append(left, v)
			}
		}
	}
	if len(left) == 0 {
		log.DebugContext(ctx, "mark of a block that is leaving already; nothing to do", "state", b.State)
		return nil
	}
	log.WarnContext(ctx, "mark written on a block Sluice is done with; deleting it", "state", b.State, "versions", len(left))
	return p.sendStray(ctx, k, b, left)
}
