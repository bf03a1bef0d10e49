package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/blockstore"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/records"
)

// Compact runs compaction jobs (DESIGN.md §4.2): lease, read sources by
// their recorded VersionIds, compact one partition, upload with
// If-None-Match, commit fenced on the group version and the lease.
type Compact struct{ *Deps }

// Handle processes a batch from the compaction-jobs queue.
func (c Compact) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return eachMessage(ctx, c.Logger, "compact", ev, func(ctx context.Context, m events.SQSMessage) error {
		msg, err := messages.Decode(m.Body)
		if err != nil {
			return fmt.Errorf("compact: message %s: %w", m.MessageId, err)
		}
		job, ok := msg.(messages.Job)
		if !ok {
			return fmt.Errorf("compact: unexpected %T on the compaction-jobs queue", msg)
		}
		return c.Run(ctx, job)
	}), nil
}

// Run executes one job. A job that finds its partition done, leased by a
// live worker, or its version no longer current acknowledges and stops.
func (c Compact) Run(ctx context.Context, job messages.Job) error {
	g, err := planning.ParseGroupKey(job.Group)
	if err != nil {
		return err
	}
	ref := fmt.Sprintf("%s/p%d", records.VersionRef(job.Tenant, g, job.Version), job.Partition)
	log := c.Logger.With("tenant", job.Tenant, "group", job.Group, "version", job.Version, "partition", job.Partition)
	owner := c.owner()
	now := c.now()
	if err := c.step(ctx, "compact.before-lease", ref); err != nil {
		return err
	}
	attempt, err := c.Store.Lease(ctx, job.Tenant, g, job.Version, job.Partition, owner, now, now.Add(c.Config.LeaseDuration))
	if err != nil {
		if records.IsConditionLost(err) {
			log.InfoContext(ctx, "job not taken: partition done, leased by a live worker, or version no longer current", "lost", err)
			return nil
		}
		return err
	}
	log = log.With("attempt", attempt, "owner", owner)
	log.InfoContext(ctx, "lease taken")
	head, ok, err := c.Store.GetGroup(ctx, job.Tenant, g)
	if err != nil {
		return err
	}
	if !ok || head.Version != job.Version {
		log.InfoContext(ctx, "version moved on after the lease; stopping")
		return nil
	}
	srcs, err := c.Store.GetBlocks(ctx, job.Tenant, head.Sources)
	if err != nil {
		return err
	}
	if len(srcs) != len(head.Sources) {
		return fmt.Errorf("compact %s: %d of %d source records missing", ref, len(head.Sources)-len(srcs), len(head.Sources))
	}
	if err := c.step(ctx, "compact.after-read", ref); err != nil {
		return err
	}
	out, err := c.compact(ctx, head, job.Partition, srcs, log)
	if err != nil {
		return fmt.Errorf("compact %s: %w", ref, err)
	}
	if err := c.step(ctx, "compact.before-commit", ref); err != nil {
		return err
	}
	var ranges []planning.GroupKey
	if out != nil {
		ranges = memberRanges(c.Config.Policy, g.Stream, g.Level, out.MinT, out.MaxT)
	}
	if err := c.Store.Commit(ctx, job.Tenant, g, job.Version, job.Partition, owner, out, ranges, c.now()); err != nil {
		if !records.IsConditionLost(err) {
			return err
		}
		// A loser deletes nothing itself: a winner may have adopted its
		// objects. The cleaner sweeps orphans once the version is final.
		log.WarnContext(ctx, "commit lost: version superseded or lease taken over", "lost", err)
		return c.Send.Cleaner(ctx, messages.CleanerNote{Tenant: job.Tenant, Group: job.Group, Version: job.Version, Why: "lost-commit", Nonce: owner})
	}
	log.InfoContext(ctx, "partition committed", "output", job.Output, "empty", out == nil)
	return c.Send.Cleaner(ctx, messages.CleanerNote{Tenant: job.Tenant, Group: job.Group, Version: job.Version, Why: "commit", Nonce: fmt.Sprint(job.Partition)})
}

func (c Compact) owner() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return c.Owner + "#" + hex.EncodeToString(b[:])
}

// compact downloads the sources partition p needs into a scratch
// directory, compacts, uploads the output and returns its PENDING record
// (nil for an empty partition). The scratch directory is removed on every
// path.
func (c Compact) compact(ctx context.Context, head records.Group, p int, srcs []records.Block, log interface {
	InfoContext(context.Context, string, ...any)
}) (*records.Block, error) {
	if len(srcs) == 0 {
		return nil, fmt.Errorf("version %s has no sources", head.Ref())
	}
	// The output carries its stream's labels (without the replica labels)
	// and resolution, as recorded when the stream's first block came.
	for _, b := range srcs {
		if b.Stream != head.Key.Stream {
			return nil, fmt.Errorf("version %s: source %s is of stream %s, not the group's: refusing to mix streams", head.Ref(), b.Key(), b.Stream)
		}
	}
	sr, ok, err := c.Store.GetStream(ctx, head.Tenant, head.Key.Stream)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("version %s: stream %s has no record", head.Ref(), head.Key.Stream)
	}
	st := sr.Stream()
	scratch, err := os.MkdirTemp(c.Config.ScratchDir, "sluice-job-")
	if err != nil {
		return nil, fmt.Errorf("scratch dir: %w", err)
	}
	defer os.RemoveAll(scratch)

	// Every source gets a directory with its meta.json, so all partitions
	// of a version describe the same sources and time range; only those
	// that can hold series of p get their index and chunks (compaction
	// never opens the others).
	var dirs []string
	skipped := 0
	started := time.Now()
	for _, b := range srcs {
		meta, err := blockmeta.Parse([]byte(b.Meta), b.Key())
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(scratch, "src", b.ID)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("source %s: %w", b.Key(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, blockkey.MetaFile), []byte(b.Meta), 0o644); err != nil {
			return nil, fmt.Errorf("source %s: %w", b.Key(), err)
		}
		dirs = append(dirs, dir)
		if !compaction.SourceHoldsPartition(meta, p, head.Partitions) {
			skipped++
			continue
		}
		id, err := ulid.ParseStrict(b.ID)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", b.Key(), err)
		}
		k, err := c.Config.Layout.Block(b.Tenant, id)
		if err != nil {
			return nil, err
		}
		objs := make([]blockstore.Object, 0, len(b.Files))
		for _, f := range b.Files {
			if !tsdbFile(f.RelPath) {
				continue // another writer's file (e.g. index.cache.json): not block data
			}
			objs = append(objs, blockstore.Object{Key: k.Object(f.RelPath), VersionID: f.VersionID, Size: f.Size, RelPath: f.RelPath})
		}
		if err := blockstore.Download(ctx, c.S3, c.Config.Bucket, objs, dir, c.Config.DownloadParallelism); err != nil {
			return nil, fmt.Errorf("download source %s: %w", b.Key(), err)
		}
	}
	log.InfoContext(ctx, "sources downloaded", "downloaded", len(dirs)-skipped, "skippedByPartitionInfo", skipped, "took", time.Since(started).String())
	outID := outputULID(head, p)
	res, err := compaction.Compact(ctx, c.Logger, compaction.Job{
		SourceDirs: dirs, Partition: p, PartitionCount: head.Partitions, ULID: outID,
		OutDir: filepath.Join(scratch, "out"), ThanosLabels: st.Labels, Resolution: st.Resolution,
		PartitionInfo: &blockmeta.PartitionInfo{
			PartitionedGroupID: groupID(head), PartitionCount: head.Partitions, PartitionID: p,
			PartitionedGroupCreationTime: head.CreatedAt,
		},
	})
	if err != nil {
		return nil, err
	}
	if res.Empty {
		log.InfoContext(ctx, "partition holds no series")
		return nil, nil
	}
	k, err := c.Config.Layout.Block(head.Tenant, outID)
	if err != nil {
		return nil, err
	}
	var rels []string
	for _, f := range res.Meta.Thanos.Files {
		if f.RelPath != blockkey.MetaFile {
			rels = append(rels, f.RelPath)
		}
	}
	up, err := blockstore.Upload(ctx, c.S3, c.Config.Bucket, k.BlockPrefix(), res.Dir, rels, blockstore.UploadOptions{})
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", k.BlockKey(), err)
	}
	metaBody, err := res.Meta.Marshal()
	if err != nil {
		return nil, err
	}
	out := &records.Block{
		Tenant: head.Tenant, ID: outID.String(), Stream: head.Key.Stream, MinT: res.Meta.MinTime, MaxT: res.Meta.MaxTime, Level: head.Key.Level,
		State: records.BlockPending, Gen: 1, ProducedBy: fmt.Sprintf("%s/p%d", head.Ref(), p),
		Meta: string(metaBody), Series: res.NumSeries, Samples: res.NumSamples, UpdatedAt: c.now().UnixMilli(),
		Arrived: c.now().UnixMilli(),
	}
	if head.Partitions > 1 {
		out.PartitionCount, out.PartitionID = head.Partitions, p
	}
	for _, u := range up {
		out.Files = append(out.Files, records.ObjectVersion{RelPath: u.RelPath, VersionID: u.VersionID, Size: u.Size, ETag: u.ETag})
		if u.RelPath == blockkey.IndexFile {
			out.IndexBytes = uint64(u.Size)
		}
	}
	log.InfoContext(ctx, "partition compacted and uploaded", "series", res.NumSeries, "samples", res.NumSamples,
		"files", len(up), "took", time.Since(started).String())
	return out, nil
}

// groupID is Cortex's partitioned_group_id: a stable 32-bit id of the
// group version.
func groupID(g records.Group) uint32 {
	id := outputULID(g, 0)
	return uint32(id[10])<<24 | uint32(id[11])<<16 | uint32(id[12])<<8 | uint32(id[13])
}

// tsdbFile reports the files a TSDB block is read from.
func tsdbFile(rel string) bool {
	return rel == blockkey.IndexFile || rel == blockkey.TombstonesFile || strings.HasPrefix(rel, blockkey.ChunksDir+"/")
}
