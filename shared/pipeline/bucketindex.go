package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/bucketindex"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/s3errors"
)

// bucketIndexKind is the "sluice" field of spec.BucketIndexEvent.
const bucketIndexKind = "bucket-index"

// ErrIndexRaced is a bucket index write that found the index changed
// since it was read: another writer got there first. The request is
// retried, and the retry builds from the records as they are then.
var ErrIndexRaced = errors.New("the bucket index changed while it was rebuilt")

// indexRecords is what an index write reads.
type indexRecords interface {
	TenantBlocks(ctx context.Context, tenant string) ([]records.Block, error)
}

// indexKey is where a tenant's bucket index lives.
func (d *Deps) indexKey(tenant string) string {
	return d.Config.Layout.TenantPrefix(tenant) + bucketindex.File
}

// WriteIndex writes a tenant's bucket index from its block records, never
// from a LIST. Requests of one tenant are one FIFO group, so one writer
// runs at a time, and each builds from the records as they are when it
// runs, so a later write never holds older records than an earlier one.
// The PUT is conditional on the index it replaces (If-Match on the ETag
// read just before, If-None-Match when there was none), so a writer that
// was slowed after reading — a zombie of a timed-out run — can never put
// an older index over a newer one. The replaced version is then deleted by
// its VersionId. The index carries the sum of its content as metadata; a
// scheduled request that finds the index already saying what it would
// write, and young enough, keeps it (keepIndex).
func (u Uploader) WriteIndex(ctx context.Context, r messages.IndexRequest) error {
	if u.Config.BucketIndex == "" {
		u.Logger.WarnContext(ctx, "bucket index request dropped: SLUICE_BUCKET_INDEX is off", logattr.Tenant(r.Tenant))
		return nil
	}
	key := u.indexKey(r.Tenant)
	head, err := u.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(u.Config.Bucket), Key: aws.String(key)})
	var etag, prev string
	switch {
	case err == nil:
		etag, prev = aws.ToString(head.ETag), aws.ToString(head.VersionId)
	case s3errors.IsNotFound(err):
	default:
		return fmt.Errorf("bucket index of %s: head %s: %w", r.Tenant, key, err)
	}
	var st indexRecords = u.Store
	blocks, err := st.TenantBlocks(ctx, r.Tenant)
	if err != nil {
		return err
	}
	idx, err := bucketindex.Build(u.Config.BucketIndex, blocks, u.now())
	if err != nil {
		return err
	}
	sum, err := bucketindex.ContentSum(idx)
	if err != nil {
		return err
	}
	if r.Scheduled && head != nil {
		if age, keep := u.keepIndex(head, sum); keep {
			u.Logger.InfoContext(ctx, "bucket index unchanged; kept", logattr.Tenant(r.Tenant), "key", key,
				"blocks", len(idx.Blocks), "age", age.String(), "maxAge", u.Config.BucketIndexMaxAge.String(), "why", r.Why)
			return nil
		}
	}
	body, err := bucketindex.Encode(idx)
	if err != nil {
		return err
	}
	if err := u.step(ctx, "uploader.before-index-put", r.Tenant); err != nil {
		return err
	}
	in := &s3.PutObjectInput{Bucket: aws.String(u.Config.Bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentType: aws.String("application/gzip"), Metadata: map[string]string{
			bucketindex.MetadataContentSum: sum, bucketindex.MetadataUpdatedAt: strconv.FormatInt(idx.UpdatedAt, 10)}}
	if etag != "" {
		in.IfMatch = aws.String(etag)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := u.S3.PutObject(ctx, in)
	if s3errors.IsPreconditionFailed(err) {
		return fmt.Errorf("bucket index of %s: %w", r.Tenant, ErrIndexRaced)
	}
	if err != nil {
		return fmt.Errorf("bucket index of %s: put %s: %w", r.Tenant, key, err)
	}
	if vid := aws.ToString(out.VersionId); prev != "" && prev != vid {
		if err := u.deleteVersion(ctx, key, prev); err != nil {
			return err
		}
	}
	u.Logger.InfoContext(ctx, "bucket index written", logattr.Tenant(r.Tenant), "key", key, "blocks", len(idx.Blocks),
		"deletionMarks", len(idx.BlockDeletionMarks), "bytes", len(body), "why", r.Why)
	return nil
}

// keepIndex tells whether a scheduled pass may leave the index head
// describes as it is, and how old it is: it says what the records say now
// (its content sum, put beside it when it was written, is sum), and it
// will still be younger than Config.BucketIndexMaxAge when the next pass
// comes, one Config.BucketIndexInterval from now. Its age is its
// updated_at's, also put beside it, which is what readers judge: a writer
// slowed between building and putting an index makes it older than its
// S3 modification time says. Keeping it is a write not made, never a
// condition weakened: the index in the bucket is the one this write would
// put, but for its updated_at. An index without the sum or the time
// (Cortex's or Mimir's own compactor wrote it) is always rewritten.
func (u Uploader) keepIndex(head *s3.HeadObjectOutput, sum string) (time.Duration, bool) {
	if head.Metadata[bucketindex.MetadataContentSum] != sum {
		return 0, false
	}
	updated, err := strconv.ParseInt(head.Metadata[bucketindex.MetadataUpdatedAt], 10, 64)
	if err != nil {
		return 0, false
	}
	age := u.now().Sub(time.Unix(updated, 0))
	return age, age+u.Config.BucketIndexInterval < u.Config.BucketIndexMaxAge
}

// indexTenants is what the scheduled index pass reads.
type indexTenants interface {
	Tenants(ctx context.Context) ([]string, error)
}

// BucketIndexes is the scheduled pass (every config.BucketIndexInterval)
// that asks for every tenant's bucket index: it shows new uploads and
// deletions, and keeps an index younger than config.BucketIndexMaxAge
// even when nothing changed; a change (a version's outputs published)
// asks for its tenant's at once.
func (c Cleaner) BucketIndexes(ctx context.Context) error {
	if c.Config.BucketIndex == "" {
		return nil
	}
	var st indexTenants = c.Store
	tenants, err := st.Tenants(ctx)
	if err != nil {
		return fmt.Errorf("bucket indexes: %w", err)
	}
	pass := c.now().Truncate(time.Minute).Unix()
	rs := make([]messages.IndexRequest, len(tenants))
	for i, t := range tenants {
		rs[i] = messages.IndexRequest{Tenant: t, Why: "schedule", Scheduled: true}
	}
	err = c.Send.Indexes(ctx, rs, fmt.Sprintf("pass%d", pass))
	c.Logger.InfoContext(ctx, "bucket index pass", "tenants", len(tenants), "err", err)
	return err
}

// indexChanged asks for a tenant's bucket index after a change readers
// must see (a version's outputs published, its sources marked).
func (c Cleaner) indexChanged(ctx context.Context, head records.Group) error {
	if c.Config.BucketIndex == "" {
		return nil
	}
	return c.Send.Index(ctx, messages.IndexRequest{Tenant: head.Tenant, Why: "retired " + head.Ref()}, head.Ref())
}
