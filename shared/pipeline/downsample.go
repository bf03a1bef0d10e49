package pipeline

// Downsampling through the same fenced protocol as compaction: a version
// over one block (with the sibling partitions it must be downsampled with,
// and the downsampled blocks its outputs replace), jobs that write Thanos'
// aggregate chunks into the block's stream at the coarser resolution, and
// a completion that keeps the block and its siblings — raw data stays
// until its own retention — and records that their downsample is
// published, the one thing that lets retention delete them.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/blockstore"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
)

// downsampleStream is the stream a downsample of a block of stream sr to
// res writes: the same labels at the coarser resolution.
func downsampleStream(sr records.StreamRecord, res int64) records.StreamRecord {
	target := stream.Stream{Labels: sr.Labels, Resolution: res}
	return records.StreamRecord{ID: target.ID(), Labels: sr.Labels, Resolution: res}
}

// downsampleDue is the resolution block b (of stream resolution res) is
// to be downsampled to under pol, and false when it is not, or when its
// downsample is recorded already.
func downsampleDue(pol planning.Policy, b records.Block, res int64) (int64, bool) {
	to, ok := pol.DownsampleTo(res, b.MinT, b.MaxT)
	return to, ok && b.Downsampled < to
}

// downsampleBlocks reads what planning a downsample group needs: its
// block, every block of the target stream registered in the ranges the
// block's range falls in and every block of its own stream in its own
// ranges (a replica or late block it is to be merged with first), each
// with its stream, resolution and compaction sources; and the target
// stream's record.
func (p Planner) downsampleBlocks(ctx context.Context, tenant string, g planning.GroupKey) ([]records.Block, []planning.Candidate, records.StreamRecord, error) {
	var target records.StreamRecord
	blocks, err := p.records().GetBlocks(ctx, tenant, []string{g.Block})
	if err != nil || len(blocks) == 0 {
		return nil, nil, target, err
	}
	src := blocks[0]
	sr, ok, err := p.records().GetStream(ctx, tenant, src.Stream)
	if err != nil {
		return nil, nil, target, err
	}
	if !ok {
		return nil, nil, target, fmt.Errorf("downsample of %s: stream %s has no record", src.Key(), src.Stream)
	}
	target = downsampleStream(sr, g.Resolution)
	seen := map[string]bool{src.ID: true}
	ranges := append(p.Config.Policy.MemberRanges(target.ID, src.Level, src.MinT, src.MaxT),
		p.Config.Policy.MemberRanges(src.Stream, src.Level, src.MinT, src.MaxT)...)
	for _, r := range ranges {
		in, err := p.records().RangeBlocks(ctx, tenant, r)
		if err != nil {
			return nil, nil, target, err
		}
		for _, b := range in {
			if !seen[b.ID] {
				seen[b.ID] = true
				blocks = append(blocks, b)
			}
		}
	}
	cands := candidates(blocks)
	byID := map[string]records.Block{}
	for _, b := range blocks {
		byID[b.ID] = b
	}
	for i := range cands {
		b := byID[cands[i].ID]
		addMeta(&cands[i], b)
		cands[i].Stream, cands[i].Resolution = b.Stream, g.Resolution
		if b.Stream == src.Stream {
			cands[i].Resolution = sr.Resolution
		}
	}
	return blocks, cands, target, nil
}

// noteDownsampled records that blocks of the target resolution already
// hold every source of the group's block (Decision.DownsampledBy).
func (p Planner) noteDownsampled(ctx context.Context, tenant string, g planning.GroupKey, blocks []records.Block, by []string) error {
	var src records.Block
	var holders []records.Block
	for _, b := range blocks {
		switch {
		case b.ID == g.Block:
			src = b
		case slices.Contains(by, b.ID):
			holders = append(holders, b)
		}
	}
	err := p.records().NoteDownsampled(ctx, src, g.Resolution, holders, p.now())
	if records.IsConditionLost(err) {
		p.Logger.InfoContext(ctx, "noting a block downsampled already lost its condition; the retention pass asks again while it holds the block", logattr.Group(tenant, g), "lost", err)
		return nil
	}
	if err == nil {
		p.Logger.InfoContext(ctx, "block downsampled already: blocks of the target resolution hold all its sources", logattr.Group(tenant, g), "by", by)
	}
	return err
}

// downsample runs one job of a downsample version: the index of its block
// downloaded, its chunks streamed from S3, the downsampled block written
// to scratch with its labels (without the replica labels) and uploaded.
// A version downsamples each of its members in m jobs
// (planning.SizeDownsample); with m > 1, job j of a member keeps the
// member's series of partition j of m: its output is partition j·n + p of
// m·n when the member is partition p of n (downsampleJob.output), which
// is what the planner's holding rules and Cortex's readers take it for. A
// partition with no series gives an empty output.
func (c Compact) downsample(ctx context.Context, head records.Group, parts []int, srcs []records.Block, log jobLog) ([]records.Committed, error) {
	if len(parts) != 1 {
		return nil, fmt.Errorf("version %s: a downsample job runs one partition, not %v", head.Ref(), parts)
	}
	part := parts[0]
	job, err := downsampleJobOf(head, srcs, part)
	if err != nil {
		return nil, err
	}
	src, m := job.src, job.m
	outCount, outID := job.output()
	var keep func(labels.Labels) bool
	if m > 1 {
		keep = func(lset labels.Labels) bool { return compaction.PartitionOf(lset, outCount) == outID }
	}
	sr, ok, err := c.records().GetStream(ctx, head.Tenant, src.Stream)
	if err != nil {
		return nil, err
	}
	if !ok || src.Stream != head.Key.Stream {
		return nil, jobError{fmt.Errorf("version %s: block %s is of stream %s, which has no record or is not the group's", head.Ref(), src.Key(), src.Stream)}
	}
	target := downsampleStream(sr, head.Key.Resolution)
	scratch, err := os.MkdirTemp(c.Config.ScratchDir, "sluice-downsample-")
	if err != nil {
		return nil, fmt.Errorf("scratch dir: %w", err)
	}
	defer os.RemoveAll(scratch)
	started := time.Now()
	// The source is read for output partition outID of outCount, which
	// it always holds; asked for job partition part of m, the download's
	// skip rule would leave out the index of a partitioned source whose
	// partition holds none of part of m by hash (chaos seeds 221, 274:
	// the job then failed on the missing index and the block was
	// quarantined).
	asOutput := head
	asOutput.Partitions = outCount
	dirs, indexRead, err := c.download(ctx, asOutput, []int{outID}, []records.Block{src}, scratch, log)
	if err != nil {
		return nil, err
	}
	chunks, err := newSourceChunks(c.S3, c.Config.Bucket, c.Config.Layout, []records.Block{src})
	if err != nil {
		return nil, err
	}
	br, err := compaction.OpenStreamed(ctx, c.Logger, dirs[0], downsample.NewPool(), chunks.open)
	if err != nil {
		return nil, jobError{err}
	}
	defer br.Close()
	meta, err := blockmeta.Parse([]byte(src.Meta), src.Key())
	if err != nil {
		return nil, jobError{err}
	}
	if meta.Thanos == nil {
		meta.Thanos = &blockmeta.Thanos{}
	}
	meta.Thanos.Labels = target.Labels
	outULID := outputULID(head, part)
	res, err := downsample.BlockSeries(ctx, c.Logger, br, meta, filepath.Join(scratch, "out"), outULID, head.Key.Resolution, keep)
	if err != nil {
		// A source whose index cannot be decoded is to blame, and is
		// quarantined, not the group (chaos seed 1493: a corrupt upload
		// downsampled whole failed as the group's own error).
		return nil, jobError{compaction.Blame(ctx, err, br)}
	}
	if res.Meta.Stats.NumSeries == 0 {
		log.InfoContext(ctx, "no series of the block in this partition; nothing to downsample", "outputPartition", outID, "of", outCount)
		return []records.Committed{{Partition: part}}, nil
	}
	if m > 1 {
		res.Meta.SetPartitionInfo(&blockmeta.PartitionInfo{
			PartitionedGroupID: groupID(head), PartitionCount: outCount, PartitionID: outID, PartitionedGroupCreationTime: head.CreatedAt,
		})
	}
	files, err := blockmeta.GatherFiles(res.Dir)
	if err != nil {
		return nil, err
	}
	var rels []string
	for _, f := range files {
		if f.RelPath != blockmeta.MetaFilename {
			rels = append(rels, f.RelPath)
		}
	}
	res.Meta.Thanos.Files = files
	k, err := c.Config.Layout.Block(head.Tenant, outULID)
	if err != nil {
		return nil, err
	}
	up, err := blockstore.Upload(ctx, c.S3, c.Config.Bucket, k.BlockPrefix(), res.Dir, rels, c.uploadOptions())
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", k.BlockKey(), err)
	}
	out, err := c.outputRecord(head, part, target.ID, src.Level, k, res.Meta, up)
	if err != nil {
		return nil, err
	}
	// A partition of a partitioned block holds only that partition's
	// series: so does its downsample, which the target stream's
	// compaction then reads as such.
	out.PartitionCount, out.PartitionID = src.PartitionCount, src.PartitionID
	if m > 1 {
		out.PartitionCount, out.PartitionID = outCount, outID
	}
	var written uint64
	for _, u := range up {
		written += uint64(max(u.Size, 0))
	}
	streamed := chunks.stats()
	took := time.Since(started)
	log.InfoContext(ctx, "block downsampled and uploaded", "resolution", stream.ResolutionName(head.Key.Resolution), "series", res.Meta.Stats.NumSeries,
		"rawSamples", res.RawSamples, "samplesPerSecond", uint64(float64(res.RawSamples)/max(took.Seconds(), 1e-3)),
		"readBytes", indexRead+uint64(streamed.Bytes), "writtenBytes", written, "took", took.String())
	return []records.Committed{{Partition: part, Output: out}}, nil
}

// downsampleJob is what one job of a downsample version does: keep the
// series of partition j of m of block src, one of the version's members
// (the raw blocks of the group's stream among its sources: its block, and
// the sibling partitions downsampled with it, planning.downsampleSet).
// The version's partitions are m for each member, members in ID order.
type downsampleJob struct {
	src  records.Block
	j, m int
}

// downsampleMembers are the raw blocks a downsample version downsamples,
// in ID order: its sources of the group's own stream (the others are
// blocks of the target resolution it replaces).
func downsampleMembers(head records.Group, srcs []records.Block) []records.Block {
	var out []records.Block
	for _, b := range srcs {
		if b.Stream == head.Key.Stream {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b records.Block) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// downsampleJobOf is job part of version head over srcs.
func downsampleJobOf(head records.Group, srcs []records.Block, part int) (downsampleJob, error) {
	members := downsampleMembers(head, srcs)
	if !slices.ContainsFunc(members, func(b records.Block) bool { return b.ID == head.Key.Block }) ||
		head.Partitions%len(members) != 0 || part < 0 || part >= head.Partitions {
		return downsampleJob{}, fmt.Errorf("version %s: block %s is not among its %d members, or partition %d is not one of %d jobs, %d per member",
			head.Ref(), head.Key.Block, len(members), part, head.Partitions, head.Partitions/max(len(members), 1))
	}
	m := head.Partitions / len(members)
	return downsampleJob{src: members[part/m], j: part % m, m: m}, nil
}

// output is the job's output partition: j·n + p of m·n when its block is
// partition p of n (its series hash to p mod n, so those of partition j
// of m to p + n·j mod m·n), j of m when the block is not partitioned.
func (d downsampleJob) output() (count, id int) {
	n, p := max(d.src.PartitionCount, 1), d.src.PartitionID
	if d.src.PartitionCount <= 1 {
		p = 0
	}
	return n * d.m, p + n*d.j
}

// keepSource ends a downsample version's claim on its block once the
// output is published: CLAIMED → LIVE with the downsample recorded
// (records.KeepSource). A lost condition means a rival did it.
func (c Cleaner) keepSource(ctx context.Context, head records.Group, b records.Block, now time.Time) error {
	if err := c.step(ctx, "cleaner.before-keep", b.Key()); err != nil {
		return err
	}
	if _, err := c.records().KeepSource(ctx, head.Ref(), b, head.Key.Resolution, now); err != nil && !records.IsConditionLost(err) {
		return err
	}
	return nil
}

// planDownsamples asks the planner to look at what a retired version's
// outputs lead to beyond its own group's parent: the downsample of every
// output that is due one. A downsample version's group has no parent: it
// asks for every range group its block, the blocks it retired and its
// output are members of, in their own streams — a late block waited in
// one of them while the version held its block.
func (c Cleaner) planDownsamples(ctx context.Context, head records.Group, parts []records.Partition) error {
	pol := c.overrides(ctx).Policy(head.Tenant, c.Config.Policy)
	if !pol.Downsample {
		return nil // and reads nothing: the request budget of a bucket that does not downsample stays as it was
	}
	outs, err := c.outputs(ctx, head, parts)
	if err != nil {
		return err
	}
	why := "after " + head.Ref()
	var reqs []messages.PlanRequest
	plan := func(g planning.GroupKey) {
		reqs = append(reqs, messages.PlanRequest{Tenant: head.Tenant, Group: g.String(), Why: why})
	}
	resolution := map[string]int64{}
	for _, b := range outs {
		if b.State != protocol.BlockLive && b.State != protocol.BlockClaimed {
			// A CLAIMED output (the next level took it before this step)
			// is asked for all the same: the planner waits for it, and
			// gives up only once it is retired (chaos seed 10: a partition
			// of a late block's version was never downsampled).
			continue
		}
		res, ok := resolution[b.Stream]
		if !ok {
			sr, found, err := c.records().GetStream(ctx, head.Tenant, b.Stream)
			if err != nil {
				return err
			}
			if found {
				res = sr.Resolution
			}
			resolution[b.Stream] = res
		}
		if to, due := downsampleDue(pol, b, res); due {
			plan(planning.DownsampleKey(b.Stream, b.MinT, b.ID, to))
		}
	}
	if head.Key.IsDownsample() {
		srcs, err := c.records().GetBlocks(ctx, head.Tenant, head.Sources)
		if err != nil {
			return err
		}
		for _, b := range append(srcs, outs...) {
			for _, g := range pol.MemberRanges(b.Stream, b.Level, b.MinT, b.MaxT) {
				plan(g)
			}
		}
	}
	return c.Send.Plans(ctx, reqs)
}
