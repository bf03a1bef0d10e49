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
	"time"
)

// Policy configures planning. The zero value of every field means the
// documented default (see Defaults), never "off".
type Policy struct {
	// Ranges are the group lengths of levels 1..n, each a multiple of the
	// previous. Level 0 is what shippers upload. Default 12h, 24h: 2h
	// blocks compact to 12h, then to 24h (Thanos' default levels, capped at
	// a day because partitions make bigger blocks unnecessary).
	Ranges []time.Duration
	// CloseDelay is how long after a range's end a range that is not fully
	// covered is compacted anyway (a shipper that never uploads a block
	// must not hold a range forever). Default 1h.
	CloseDelay time.Duration
	// MaxSeriesPerPartition bounds one partition job's series (one Lambda's
	// memory). Default 2,000,000.
	MaxSeriesPerPartition uint64
	// MaxIndexBytesPerPartition bounds the summed source index bytes one
	// partition job reads. Default 2 GiB.
	MaxIndexBytesPerPartition uint64
	// MaxPartitions caps N; it is at most 64 because a version and all its
	// partition items are written in one transaction. Default 64.
	MaxPartitions int
}

// Defaults fills zero fields with their documented defaults.
func (p Policy) Defaults() Policy {
	if len(p.Ranges) == 0 {
		p.Ranges = []time.Duration{12 * time.Hour, 24 * time.Hour}
	}
	if p.CloseDelay == 0 {
		p.CloseDelay = time.Hour
	}
	if p.MaxSeriesPerPartition == 0 {
		p.MaxSeriesPerPartition = 2_000_000
	}
	if p.MaxIndexBytesPerPartition == 0 {
		p.MaxIndexBytesPerPartition = 2 << 30
	}
	if p.MaxPartitions == 0 || p.MaxPartitions > 64 {
		p.MaxPartitions = 64
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
		if i > 0 && r%p.Ranges[i-1] != 0 {
			return fmt.Errorf("planning: level %d range %v is not a multiple of level %d range %v", i+1, r, i, p.Ranges[i-1])
		}
	}
	if p.MaxPartitions&(p.MaxPartitions-1) != 0 {
		return fmt.Errorf("planning: max partitions %d is not a power of two", p.MaxPartitions)
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
	r := p.Range(level).Milliseconds()
	s := t - t%r
	if t < 0 && t%r != 0 {
		s -= r
	}
	return s
}

// GroupFor returns the level-level group whose range holds the block
// [minT, maxT), and false when the block straddles that level's range
// boundary (it is then never a source at that level).
func (p Policy) GroupFor(level int, minT, maxT int64) (GroupKey, bool) {
	s := p.RangeStart(level, minT)
	if maxT > s+p.Range(level).Milliseconds() {
		return GroupKey{}, false
	}
	return GroupKey{Level: level, RangeStart: s}, true
}

// GroupKey identifies a group: one level's range of one tenant.
type GroupKey struct {
	Level      int
	RangeStart int64 // ms
}

// String is the stable form used in records and logs: "<level>#<start>".
func (g GroupKey) String() string { return fmt.Sprintf("%d#%d", g.Level, g.RangeStart) }

// ParseGroupKey is the inverse of GroupKey.String.
func ParseGroupKey(s string) (GroupKey, error) {
	var g GroupKey
	if _, err := fmt.Sscanf(s, "%d#%d", &g.Level, &g.RangeStart); err != nil {
		return GroupKey{}, fmt.Errorf("planning: bad group key %q: %w", s, err)
	}
	if g.String() != s || g.Level < 1 {
		return GroupKey{}, fmt.Errorf("planning: bad group key %q", s)
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
