package planning

import (
	"slices"
	"sort"
	"time"
)

// Thanos' resolutions and downsampling spans (pkg/compact/downsample:
// ResLevel1, ResLevel2, ResLevel1DownsampleRange, ResLevel2DownsampleRange):
// a block is downsampled only once it spans enough to give each series
// about two aggregate chunks at the coarser resolution.
const (
	Resolution5m                    = int64(5 * time.Minute / time.Millisecond)
	Resolution1h                    = int64(time.Hour / time.Millisecond)
	DefaultDownsampleRawSpan        = 40 * time.Hour
	DefaultDownsampleFiveMinuteSpan = 10 * 24 * time.Hour
)

// DownsampleRecheck is how soon a downsample group that waits for a busy
// block is planned again: the work that holds the block re-plans its own
// groups, not this one.
const DownsampleRecheck = 10 * time.Minute

// DownsampleTo is the resolution a block of resolution res (ms, 0: raw)
// over [minT, maxT) is downsampled to, and false when it is not (the
// policy does not downsample, the block is too short, or it is at 1h).
func (p Policy) DownsampleTo(res, minT, maxT int64) (int64, bool) {
	p = p.Defaults()
	if !p.Downsample {
		return 0, false
	}
	span := time.Duration(maxT-minT) * time.Millisecond
	switch {
	case res == 0 && span >= p.DownsampleRawSpan:
		return Resolution5m, true
	case res == Resolution5m && span >= p.DownsampleFiveMinuteSpan:
		return Resolution1h, true
	}
	return 0, false
}

// DownsampleKey is the group that downsamples block id of stream st,
// starting at minT, to resolution res.
func DownsampleKey(st string, minT int64, id string, res int64) GroupKey {
	return GroupKey{Stream: st, RangeStart: minT, Block: id, Resolution: res}
}

// planDownsample decides the downsampling of block g.Block to
// g.Resolution. blocks are the block itself and the blocks of the target
// resolution's stream around it.
//
// As Thanos decides: the block is downsampled unless blocks of the target
// resolution already hold every one of its compaction sources. The
// version's sources are the block — which it keeps: raw data stays until
// its own retention — and every target-resolution block it overlaps,
// each of which must hold only sources of this block (an earlier
// downsample of a block this one has since absorbed, a late block merged
// in): the version retires them when its output is published, so the
// target stream never holds two blocks of the same data.
func (p Policy) planDownsample(g GroupKey, blocks []Candidate, now time.Time) Decision {
	i := slices.IndexFunc(blocks, func(b Candidate) bool { return b.ID == g.Block })
	if i < 0 {
		return Decision{Wait: "block " + g.Block + " is not registered"}
	}
	src := blocks[i]
	recheck := now.Add(DownsampleRecheck).UnixMilli()
	switch {
	case src.Busy:
		return Decision{Wait: "block " + src.ID + " is busy with another group", ClosesAt: recheck}
	case !src.Plannable:
		return Decision{Wait: "block " + src.ID + " is not live, published and unclaimed"}
	}
	if to, ok := p.DownsampleTo(src.Resolution, src.MinT, src.MaxT); !ok || to != g.Resolution {
		return Decision{Wait: "block " + src.ID + " is not to be downsampled to this resolution"}
	}
	own := src.Sources
	if len(own) == 0 {
		own = []string{src.ID}
	}
	// Partitions of one block share its compaction sources but not its
	// series: a block of the target resolution holds src's data only if
	// its series include src's (within), and is replaced by src's
	// downsample only if src's include its own.
	held := map[string]bool{}
	var holders, overlapping, unmerged []Candidate
	for _, b := range blocks {
		if b.Stream == src.Stream {
			// A block of src's own stream over the same time and series
			// (a replica, a late block) is merged with it by its range's
			// compaction: downsampling both would write two blocks of the
			// same windows, which the target stream cannot compact.
			if b.ID != src.ID && (b.Plannable || b.Busy) && b.MinT < src.MaxT && src.MinT < b.MaxT &&
				Holds(b.PartitionCount, b.PartitionID, src.PartitionID, max(src.PartitionCount, 1)) {
				unmerged = append(unmerged, b)
			}
			continue
		}
		if within(src.PartitionCount, src.PartitionID, b.PartitionCount, b.PartitionID) {
			shares := false
			for _, s := range b.Sources {
				held[s] = true
				shares = shares || slices.Contains(own, s)
			}
			if shares {
				holders = append(holders, b)
			}
		}
		if b.MinT < src.MaxT && src.MinT < b.MaxT && Holds(b.PartitionCount, b.PartitionID, src.PartitionID, src.PartitionCount) {
			overlapping = append(overlapping, b)
		}
	}
	if !slices.ContainsFunc(own, func(s string) bool { return !held[s] }) {
		d := Decision{Wait: "blocks of this resolution already hold every source of block " + src.ID}
		for _, b := range holders {
			if b.Busy || !b.Plannable {
				d.ClosesAt = recheck
				d.Wait += "; " + b.ID + " is busy"
				return d
			}
			d.DownsampledBy = append(d.DownsampledBy, b.ID)
		}
		return d
	}
	if len(unmerged) > 0 {
		// Asked again when the compaction that merges them retires src
		// (its output is downsampled instead), or at the recheck.
		return Decision{Wait: "block " + src.ID + " overlaps block " + unmerged[0].ID + " of its own stream, which its range's compaction merges it with first", ClosesAt: recheck}
	}
	m, fits, why := p.SizeDownsample(src)
	if !fits {
		return Decision{Wait: "the downsample of block " + src.ID + " does not fit its jobs: " + why}
	}
	srcs := []Candidate{src}
	for _, b := range overlapping {
		if slices.ContainsFunc(b.Sources, func(s string) bool { return !slices.Contains(own, s) }) ||
			!within(b.PartitionCount, b.PartitionID, src.PartitionCount, src.PartitionID) {
			// Downsampling would write a second block of some of b's
			// series and range; b goes when a compaction of the raw
			// range replaces src.
			return Decision{Wait: "block " + src.ID + " overlaps downsampled block " + b.ID + ", which holds data it does not"}
		}
		if b.Busy || !b.Plannable {
			return Decision{Wait: "downsampled block " + b.ID + " it replaces is busy", ClosesAt: recheck}
		}
		srcs = append(srcs, b)
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].ID < srcs[j].ID })
	return Decision{Sources: srcs, Partitions: m}
}

// EstimateDownsample sizes one of the m jobs that downsample block c, each
// keeping the share of its series whose hash lands in its partition: it
// reads the whole block (index downloaded, chunks streamed, a series of
// another partition skipped) and writes its share of the downsampled
// block on local disk before uploading it. The output is taken as half
// the block, far more than the aggregates of 5m or 1h windows come to
// (docs/block-engine.md). More partitions shrink a job's output, scratch
// and series, not what it reads.
func (p Policy) EstimateDownsample(c Candidate, m int) JobEstimate {
	p = p.Defaults()
	m = max(m, 1)
	size := c.IndexBytes + c.ChunkBytes
	out := size / 2 / uint64(m)
	e := JobEstimate{Partitions: m, Opened: 1, ReadBytes: size, OutputBytes: out, ScratchBytes: c.IndexBytes + out, Series: c.Series / uint64(m),
		Outputs: 1}
	e.Duration = time.Duration(float64(e.ReadBytes+e.OutputBytes) / float64(p.Throughput) * float64(time.Second))
	return e
}

// SizeDownsample picks m, the number of jobs that downsample block c, as
// Size picks a compaction's N: the smallest power of two up to
// MaxPartitions at which each job's share of the block's series is
// within MaxSeriesPerPartition (at least JobSeriesLimit with SingleBlock)
// and its index share within MaxIndexBytesPerPartition, raised until the
// jobs fit (EstimateDownsample, Fits). Job j writes partition j of m of
// c's series (of c's own partition, when c is one). When no m fits, fits
// is false and why says what is still over at MaxPartitions: a block too
// big to read within one job's time waits, and retention holds it.
func (p Policy) SizeDownsample(c Candidate) (m int, fits bool, why string) {
	p = p.Defaults()
	if p.SingleBlock {
		p.MaxSeriesPerPartition = max(p.MaxSeriesPerPartition, JobSeriesLimit)
	}
	m = 1
	for m < p.MaxPartitions && (c.Series > uint64(m)*p.MaxSeriesPerPartition || c.IndexBytes > uint64(m)*p.MaxIndexBytesPerPartition) {
		m *= 2
	}
	for k := m; k <= p.MaxPartitions; k *= 2 {
		ok, reason := p.Fits(p.EstimateDownsample(c, k))
		if ok {
			return k, true, ""
		}
		why = reason // what is still over at the most partitions
	}
	return m, false, why
}

// within reports whether every series of partition p of n (n ≤ 1: every
// series) is in partition q of c (c ≤ 1: every series). Partition q of c
// holds the series whose hash % c == q, so with powers of two it holds
// all of partition p of n exactly when c divides n and p % c == q.
func within(n, p, c, q int) bool {
	switch {
	case c <= 1:
		return true
	case n <= 1 || !powerOfTwo(n) || !powerOfTwo(c) || n < c:
		return false
	}
	return p%c == q
}
