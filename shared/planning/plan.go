package planning

import (
	"slices"
	"sort"
	"time"
)

// Candidate is what planning needs to know of one block in a group's range.
type Candidate struct {
	ID         string // ULID
	MinT, MaxT int64  // ms
	Level      int
	// Plannable: LIVE, published, unclaimed and without a no-compact mark.
	Plannable bool
	// Busy: claimed by another group, or an output not yet live: the
	// range will change when that work ends, so planning backs off.
	Busy bool
	// ProducedBy is the group that produced this block ("" for uploads).
	ProducedBy string
	Series     uint64
	IndexBytes uint64
	// ChunkBytes is the summed size of the block's chunk segments.
	ChunkBytes uint64
	// PartitionCount/PartitionID are the block's own partition_info (0:
	// not partitioned): a partition job skips a source that cannot hold
	// its series (Holds).
	PartitionCount, PartitionID int
	// Arrived is when the block was registered (ms). A range closes
	// CloseDelay after both its end and its newest arrival, so a backfill
	// of old blocks is not planned block by block as they trickle in; a
	// range holding level-0 blocks is planned no earlier than UploadWait
	// after the newest of them arrived.
	Arrived int64
	// Stream and Resolution are the block's stream and its resolution
	// (ms, 0: raw), and Sources its meta.json compaction sources: only a
	// downsample group's planning reads them (planDownsample).
	Stream     string
	Resolution int64
	Sources    []string
	// EmptyPartitions are partitions of PartitionCount holding none of
	// the data of the block's sources, so no block (records.Block): a
	// downsampled range counts them as held (partialSource), and a
	// partition's downsample needs no block of them (planDownsample).
	EmptyPartitions []int
}

// Decision is the outcome of planning one group.
type Decision struct {
	// Sources to claim, sorted by ID; empty when there is nothing to do.
	Sources []Candidate
	// Partitions is N, a power of two in [1, MaxPartitions].
	Partitions int
	// Wait explains why nothing is planned now ("" when Sources is set).
	Wait string
	// ClosesAt is when a range that waits for coverage closes (ms), 0
	// otherwise: the planner asks the sweep to re-plan it then.
	ClosesAt int64
	// DoesNotFit says why no partition count fits every job in the
	// limits (Size), "" when one does. The version is planned anyway: its
	// jobs refuse before reading anything and the cleaner quarantines the
	// group with this reason, where status shows it.
	DoesNotFit string
	// DownsampledBy, for a downsample group with nothing to do because
	// blocks of the target resolution already hold every source of its
	// block (Thanos made them before Sluice came, say), names those
	// blocks: the planner records the block as downsampled, so that
	// retention may delete it.
	DownsampledBy []string
}

// Plan decides what group g should compact next, from the blocks whose
// range falls in g (as read from the table) and the time now.
//
// A group takes its level's own outputs as sources only together with at
// least one lower-level block: that is how a late block is merged into an
// already-compacted range (vertical compaction), and why a complete group
// never re-plans itself.
func (p Policy) Plan(g GroupKey, blocks []Candidate, now time.Time) Decision {
	p = p.Defaults()
	if g.IsSplit() {
		return p.planSplit(g, blocks)
	}
	if g.IsDownsample() {
		return p.planDownsample(g, blocks, now)
	}
	start, end := g.RangeStart, p.End(g)
	var srcs []Candidate
	lower := 0
	newest := end
	var upload int64 // the newest level-0 block's arrival
	for _, b := range blocks {
		newest = max(newest, b.Arrived)
		if b.Level == 0 {
			upload = max(upload, b.Arrived)
		}
		if b.MinT < start || b.MaxT > end || b.Level > g.Level {
			continue
		}
		if b.Busy {
			return Decision{Wait: "block " + b.ID + " in range is busy with another group"}
		}
		if !b.Plannable {
			continue
		}
		if b.Level < g.Level {
			lower++
		}
		srcs = append(srcs, b)
	}
	if lower == 0 {
		return Decision{Wait: "no new lower-level block in range"}
	}
	if len(srcs) == 1 {
		// Compacting one block would rewrite it unchanged; it moves up
		// when a second block joins its range.
		return Decision{Wait: "a single block: nothing to merge"}
	}
	closed := now.UnixMilli() >= newest+p.CloseDelay.Milliseconds()
	if !closed && !covers(srcs, start, end, p.Slot.Milliseconds()) {
		return Decision{Wait: "range not covered yet and not closed", ClosesAt: newest + p.CloseDelay.Milliseconds()}
	}
	if due := upload + p.UploadWait.Milliseconds(); p.UploadWait > 0 && now.UnixMilli() < due {
		return Decision{Wait: "an upload in range arrived less than the upload wait ago: its replicas may still come", ClosesAt: due}
	}
	if src, ok := partialSource(srcs); ok {
		// Merged, the blocks would name src as a source of the output
		// while holding some of its partitions only, and a downsample
		// planned later trusts the names (planDownsample): the raw block
		// whose downsample holds the rest would count as downsampled, and
		// its windows would be in no block. The missing partitions come
		// with that downsample (a raw block of this range's stream is
		// downsampled partition by partition, and replaces the narrower
		// block it overlaps), whose output asks for this range again.
		return Decision{Wait: "the range's blocks hold only some partitions of source " + src + "; the rest is still to be downsampled",
			ClosesAt: now.Add(DownsampleRecheck).UnixMilli()}
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].ID < srcs[j].ID })
	n, fits, why := p.Size(srcs)
	d := Decision{Sources: srcs, Partitions: n}
	if !fits {
		d.DoesNotFit = why
	}
	return d
}

// partialSource reports a compaction source of the downsampled blocks bs
// (resolution above 0) that they hold only some partitions of: a source
// named by a block of partition q of c is held in the series whose hash
// modulo c is q, and in the partitions of c the block records as empty
// (no series of its sources hash there, so no block will ever bring
// them: chaos seed 1526, a raw partition compacted empty), and the
// blocks naming it must together hold every residue. Blocks of raw data
// are not judged: a raw range may leave out a partition that cannot be
// compacted (a no-compact mark) and still merge the rest, and nothing
// reads a raw block's sources as a promise.
func partialSource(bs []Candidate) (string, bool) {
	k := 1
	for _, b := range bs {
		if b.Resolution == 0 {
			return "", false
		}
		if b.PartitionCount > k && powerOfTwo(b.PartitionCount) {
			k = b.PartitionCount
		}
	}
	if k == 1 {
		return "", false
	}
	held := map[string][]bool{}
	var names []string
	for _, b := range bs {
		for _, s := range b.Sources {
			h := held[s]
			if h == nil {
				h = make([]bool, k)
				held[s] = h
				names = append(names, s)
			}
			for r := range k {
				h[r] = h[r] || Holds(b.PartitionCount, b.PartitionID, r, k) || holdsEmpty(b, r, k)
			}
		}
	}
	sort.Strings(names)
	for _, s := range names {
		if slices.Contains(held[s], false) {
			return s, true
		}
	}
	return "", false
}

// holdsEmpty reports whether residue r of k lies in a partition b records
// as empty. Only a partitioned b has empty partitions; one of c ≤ k
// partitions of residue e holds residue r of k when r % c == e.
func holdsEmpty(b Candidate, r, k int) bool {
	c := b.PartitionCount
	if c <= 1 || c > k || !powerOfTwo(c) {
		return false
	}
	return slices.Contains(b.EmptyPartitions, r%c)
}

// planSplit decides the split of block g.Block: itself, in SplitCount
// partitions, once it is plannable and still worth splitting.
func (p Policy) planSplit(g GroupKey, blocks []Candidate) Decision {
	for _, b := range blocks {
		if b.ID != g.Block {
			continue
		}
		switch {
		case b.Busy:
			return Decision{Wait: "block " + b.ID + " is busy with another group"}
		case !b.Plannable:
			return Decision{Wait: "block " + b.ID + " is not live, published and unclaimed"}
		}
		n := p.SplitCount(b)
		if n == 0 {
			return Decision{Wait: "block " + b.ID + " is not to be split"}
		}
		return Decision{Sources: []Candidate{b}, Partitions: n}
	}
	return Decision{Wait: "block " + g.Block + " is not registered"}
}

// SplitCount is the number of partition blocks a block is split into on
// arrival, or 0 when it is not split: an unpartitioned level-0 block of at
// least SplitBytes, outside a single-block (Thanos) bucket, whose level-1
// group would be compacted in at least SplitMinPartitions partitions were
// its range full of blocks like it (the count Size picks for that group,
// so that each of the group's jobs reads exactly its own partition of
// every split block), and whose split job fits (EstimateSplit).
func (p Policy) SplitCount(c Candidate) int {
	p = p.Defaults()
	if p.SingleBlock || c.Level != 0 || c.PartitionCount > 1 || c.IndexBytes+c.ChunkBytes < p.SplitBytes {
		return 0
	}
	slot := p.Slot.Milliseconds()
	like := make([]Candidate, int(p.Range(1)/p.Slot))
	for i := range like {
		like[i] = c
		like[i].ID = ""
		like[i].MinT, like[i].MaxT = c.MinT+int64(i)*slot, c.MaxT+int64(i)*slot
	}
	n, _, _ := p.Size(like)
	if n < SplitMinPartitions {
		return 0
	}
	if ok, _ := p.Fits(p.EstimateSplit(c, n)); !ok {
		return 0
	}
	return n
}

// SplitKey is the split group of block id of stream st starting at minT.
func SplitKey(st string, minT int64, id string) GroupKey {
	return GroupKey{Stream: st, RangeStart: minT, Block: id}
}

// EstimateSplit sizes the one job that splits block c into n partitions:
// it reads the block once (index downloaded, chunks streamed) and writes
// all of it again, n indexes on disk beside the source's and n outputs in
// memory at once.
func (p Policy) EstimateSplit(c Candidate, n int) JobEstimate {
	p = p.Defaults()
	size := c.IndexBytes + c.ChunkBytes
	e := JobEstimate{Partitions: n, Opened: 1, ReadBytes: size, OutputBytes: size, ScratchBytes: 2 * c.IndexBytes,
		Series: c.Series / uint64(max(n, 1)), Outputs: n}
	e.Duration = time.Duration(float64(e.ReadBytes+e.OutputBytes) / float64(p.Throughput) * float64(time.Second))
	return e
}

// covers reports whether the blocks cover [start, end) once each block's
// [MinT, MaxT) is rounded out to whole slots: a block whose first sample
// is a little after its slot's start, or whose maxTime is its last sample
// + 1 ms, covers its slot.
func covers(bs []Candidate, start, end, slot int64) bool {
	type span struct{ from, to int64 }
	iv := make([]span, 0, len(bs))
	for _, b := range bs {
		iv = append(iv, span{floorTo(b.MinT, slot), -floorTo(-b.MaxT, slot)})
	}
	sort.Slice(iv, func(i, j int) bool { return iv[i].from < iv[j].from })
	at := start
	for _, b := range iv {
		if b.from > at {
			return false
		}
		if b.to > at {
			at = b.to
		}
	}
	return at >= end
}

// MoreJobs is the partition count of a version re-planned because a job
// of the last one (of was partitions) did not fit where now were planned:
// at least twice was, as a power of two per member (a downsample version
// runs the same number of jobs for each block it downsamples), and at
// most MaxPartitions in all.
func (p Policy) MoreJobs(now, was, members int) int {
	p = p.Defaults()
	members = max(members, 1)
	m := 1
	for m*members < max(now, 2*was) {
		m *= 2
	}
	for m > 1 && m*members > p.MaxPartitions {
		m /= 2
	}
	return m * members
}

// PartitionCount is N as Size picks it.
func (p Policy) PartitionCount(srcs []Candidate) int {
	n, _, _ := p.Size(srcs)
	return n
}

// Size picks N, the smallest power of two up to MaxPartitions at which
// every partition keeps within the limits: the group's estimated series
// (EstimateSeries, not the sum of its sources') over N within
// MaxSeriesPerPartition, its summed index bytes over N (the output
// index's size) within MaxIndexBytesPerPartition, and every partition's
// job within the scratch budget and timeout (Estimate, Fits). With
// SingleBlock the series limit is at least JobSeriesLimit: only what one
// job cannot hold is partitioned.
//
// When no N fits, fits is false, why says what is over, and n is the
// smallest N within the series and index limits: more partitions do not
// shrink a job that must read whole unpartitioned sources.
func (p Policy) Size(srcs []Candidate) (n int, fits bool, why string) {
	p = p.Defaults()
	if p.SingleBlock {
		p.MaxSeriesPerPartition = max(p.MaxSeriesPerPartition, JobSeriesLimit)
	}
	series := EstimateSeries(srcs, p.SeriesChurn)
	var index uint64
	for _, s := range srcs {
		index += s.IndexBytes
	}
	n = 1
	for n < p.MaxPartitions &&
		(series > uint64(n)*p.MaxSeriesPerPartition || index > uint64(n)*p.MaxIndexBytesPerPartition) {
		n *= 2
	}
	for m := n; m <= p.MaxPartitions; m *= 2 {
		ok, reason := p.JobsFit(srcs, m)
		if ok {
			return m, true, ""
		}
		if m == n {
			why = reason
		}
	}
	return n, false, why
}

// JobsFit reports whether every partition of n over srcs fits (Fits), and
// if not, why the first one that does not.
func (p Policy) JobsFit(srcs []Candidate, n int) (bool, string) {
	for part := range n {
		if ok, why := p.Fits(p.Estimate(srcs, part, n)); !ok {
			return false, why
		}
	}
	return true, ""
}

// Target picks the group of stream st that a block of level level in
// [minT, maxT) should go to. completed reports whether a group has ever
// completed a version. A late block goes to the highest level that
// already compacted its range; otherwise to the next level up. ok is false
// for a block that has nowhere to go (top level, or straddling every
// range).
func (p Policy) Target(st string, level int, minT, maxT int64, completed func(GroupKey) bool) (GroupKey, bool) {
	p = p.Defaults()
	for _, g := range p.TargetCandidates(st, level, minT, maxT) {
		if completed(g) {
			return g, true
		}
	}
	for k := level + 1; k <= p.TopLevel(); k++ {
		if g, fits := p.GroupFor(st, k, minT, maxT); fits {
			return g, true
		}
	}
	return GroupKey{}, false
}

// TargetCandidates are the groups Target may ask completed about for the
// same block: one per level above it whose range holds the block, top
// level first. A caller reads them together before calling Target.
func (p Policy) TargetCandidates(st string, level int, minT, maxT int64) []GroupKey {
	p = p.Defaults()
	var out []GroupKey
	for k := p.TopLevel(); k > level; k-- {
		if g, fits := p.GroupFor(st, k, minT, maxT); fits {
			out = append(out, g)
		}
	}
	return out
}

// Parent is the next level's group holding g's range, and false at the
// top level. A split's is the level-1 group holding its block's minTime;
// a downsample's has no parent: its output's group is planned from the
// output (the cleaner knows its stream and level).
func (p Policy) Parent(g GroupKey) (GroupKey, bool) {
	if g.IsDownsample() {
		return GroupKey{}, false
	}
	if g.IsSplit() {
		return p.GroupFor(g.Stream, 1, g.RangeStart, g.RangeStart+1)
	}
	if g.Level >= p.TopLevel() {
		return GroupKey{}, false
	}
	return p.GroupFor(g.Stream, g.Level+1, g.RangeStart, p.End(g))
}
