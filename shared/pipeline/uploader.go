package pipeline

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/records"
)

// Uploader executes block ops (DESIGN.md §4.4): the only writer of
// meta.json and deletion marks, and the only deleter. Ops of one block key
// arrive in order (one FIFO group per key); each acts only if the block's
// gen is still the op's, and every delete names a VersionId.
type Uploader struct{ *Deps }

// Handle processes a batch from the block-ops queue.
func (u Uploader) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return eachMessage(ctx, u.Logger, "uploader", ev, func(ctx context.Context, m events.SQSMessage) error {
		msg, err := messages.Decode(m.Body)
		if err != nil {
			return fmt.Errorf("uploader: message %s: %w", m.MessageId, err)
		}
		op, ok := msg.(messages.BlockOp)
		if !ok {
			return fmt.Errorf("uploader: unexpected %T on the block-ops queue", msg)
		}
		return u.Execute(ctx, op)
	}), nil
}

// Execute runs one op.
func (u Uploader) Execute(ctx context.Context, op messages.BlockOp) error {
	log := u.Logger.With("tenant", op.Tenant, "block", op.Block, "op", op.Op, "gen", op.Gen)
	id, err := ulid.ParseStrict(op.Block)
	if err != nil {
		return fmt.Errorf("uploader: op %s for %s/%s: %w", op.Op, op.Tenant, op.Block, err)
	}
	k, err := u.Config.Layout.Block(op.Tenant, id)
	if err != nil {
		return err
	}
	b, known, err := u.Store.GetBlock(ctx, op.Tenant, op.Block)
	if err != nil {
		return err
	}
	if op.Op == messages.OpDeleteStray {
		return u.deleteStray(ctx, k, b, known, op, log)
	}
	want := map[messages.OpKind][]records.BlockState{
		messages.OpPublish: {records.BlockLive},
		messages.OpMark:    {records.BlockRetiring},
		messages.OpDelete:  {records.BlockDeleted, records.BlockDiscarded},
	}[op.Op]
	if !known || b.Gen != op.Gen || !hasState(b.State, want) {
		log.WarnContext(ctx, "stale block op dropped", "recordGen", b.Gen, "recordState", b.State, "known", known)
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
	default:
		return u.delete(ctx, k, b, log)
	}
}

func hasState(s records.BlockState, want []records.BlockState) bool {
	for _, w := range want {
		if s == w {
			return true
		}
	}
	return false
}

func (u Uploader) publish(ctx context.Context, k blockkey.Key, b records.Block, log *slog.Logger) error {
	if b.Published {
		return nil
	}
	vid, err := u.putOnce(ctx, k.Object(blockkey.MetaFile), []byte(b.Meta), true)
	if err != nil {
		return err
	}
	if err := u.step(ctx, "uploader.meta-written", b.Key()); err != nil {
		return err
	}
	if err := u.Store.MarkPublished(ctx, b.Tenant, b.ID, b.Gen, vid, u.now()); err != nil {
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
	id, _ := ulid.ParseStrict(b.ID)
	body, err := blockmeta.NewDeletionMark(id, u.now()).Marshal()
	if err != nil {
		return err
	}
	vid, err := u.putOnce(ctx, k.Object(blockkey.DeletionMarkFile), body, false)
	if err != nil {
		return err
	}
	if err := u.step(ctx, "uploader.mark-written", b.Key()); err != nil {
		return err
	}
	if err := u.Store.RecordMark(ctx, b.Tenant, b.ID, b.Gen, vid, u.now()); err != nil {
		if records.IsConditionLost(err) {
			log.WarnContext(ctx, "block moved on while marking", "lost", err)
			return nil
		}
		return err
	}
	log.InfoContext(ctx, "deletion mark written", "markVersion", vid)
	return nil
}

// putOnce writes key with If-None-Match: an object never overwrites
// another. When the key exists (an earlier attempt of this op), its version
// is adopted — for meta.json only if it holds the same bytes.
func (u Uploader) putOnce(ctx context.Context, key string, body []byte, sameBytes bool) (string, error) {
	res, err := u.S3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(u.Config.Bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		IfNoneMatch: aws.String("*"), ContentLength: aws.Int64(int64(len(body))),
	})
	if err == nil {
		return aws.ToString(res.VersionId), nil
	}
	if !isPreconditionFailed(err) {
		return "", fmt.Errorf("put %s: %w", key, err)
	}
	head, herr := u.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(u.Config.Bucket), Key: aws.String(key)})
	if herr != nil {
		return "", fmt.Errorf("put %s: exists, and head failed: %w", key, herr)
	}
	sum := md5.Sum(body)
	if sameBytes && strings.Trim(aws.ToString(head.ETag), `"`) != hex.EncodeToString(sum[:]) {
		return "", fmt.Errorf("put %s: the key already holds different bytes (etag %s); refusing to adopt it", key, aws.ToString(head.ETag))
	}
	return aws.ToString(head.VersionId), nil
}

func (u Uploader) delete(ctx context.Context, k blockkey.Key, b records.Block, log *slog.Logger) error {
	vs := b.AllVersions()
	for _, v := range vs {
		if err := u.deleteVersion(ctx, k.Object(v.RelPath), v.VersionID); err != nil {
			return err
		}
	}
	log.InfoContext(ctx, "block deleted", "versions", len(vs), "state", b.State)
	return nil
}

func (u Uploader) deleteVersion(ctx context.Context, key, vid string) error {
	if vid == "" {
		return fmt.Errorf("delete %s: refusing a delete without a VersionId", key)
	}
	_, err := u.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(u.Config.Bucket), Key: aws.String(key), VersionId: aws.String(vid)})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s version %s: %w", key, vid, err)
	}
	return nil
}

// deleteStray deletes versions no record names. A version the block's
// record names is never deleted, whatever the op says.
func (u Uploader) deleteStray(ctx context.Context, k blockkey.Key, b records.Block, known bool, op messages.BlockOp, log *slog.Logger) error {
	n := 0
	for _, v := range op.Stray {
		if known && b.Names(v.RelPath, v.VersionID) {
			log.WarnContext(ctx, "stray delete names a recorded version; keeping it", "file", v.RelPath, "version", v.VersionID)
			continue
		}
		if err := u.deleteVersion(ctx, k.Object(v.RelPath), v.VersionID); err != nil {
			return err
		}
		n++
	}
	log.InfoContext(ctx, "stray versions deleted", "versions", n)
	return nil
}
