package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/blockstore"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/s3errors"
)

// Uploader executes block ops (docs/design.md §4.4): the only writer of
// meta.json and deletion marks, and the only deleter. Ops of one block key
// arrive in order (one FIFO group per key); each acts only if the block's
// gen is still the op's, and every delete names a VersionId.
type Uploader struct{ *Deps }

// records is the store as this handler uses it.
func (u Uploader) records() opRecords { return u.Store }

// opRecords is what the uploader reads and writes of the records: a
// block, and the object versions its ops wrote, each at the op's gen.
type opRecords interface {
	GetBlock(ctx context.Context, tenant, id string) (records.Block, bool, error)
	MarkPublished(ctx context.Context, tenant, id string, gen int64, vid string, now time.Time) error
	RecordMark(ctx context.Context, tenant, id string, gen int64, vid, globalVid string, retireAt, deleteAt, now time.Time) error
	RecordNoCompactMark(ctx context.Context, tenant, id string, gen int64, vid string, ours bool, globalVid string, now time.Time) error
	ForgetNoCompactMark(ctx context.Context, tenant, id string, from protocol.BlockState, gen int64, vid string, now time.Time) error
}

// Handle processes a batch from the block-ops queue.
func (u Uploader) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, emit := u.measured(ctx)
	defer emit()
	return eachMessage(ctx, u.Logger, "uploader", ev, func(ctx context.Context, m events.SQSMessage) error {
		msg, err := messages.Decode(m.Body)
		if err != nil {
			return fmt.Errorf("uploader: message %s: %w", m.MessageId, err)
		}
		switch v := msg.(type) {
		case messages.BlockOp:
			if u.OpContext != nil {
				ctx = u.OpContext(ctx, v)
			}
			return u.Execute(ctx, v)
		case messages.IndexRequest:
			// Counted with the schedule that asked for it: the index is a
			// cost per pass, not per block op.
			return u.WriteIndex(awsenv.WithCaller(ctx, bucketIndexKind), v)
		}
		return fmt.Errorf("uploader: unexpected %T on the block-ops queue", msg)
	}), nil
}

// Execute runs one op. It reads its block's record itself, right before
// it acts, even in a batch. A record read once for the whole batch (one
// BatchGetItem) is as old as the ops before it take, and meanwhile a
// duplicate of the op can run elsewhere: in chaos seed 53 (2026-12-03) a
// MARK decided on such a read wrote its deletion mark 7 s after a copy of
// it had marked the block and the block's DELETE had run, and the mark
// stayed as an orphan. The op's S3 write has no condition on the record,
// so the read right before it is what keeps the window short.
func (u Uploader) Execute(ctx context.Context, op messages.BlockOp) error {
	log := u.Logger.With(logattr.Block(op.Tenant, op.Block), "op", op.Op, "gen", op.Gen)
	id, err := ulid.ParseStrict(op.Block)
	if err != nil {
		return fmt.Errorf("uploader: op %s for %s/%s: %w", op.Op, op.Tenant, op.Block, err)
	}
	k, err := u.Config.Layout.Block(op.Tenant, id)
	if err != nil {
		return err
	}
	b, known, err := u.records().GetBlock(ctx, op.Tenant, op.Block)
	if err != nil {
		return err
	}
	if op.Op == messages.OpDeleteStray {
		return u.deleteStray(ctx, k, b, known, op, log)
	}
	if acts, _ := protocol.OpActs(op.Op, op.Gen, b.State, b.Gen); !known || !acts {
		log.WarnContext(ctx, "stale block op dropped", "recordGen", b.Gen, "recordState", b.State, "known", known)
		if op.Op == messages.OpNoCompact {
			// An earlier delivery may have written its mark and died
			// before recording it, and the block moved on since.
			return u.dropStrayOwnMarks(ctx, k, log)
		}
		return nil
	}
	if err := u.step(ctx, Step("uploader.before-"+strings.ToLower(string(op.Op))), b.Key()); err != nil {
		return err
	}
	switch op.Op {
	case messages.OpPublish:
		return u.publish(ctx, k, b, log)
	case messages.OpMark:
		return u.mark(ctx, k, b, log)
	case messages.OpNoCompact:
		return u.markNoCompact(ctx, k, b, log)
	case messages.OpUnmarkNoCompact:
		return u.unmarkNoCompact(ctx, k, op, b, log)
	default:
		return u.delete(ctx, k, b, log)
	}
}

// markNoCompact writes no-compact-mark.json for a quarantined block, in
// Thanos' format, with Sluice's reason in its details. A mark that is
// already there (another tool's) is recorded as not ours and kept.
//
// A mark of ours the record names already is checked to be in the bucket
// (one HEAD, on this op's redelivery or re-send only): the removal of an
// earlier release's mark that died between deleting it and forgetting it,
// and was delivered again only once the block was quarantined again, left
// the record naming a deleted version. It is forgotten, and a new mark is
// written.
func (u Uploader) markNoCompact(ctx context.Context, k blockkey.Key, b records.Block, log *slog.Logger) error {
	if vid := b.NoCompactMarkVersionID; vid != "" {
		if !b.NoCompactMarkOurs {
			return nil
		}
		there, err := u.versionExists(ctx, k.Object(blockkey.NoCompactMarkFile), vid)
		if err != nil || there {
			return err
		}
		log.WarnContext(ctx, "the record names a no-compact mark of ours that is not in the bucket (a removal died before recording it); writing a new one",
			"versionId", vid)
		if b.GlobalNoCompactVersionID != "" {
			// Deleted in the removal's request with the mark, unless that
			// one failed: deleted again before the record stops naming it.
			if err := u.deleteVersion(ctx, u.globalMarker(b, blockkey.NoCompactMarkFile), b.GlobalNoCompactVersionID); err != nil {
				return err
			}
		}
		if err := u.records().ForgetNoCompactMark(ctx, b.Tenant, b.ID, b.State, b.Gen, vid, u.now()); err != nil {
			if records.IsConditionLost(err) {
				log.WarnContext(ctx, "block moved on while forgetting its deleted no-compact mark", "lost", err)
				return nil
			}
			return err
		}
	}
	id, err := ulid.ParseStrict(b.ID)
	if err != nil {
		return err
	}
	// The mark's time is the quarantine's, so a retry of this op writes the
	// same bytes and recognises a mark its first try wrote as its own.
	body, err := blockmeta.NewNoCompactMark(id, time.UnixMilli(b.UpdatedAt), quarantineMarkDetails+b.Reason).Marshal()
	if err != nil {
		return err
	}
	vid, ours, err := u.putOnce(ctx, k.Object(blockkey.NoCompactMarkFile), body)
	if err != nil {
		return err
	}
	var globalVid string
	if ours && u.Config.BucketIndex != "" {
		if globalVid, _, err = u.putOnce(ctx, u.globalMarker(b, blockkey.NoCompactMarkFile), body); err != nil {
			return err
		}
	}
	if err := u.step(ctx, "uploader.no-compact-written", b.Key()); err != nil {
		return err
	}
	if err := u.records().RecordNoCompactMark(ctx, b.Tenant, b.ID, b.Gen, vid, ours, globalVid, u.now()); err != nil {
		if records.IsConditionLost(err) {
			log.WarnContext(ctx, "block moved on while writing its no-compact mark", "versionId", vid, "lost", err)
			return u.dropStrayOwnMarks(ctx, k, log)
		}
		return err
	}
	log.InfoContext(ctx, "no-compact mark written for a quarantined block", "versionId", vid, "ours", ours)
	return nil
}

// quarantineMarkDetails begins the details of every no-compact mark
// Sluice writes. By it the uploader and the planner tell a mark of
// Sluice's from another tool's when no record names it.
const quarantineMarkDetails = "quarantined by Sluice: "

// ownNoCompactMark reports whether body is a no-compact mark Sluice wrote
// for block k.
func ownNoCompactMark(body []byte, k blockkey.Key) bool {
	m, err := blockmeta.ParseNoCompactMark(body, k.BlockKey())
	return err == nil && m.ID == k.Block && strings.HasPrefix(m.Details, quarantineMarkDetails)
}

// dropStrayOwnMarks deletes, by its version, a no-compact mark of
// Sluice's for block k, and its global marker, that the block's record
// does not name. A NO_COMPACT op writes its mark before it records it;
// when `sluice retry` releases the block in that gap, the record write
// loses, or the op's redelivery after a crash there no longer acts. The
// release read a record that named no mark, so it sends no removal, and
// the block's DELETE deletes only the versions its record names: the mark
// outlived the block (chaos seed 17, CI on 56ed430). On a block
// quarantined again, the next NO_COMPACT op would find it in place and
// take it for another tool's.
//
// Nothing starts naming such a mark while this runs: only NO_COMPACT ops
// record Sluice's marks, the ops of one block run one at a time (one FIFO
// group per block key), and the planner never notes a mark of Sluice's as
// another tool's (honourMark). One GET per key, on this rare path only.
func (u Uploader) dropStrayOwnMarks(ctx context.Context, k blockkey.Key, log *slog.Logger) error {
	b, known, err := u.records().GetBlock(ctx, k.Tenant, k.Block.String())
	if err != nil {
		return err
	}
	type mark struct{ key, named string }
	marks := []mark{{k.Object(blockkey.NoCompactMarkFile), b.NoCompactMarkVersionID}}
	if u.Config.BucketIndex != "" {
		marks = append(marks, mark{u.Config.Layout.GlobalMarker(k.Tenant, k.Block.String(), blockkey.NoCompactMarkFile), b.GlobalNoCompactVersionID})
	}
	for _, m := range marks {
		body, vid, err := u.getObject(ctx, m.key, "")
		if s3errors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if (known && vid == m.named) || !ownNoCompactMark(body, k) {
			continue
		}
		if err := u.deleteVersion(ctx, m.key, vid); err != nil {
			return err
		}
		log.WarnContext(ctx, "deleted a no-compact mark of Sluice's that its block's record does not name (the block left its quarantine before the mark was recorded)",
			"key", m.key, "versionId", vid, "recordState", b.State, "recordGen", b.Gen)
	}
	return nil
}

// unmarkNoCompact deletes the no-compact mark Sluice wrote for a block
// `sluice retry` released, and its global marker, by the VersionIds its
// record names, then forgets them. Another tool's mark is left to the
// block, named by its record. The op acts on the block LIVE or CLAIMED at
// the release's gen or later (protocol.OpActs), since the release's own
// planning may claim the block first.
//
// A claim between the read and the record's write makes the write lose
// with the versions already deleted: the block is read again and, while
// the op still acts on it and its record names the deleted mark, the
// removal is recorded at its new gen, so the record never names a version
// no longer in the bucket. A block quarantined again meanwhile is left
// naming it: the quarantine's NO_COMPACT op, which its version's cleanup
// sends, finds the mark gone and writes a new one (markNoCompact).
func (u Uploader) unmarkNoCompact(ctx context.Context, k blockkey.Key, op messages.BlockOp, b records.Block, log *slog.Logger) error {
	vid := b.NoCompactMarkVersionID
	if vid == "" || !b.NoCompactMarkOurs {
		return nil
	}
	gone := []keyVersion{{k.Object(blockkey.NoCompactMarkFile), vid}}
	if b.GlobalNoCompactVersionID != "" {
		gone = append(gone, keyVersion{u.globalMarker(b, blockkey.NoCompactMarkFile), b.GlobalNoCompactVersionID})
	}
	if err := u.deleteVersions(ctx, gone); err != nil {
		return err
	}
	if err := u.step(ctx, "uploader.no-compact-mark-deleted", b.Key()); err != nil {
		return err
	}
	for round := 1; ; round++ {
		err := u.records().ForgetNoCompactMark(ctx, b.Tenant, b.ID, b.State, b.Gen, vid, u.now())
		if err == nil {
			log.InfoContext(ctx, "no-compact mark removed from a released block", "state", b.State, "recordGen", b.Gen)
			return nil
		}
		if !records.IsConditionLost(err) || round == maxUnmarkRounds {
			return err
		}
		var known bool
		if b, known, err = u.records().GetBlock(ctx, op.Tenant, op.Block); err != nil {
			return err
		}
		if acts, _ := protocol.OpActs(op.Op, op.Gen, b.State, b.Gen); !known || !acts || b.NoCompactMarkVersionID != vid {
			log.InfoContext(ctx, "block moved on while its no-compact mark was removed; its record is left as it is",
				"recordGen", b.Gen, "recordState", b.State)
			return nil
		}
		log.InfoContext(ctx, "block claimed while its no-compact mark was removed; recording the removal at its new gen",
			"recordGen", b.Gen, "recordState", b.State)
	}
}

// maxUnmarkRounds bounds the re-reads of an UNMARK_NO_COMPACT whose record
// write lost: each loss is a claim (or its release) of the block, which
// happens once per version. Past it the op fails and
// SQS delivers it again.
const maxUnmarkRounds = 3

func (u Uploader) publish(ctx context.Context, k blockkey.Key, b records.Block, log *slog.Logger) error {
	if b.Published {
		return nil
	}
	vid, same, err := u.putOnce(ctx, k.Object(blockkey.MetaFile), []byte(b.Meta))
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("publish %s: its meta.json key already holds different bytes (version %s); refusing to adopt it", b.Key(), vid)
	}
	if err := u.step(ctx, "uploader.meta-written", b.Key()); err != nil {
		return err
	}
	if err := u.records().MarkPublished(ctx, b.Tenant, b.ID, b.Gen, vid, u.now()); err != nil {
		if records.IsConditionLost(err) {
			log.WarnContext(ctx, "block moved on while publishing", "lost", err)
			return nil
		}
		return err
	}
	log.InfoContext(ctx, "block published", "metaVersion", vid)
	group, _, _ := strings.Cut(b.ProducedBy, "@")
	if _, gk, ok := strings.Cut(group, "/"); ok {
		if _, err := planning.ParseGroupKey(gk); err == nil {
			return u.Send.Cleaner(ctx, messages.CleanerNote{Tenant: b.Tenant, Group: gk, Why: "published", Nonce: b.ID})
		}
	}
	return nil
}

func (u Uploader) mark(ctx context.Context, k blockkey.Key, b records.Block, log *slog.Logger) error {
	if b.MarkVersionID != "" {
		return nil
	}
	id, err := ulid.ParseStrict(b.ID)
	if err != nil {
		return fmt.Errorf("mark %s: the record's block id is no ULID: %w", k, err)
	}
	body, err := blockmeta.NewDeletionMark(id, u.now()).Marshal()
	if err != nil {
		return err
	}
	vid, _, err := u.putOnce(ctx, k.Object(blockkey.DeletionMarkFile), body)
	if err != nil {
		return err
	}
	var globalVid string
	if u.Config.BucketIndex != "" {
		// Cortex and Mimir also look for the mark among the tenant's
		// global markers; written after the block's own, as they do.
		if globalVid, _, err = u.putOnce(ctx, u.globalMarker(b, blockkey.DeletionMarkFile), body); err != nil {
			return err
		}
	}
	if err := u.step(ctx, "uploader.mark-written", b.Key()); err != nil {
		return err
	}
	now := u.now()
	if err := u.records().RecordMark(ctx, b.Tenant, b.ID, b.Gen, vid, globalVid, time.UnixMilli(b.RetireAt), now.Add(u.Config.DeletionDelay), now); err != nil {
		if records.IsConditionLost(err) {
			// The block moved on, or a twin of this op recorded its
			// mark first and this one found another version in place
			// (protocol.NoOtherMark): the recorded mark stands.
			log.WarnContext(ctx, "block moved on, or its mark was recorded, while marking", "markVersion", vid, "lost", err)
			return nil
		}
		return err
	}
	log.InfoContext(ctx, "deletion mark written", "markVersion", vid)
	return nil
}

// globalMarker is the key of block b's global marker of kind file (a
// deletion or no-compact mark) in a Cortex or Mimir bucket:
// <tenant>/markers/<ULID>-<file>.
func (u Uploader) globalMarker(b records.Block, file string) string {
	return u.Config.Layout.GlobalMarker(b.Tenant, b.ID, file)
}

// putOnce writes key with If-None-Match (and a SHA-256 checksum, by which
// an earlier attempt's object is recognised, whatever the encryption): an
// object never overwrites another. When the key exists, its version is
// returned and same says whether it holds these very bytes.
func (u Uploader) putOnce(ctx context.Context, key string, body []byte) (vid string, same bool, err error) {
	return blockstore.PutOnce(ctx, u.S3, u.Config.Bucket, key, body)
}

func (u Uploader) delete(ctx context.Context, k blockkey.Key, b records.Block, log *slog.Logger) error {
	vs := b.AllVersions()
	var del []keyVersion
	for _, v := range vs {
		del = append(del, keyVersion{k.Object(v.RelPath), v.VersionID})
	}
	for _, file := range []string{blockkey.DeletionMarkFile, blockkey.NoCompactMarkFile} {
		vid := b.GlobalMarkVersionID
		if file == blockkey.NoCompactMarkFile {
			vid = b.GlobalNoCompactVersionID
		}
		if vid != "" {
			del = append(del, keyVersion{u.globalMarker(b, file), vid})
		}
	}
	if err := u.deleteVersions(ctx, del); err != nil {
		return err
	}
	log.InfoContext(ctx, "block deleted", "versions", len(vs), "state", b.State)
	return nil
}

// versionExists reports whether version vid of key is in the bucket.
func (u Uploader) versionExists(ctx context.Context, key, vid string) (bool, error) {
	_, err := u.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(u.Config.Bucket), Key: aws.String(key), VersionId: aws.String(vid)})
	switch {
	case err == nil:
		return true, nil
	case s3errors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("head %s version %s: %w", key, vid, err)
}

// keyVersion is one object version to delete.
type keyVersion struct{ key, vid string }

func (u Uploader) deleteVersion(ctx context.Context, key, vid string) error {
	return u.deleteVersions(ctx, []keyVersion{{key, vid}})
}

// maxDeleteObjects is what one DeleteObjects request may name.
const maxDeleteObjects = 1000

// deleteVersions deletes object versions, each by its VersionId, with one
// DeleteObjects request per thousand (a block's files and marks are one
// request). A version already gone is not an error.
func (u Uploader) deleteVersions(ctx context.Context, vs []keyVersion) error {
	for _, v := range vs {
		if v.vid == "" {
			return fmt.Errorf("delete %s: refusing a delete without a VersionId", v.key)
		}
	}
	for start := 0; start < len(vs); start += maxDeleteObjects {
		batch := vs[start:min(start+maxDeleteObjects, len(vs))]
		ids := make([]s3types.ObjectIdentifier, len(batch))
		for i, v := range batch {
			ids[i] = s3types.ObjectIdentifier{Key: aws.String(v.key), VersionId: aws.String(v.vid)}
		}
		out, err := u.S3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(u.Config.Bucket),
			Delete: &s3types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return fmt.Errorf("delete %d object versions (%s version %s …): %w", len(batch), batch[0].key, batch[0].vid, err)
		}
		for _, e := range out.Errors {
			switch code := aws.ToString(e.Code); code {
			case "NoSuchKey", "NoSuchVersion":
			default:
				return fmt.Errorf("delete %s version %s: %s: %s", aws.ToString(e.Key), aws.ToString(e.VersionId), code, aws.ToString(e.Message))
			}
		}
	}
	return nil
}

// deleteStray deletes versions no record names. A version the block's
// record names is never deleted, whatever the op says.
func (u Uploader) deleteStray(ctx context.Context, k blockkey.Key, b records.Block, known bool, op messages.BlockOp, log *slog.Logger) error {
	var del []keyVersion
	for _, v := range op.Stray {
		if known && b.Names(v.RelPath, v.VersionID) {
			log.InfoContext(ctx, "stray delete names a version the record names now; keeping it", "file", v.RelPath, "versionId", v.VersionID)
			continue
		}
		del = append(del, keyVersion{k.Object(v.RelPath), v.VersionID})
	}
	if err := u.deleteVersions(ctx, del); err != nil {
		return err
	}
	log.InfoContext(ctx, "stray versions deleted", "versions", len(del))
	return nil
}
