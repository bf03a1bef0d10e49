package planning

import (
	"fmt"
	"maps"
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
// g.Resolution. blocks are the block itself, the blocks of its own stream
// around it and the blocks of the target resolution's stream around it.
//
// As Thanos decides: the block is downsampled unless blocks of the target
// resolution already hold every one of its compaction sources. The
// version's sources are the block — which it keeps: raw data stays until
// its own retention — and every target-resolution block it overlaps,
// each of which must hold only sources of this block (an earlier
// downsample of a block this one has since absorbed, a late block merged
// in): the version retires them when its output is published, so the
// target stream never holds two blocks of the same data. A block it
// replaces may be coarser than the block's partition (downsampleSet):
// the version then downsamples the block's sibling partitions with it.
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
	var holders []Candidate
	for _, b := range blocks {
		if b.Stream == src.Stream || !within(src.PartitionCount, src.PartitionID, b.PartitionCount, b.PartitionID) {
			continue
		}
		shares := false
		for _, s := range b.Sources {
			held[s] = true
			shares = shares || slices.Contains(own, s)
		}
		if shares {
			holders = append(holders, b)
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
	// Asked again when the compaction that merges them retires src (its
	// output is downsampled instead), or at the recheck.
	if d, ok := unmerged(src, blocks, recheck); ok {
		return d
	}
	members, replaced, wait := downsampleSet(src, own, blocks, recheck)
	if wait.Wait != "" {
		return wait
	}
	for _, mb := range members[1:] {
		if d, ok := unmerged(mb, blocks, recheck); ok {
			return d
		}
	}
	m := 1
	for _, mb := range members {
		k, fits, why := p.SizeDownsample(mb)
		if !fits {
			return Decision{Wait: "the downsample of block " + mb.ID + " does not fit its jobs: " + why}
		}
		m = max(m, k)
	}
	if jobs := m * len(members); jobs > p.MaxPartitions {
		return Decision{Wait: fmt.Sprintf("the downsample of block %s and its %d sibling partitions takes %d jobs, more than a version's %d",
			src.ID, len(members)-1, jobs, p.MaxPartitions)}
	}
	srcs := append(members, replaced...)
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].ID < srcs[j].ID })
	return Decision{Sources: srcs, Partitions: m * len(members)}
}

// downsampleSet finds what the downsample of block src replaces and what
// it must downsample with src to do so. The blocks of the target
// resolution that overlap src's time and series are replaced; each must
// hold only data of src's sources. One coarser than src's partition (the
// downsample of an earlier block of the same sources in fewer partitions)
// also holds series of src's sibling partitions (the other partitions of
// the version that made src): those siblings are downsampled in the same
// version, so that its outputs hold everything the blocks it retires
// held, and their own overlaps are replaced too. A sibling partition the
// version recorded as empty holds nothing and needs no block (chaos seed
// 1526: without this, the partition's downsample waited on the coarser
// block for ever, and the coarser stream's range on the downsample).
//
// members are src and the siblings, src first; when something must
// change first, wait says what.
func downsampleSet(src Candidate, own []string, blocks []Candidate, recheck int64) (members, replaced []Candidate, wait Decision) {
	n, pid := max(src.PartitionCount, 1), src.PartitionID
	if n == 1 {
		pid = 0
	}
	siblings := map[int]Candidate{}
	for _, b := range blocks {
		if n > 1 && b.Stream == src.Stream && b.ID != src.ID && b.PartitionCount == n && b.MinT == src.MinT && b.MaxT == src.MaxT &&
			sameSet(b.Sources, src.Sources) {
			siblings[b.PartitionID] = b
		}
	}
	need := map[int]bool{pid: true}
	seen := map[string]bool{}
	for grown := true; grown; {
		grown = false
		for _, b := range blocks {
			if b.Stream == src.Stream || seen[b.ID] || b.MinT >= src.MaxT || src.MinT >= b.MaxT || !holdsAny(b, need, n) {
				continue
			}
			seen[b.ID] = true
			if slices.ContainsFunc(b.Sources, func(s string) bool { return !slices.Contains(own, s) }) {
				// Downsampling would write a second block of some of b's
				// series and range; b goes when a compaction of the raw
				// range replaces src.
				return nil, nil, Decision{Wait: "block " + src.ID + " overlaps downsampled block " + b.ID + ", which holds data it does not"}
			}
			if b.Busy || !b.Plannable {
				return nil, nil, Decision{Wait: "downsampled block " + b.ID + " it replaces is busy", ClosesAt: recheck}
			}
			replaced = append(replaced, b)
			for r := range n {
				if !need[r] && Holds(b.PartitionCount, b.PartitionID, r, n) {
					need[r], grown = true, true
				}
			}
		}
	}
	members = []Candidate{src}
	for _, r := range slices.Sorted(maps.Keys(need)) {
		if r == pid {
			continue
		}
		sib, ok := siblings[r]
		switch {
		case !ok && slices.Contains(src.EmptyPartitions, r):
			continue
		case !ok:
			return nil, nil, Decision{Wait: fmt.Sprintf("block %s's downsample replaces blocks holding series of its sibling partition %d of %d, which has no block", src.ID, r, n),
				ClosesAt: recheck}
		case sib.Busy:
			return nil, nil, Decision{Wait: "sibling partition " + sib.ID + " is busy with another group", ClosesAt: recheck}
		case !sib.Plannable:
			return nil, nil, Decision{Wait: "sibling partition " + sib.ID + " is not live, published and unclaimed"}
		}
		members = append(members, sib)
	}
	return members, replaced, Decision{}
}

// holdsAny reports whether b can hold series of any of the residues of n.
func holdsAny(b Candidate, residues map[int]bool, n int) bool {
	for r := range residues {
		if Holds(b.PartitionCount, b.PartitionID, r, n) {
			return true
		}
	}
	return false
}

// unmerged is the wait, looked at again at recheck, for a block of mb's
// own stream over the same time and series (a replica, a late block),
// which its range's compaction merges with it: downsampling both would
// write two blocks of the same windows, which the target stream cannot
// compact.
func unmerged(mb Candidate, blocks []Candidate, recheck int64) (Decision, bool) {
	for _, b := range blocks {
		if b.Stream == mb.Stream && b.ID != mb.ID && (b.Plannable || b.Busy) && b.MinT < mb.MaxT && mb.MinT < b.MaxT &&
			Holds(b.PartitionCount, b.PartitionID, mb.PartitionID, max(mb.PartitionCount, 1)) {
			return Decision{Wait: "block " + mb.ID + " overlaps block " + b.ID + " of its own stream, which its range's compaction merges it with first", ClosesAt: recheck}, true
		}
	}
	return Decision{}, false
}

// sameSet reports whether a and b name the same sources.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
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
