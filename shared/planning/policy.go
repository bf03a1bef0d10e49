// Package planning is Sluice's compaction policy: which blocks go together,
// when a time range is ready, and how many partitions a group gets.
//
// It is pure: no AWS, no clock of its own, no I/O. The planner function
// feeds it what it read from the table and executes what it returns with
// conditional writes (shared/records). Users change the policy here
// without touching a condition — the seam Thanos calls Grouper/Planner.
package planning

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/stream"
)

// Policy configures planning. The zero value of every field means the
// documented default (see Defaults), never "off".
type Policy struct {
	// Ranges are the group lengths of levels 1..n, each a multiple of the
	// previous. Level 0 is what shippers upload. Default 12h, 24h: 2h
	// blocks compact to 12h, then to 24h (Thanos' default levels, capped at
	// a day because partitions make bigger blocks unnecessary).
	Ranges []time.Duration
	// Slot is the length of the blocks shippers upload: Prometheus cuts its
	// head into blocks of 2h aligned to multiples of 2h, and every level's
	// range must be a multiple of it. Readiness counts a block as covering
	// every slot it touches, because a block's minTime is its first sample
	// and its maxTime its last sample + 1 ms (promtool's backfilled blocks
	// end at 01:59:59.001 of a 2h slot); only a slot with no block at all
	// keeps a range waiting. Default 2h.
	Slot time.Duration
	// CloseDelay is how long after a range's end a range that is not fully
	// covered is compacted anyway (a shipper that never uploads a block
	// must not hold a range forever). Default 1h.
	CloseDelay time.Duration
	// UploadWait is how long a range holding uploaded (level-0) blocks
	// waits after the newest of them arrived before it is compacted, even
	// when its blocks cover it: the replicas of one Prometheus, and the
	// ingesters of a Cortex or Mimir tenant, cut the same 2h block and
	// ship it within a minute or two of each other, and a range planned
	// as soon as the first of them covers it is compacted again for each
	// that comes after (a new version merging them vertically, every
	// sample of the range read and written once more). Mimir's compactor
	// waits for the same reason (-compactor.first-level-compaction-wait-
	// period, 25m), Thanos' (--consistency-delay, 30m) ignores young
	// blocks. SLUICE_UPLOAD_WAIT, default DefaultUploadWait; NoUploadWait
	// (SLUICE_UPLOAD_WAIT=0) plans a covered range at once.
	UploadWait time.Duration
	// MaxSeriesPerPartition bounds one partition job's series (one Lambda's
	// memory). Default 2,000,000.
	MaxSeriesPerPartition uint64
	// MaxIndexBytesPerPartition bounds the summed source index bytes one
	// partition job reads. Default 2 GiB.
	MaxIndexBytesPerPartition uint64
	// MaxPartitions caps N; it is at most 64 because a version and all its
	// partition items are written in one transaction. Default 64.
	MaxPartitions int
	// SingleBlock writes one block per group unless a hard limit forces
	// partitions: a lower MaxSeriesPerPartition than JobSeriesLimit is
	// ignored. Set for a Thanos bucket, whose tools know nothing of
	// partitions: to `thanos tools bucket verify` and to Thanos' compactor,
	// the blocks of one partitioned group overlap in time
	// (docs/thanos.md).
	SingleBlock bool
	// ScratchBytes is the local disk one job may use (sources downloaded,
	// output written): SLUICE_SCRATCH_BYTES, default DefaultScratchBytes.
	ScratchBytes uint64
	// MemoryBytes is the memory one job may use (JobMemory):
	// SLUICE_JOB_MEMORY_BYTES, default DefaultJobMemoryBytes.
	MemoryBytes uint64
	// Throughput is the bytes per second a job is assumed to move
	// (download, merge and upload together), for its run time estimate:
	// SLUICE_JOB_THROUGHPUT, default DefaultThroughput.
	Throughput uint64
	// JobTimeout is the time a job has for its work (shared/config: the
	// compact function's timeout less the deadline margin); a job whose
	// estimate is over half of it is not started. Default
	// DefaultJobTimeout.
	JobTimeout time.Duration
	// SeriesChurn is the share of a later block's series EstimateSeries
	// takes as new: SLUICE_SERIES_CHURN, default DefaultSeriesChurn; 1
	// sums every stretch's series (the old, pessimistic estimate).
	SeriesChurn float64
	// SplitBytes is the size (index and chunks) from which a level-0 block
	// is split on arrival (SplitCount): SLUICE_SPLIT_BYTES, default
	// DefaultSplitBytes; NeverSplit turns splitting off.
	SplitBytes uint64
	// Downsample turns on Thanos' downsampling (SLUICE_DOWNSAMPLE): a
	// block spanning at least DownsampleRawSpan of raw samples is
	// downsampled to 5m, one spanning DownsampleFiveMinuteSpan of 5m
	// aggregates to 1h (downsample.go).
	Downsample bool
	// DownsampleRawSpan and DownsampleFiveMinuteSpan are those spans:
	// SLUICE_DOWNSAMPLE_RAW_SPAN and SLUICE_DOWNSAMPLE_5M_SPAN, default
	// Thanos' 40h and 10d.
	DownsampleRawSpan, DownsampleFiveMinuteSpan time.Duration
}

// Splitting defaults. A level-0 block is split on arrival into the
// partition count its level-1 group is expected to get, when that is at
// least SplitMinPartitions: a group of G bytes compacted directly in N
// partitions moves (N+1)·G (every job reads every source, and the outputs
// are written), split first it moves 4·G (each block read and written by
// its split, each split partition read once by the group's job of that
// partition, the outputs written), so splitting pays from N = 4 on — and
// each group job then reads G/N, not G.
const (
	DefaultSplitBytes  = 256 << 20
	NeverSplit         = ^uint64(0)
	SplitMinPartitions = 4
)

// DefaultUploadWait is Policy.UploadWait's default: shorter than Mimir's
// 25 minutes and Thanos' 30, because Sluice hears of every upload as it
// lands and need not wait out a bucket scan as well, and long enough for
// the slowest replica of a pair that ships every 30 s to land its block.
// NoUploadWait turns the wait off.
const (
	DefaultUploadWait               = 10 * time.Minute
	NoUploadWait      time.Duration = -1
)

// JobSeriesLimit is the most series one compaction job is given: what one
// compact function (10 GiB) holds with room (docs/block-engine.md). With
// SingleBlock it is the series limit whatever MaxSeriesPerPartition says.
const JobSeriesLimit = 2_000_000

// Defaults fills zero fields with their documented defaults.
func (p Policy) Defaults() Policy {
	if len(p.Ranges) == 0 {
		p.Ranges = []time.Duration{12 * time.Hour, 24 * time.Hour}
	}
	if p.Slot == 0 {
		p.Slot = 2 * time.Hour
	}
	if p.CloseDelay == 0 {
		p.CloseDelay = time.Hour
	}
	if p.UploadWait == 0 {
		p.UploadWait = DefaultUploadWait
	}
	if p.MaxSeriesPerPartition == 0 {
		p.MaxSeriesPerPartition = JobSeriesLimit
	}
	if p.MaxIndexBytesPerPartition == 0 {
		p.MaxIndexBytesPerPartition = 2 << 30
	}
	if p.MaxPartitions == 0 || p.MaxPartitions > 64 {
		p.MaxPartitions = 64
	}
	if p.ScratchBytes == 0 {
		p.ScratchBytes = DefaultScratchBytes
	}
	if p.MemoryBytes == 0 {
		p.MemoryBytes = DefaultJobMemoryBytes
	}
	if p.Throughput == 0 {
		p.Throughput = DefaultThroughput
	}
	if p.JobTimeout == 0 {
		p.JobTimeout = DefaultJobTimeout
	}
	if p.SeriesChurn == 0 {
		p.SeriesChurn = DefaultSeriesChurn
	}
	if p.SplitBytes == 0 {
		p.SplitBytes = DefaultSplitBytes
	}
	if p.DownsampleRawSpan == 0 {
		p.DownsampleRawSpan = DefaultDownsampleRawSpan
	}
	if p.DownsampleFiveMinuteSpan == 0 {
		p.DownsampleFiveMinuteSpan = DefaultDownsampleFiveMinuteSpan
	}
	return p
}

// Validate reports a policy that cannot work.
func (p Policy) Validate() error {
	p = p.Defaults()
	for i, r := range p.Ranges {
		if r <= 0 || r%time.Millisecond != 0 {
			return fmt.Errorf("planning: level %d range %v must be a positive whole number of milliseconds", i+1, r)
		}
		if r%p.Slot != 0 {
			return fmt.Errorf("planning: level %d range %v is not a multiple of the %v slot", i+1, r, p.Slot)
		}
		if i > 0 && r%p.Ranges[i-1] != 0 {
			return fmt.Errorf("planning: level %d range %v is not a multiple of level %d range %v", i+1, r, i, p.Ranges[i-1])
		}
	}
	if p.SeriesChurn < 0 || p.SeriesChurn > 1 {
		return fmt.Errorf("planning: series churn %g is not in [0, 1]", p.SeriesChurn)
	}
	if top := p.Ranges[len(p.Ranges)-1]; p.Downsample && top < p.DownsampleRawSpan {
		return fmt.Errorf("planning: downsampling needs blocks of %v, but the top level's range is %v: no output is ever downsampled (Thanos' levels: 2h,8h,48h,336h)", p.DownsampleRawSpan, top)
	}
	if p.MaxPartitions&(p.MaxPartitions-1) != 0 {
		return fmt.Errorf("planning: max partitions %d is not a power of two", p.MaxPartitions)
	}
	if one := JobMemory(1); p.MemoryBytes < one {
		return fmt.Errorf("planning: job memory (SLUICE_JOB_MEMORY_BYTES) of %s is below the %s a job writing one block needs: every group would be quarantined as too big",
			bytesString(p.MemoryBytes), bytesString(one))
	}
	return nil
}

// TopLevel is the highest level; its blocks are compacted again only when a
// late block arrives in their range.
func (p Policy) TopLevel() int { return len(p.Defaults().Ranges) }

// Range returns the length of level's groups; level ≥ 1.
func (p Policy) Range(level int) time.Duration { return p.Defaults().Ranges[level-1] }

// RangeStart returns the start (ms) of the level's range holding t (ms).
func (p Policy) RangeStart(level int, t int64) int64 {
	return floorTo(t, p.Range(level).Milliseconds())
}

// floorTo rounds t down to a multiple of r (r > 0), negative t included.
func floorTo(t, r int64) int64 {
	s := t - t%r
	if t < 0 && t%r != 0 {
		s -= r
	}
	return s
}

// GroupFor returns the level-level group of stream st whose range holds
// the block [minT, maxT), and false when the block straddles that level's
// range boundary (it is then never a source at that level).
func (p Policy) GroupFor(st string, level int, minT, maxT int64) (GroupKey, bool) {
	s := p.RangeStart(level, minT)
	if maxT > s+p.Range(level).Milliseconds() {
		return GroupKey{}, false
	}
	return GroupKey{Stream: st, Level: level, RangeStart: s}, true
}

// GroupKey identifies a group: one level's range of one stream of one
// tenant, or — with Block set — the split of one level-0 block of the
// stream into partitions (Level 0, RangeStart the block's minTime), or —
// with Block and Resolution set — the downsampling of one block of the
// stream to Resolution.
type GroupKey struct {
	// Stream is the stream.ID of the group's blocks.
	Stream     string
	Level      int
	RangeStart int64 // ms
	// Block is the ULID of the block a split or downsample group reads;
	// "" for a range's group.
	Block string
	// Resolution is the resolution (ms) a downsample group writes; 0
	// otherwise.
	Resolution int64
}

// IsSplit reports a split group: the split of one block (Block), not a
// range's compaction.
func (g GroupKey) IsSplit() bool { return g.Block != "" && g.Resolution == 0 }

// IsDownsample reports a downsample group: one block (Block) downsampled
// to Resolution, into the stream of that resolution.
func (g GroupKey) IsDownsample() bool { return g.Block != "" && g.Resolution > 0 }

// String is the stable form used in records and logs:
// "<stream>#<level>#<start>", "<stream>#0#<minTime>#<ULID>" for a split
// and "<stream>#d<resolution>#<minTime>#<ULID>" for a downsample.
func (g GroupKey) String() string {
	switch {
	case g.IsDownsample():
		return fmt.Sprintf("%s#d%d#%d#%s", g.Stream, g.Resolution, g.RangeStart, g.Block)
	case g.IsSplit():
		return fmt.Sprintf("%s#0#%d#%s", g.Stream, g.RangeStart, g.Block)
	}
	return fmt.Sprintf("%s#%d#%d", g.Stream, g.Level, g.RangeStart)
}

// ParseGroupKey is the inverse of GroupKey.String.
func ParseGroupKey(s string) (GroupKey, error) {
	st, rest, ok := strings.Cut(s, "#")
	if !ok || !stream.ValidID(st) {
		return GroupKey{}, fmt.Errorf("planning: bad group key %q: no stream id", s)
	}
	g := GroupKey{Stream: st}
	parts := strings.Split(rest, "#")
	var err error
	switch {
	case len(parts) == 2:
		if g.Level, err = strconv.Atoi(parts[0]); err == nil {
			g.RangeStart, err = strconv.ParseInt(parts[1], 10, 64)
		}
		if err == nil && g.Level < 1 {
			err = fmt.Errorf("level %d", g.Level)
		}
	case len(parts) == 3 && (parts[0] == "0" || strings.HasPrefix(parts[0], "d")):
		// A split, "0#<minTime>#<ULID>", or a downsample,
		// "d<resolution>#<minTime>#<ULID>".
		if parts[0] != "0" {
			if g.Resolution, err = strconv.ParseInt(parts[0][1:], 10, 64); err == nil && g.Resolution <= 0 {
				err = fmt.Errorf("resolution %d", g.Resolution)
			}
		}
		if err == nil {
			g.RangeStart, err = strconv.ParseInt(parts[1], 10, 64)
		}
		if err == nil {
			_, err = ulid.ParseStrict(parts[2])
		}
		g.Block = parts[2]
	default:
		err = fmt.Errorf("want <stream>#<level>#<start>, <stream>#0#<minTime>#<ULID> or <stream>#d<resolution>#<minTime>#<ULID>")
	}
	if err != nil {
		return GroupKey{}, fmt.Errorf("planning: bad group key %q: %w", s, err)
	}
	if g.String() != s {
		return GroupKey{}, fmt.Errorf("planning: bad group key %q: not canonical", s)
	}
	return g, nil
}

// End returns the exclusive end (ms) of the group's range.
func (p Policy) End(g GroupKey) int64 { return g.RangeStart + p.Range(g.Level).Milliseconds() }

// LevelOf classifies an uploaded block by its length: level 0 for blocks up
// to the shortest range's sixth (2h), otherwise the smallest level whose
// range holds it. Sluice's own outputs carry their group's level instead.
func (p Policy) LevelOf(minT, maxT int64) int {
	d := time.Duration(maxT-minT) * time.Millisecond
	p = p.Defaults()
	if d < p.Ranges[0] {
		return 0
	}
	for i, r := range p.Ranges {
		if d <= r {
			return i + 1
		}
	}
	return len(p.Ranges)
}

// MemberRanges lists the group ranges of stream st that a block of level
// level over [minT, maxT) belongs to: at every level above its own (and at
// its own, for an output). A block is registered in each, so that planning
// any of them reads only its own members.
func (p Policy) MemberRanges(st string, level int, minT, maxT int64) []GroupKey {
	var out []GroupKey
	for k := max(level, 1); k <= p.TopLevel(); k++ {
		if g, ok := p.GroupFor(st, k, minT, maxT); ok {
			out = append(out, g)
		}
	}
	return out
}
