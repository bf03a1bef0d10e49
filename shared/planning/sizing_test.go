package planning

import (
	"strings"
	"testing"
	"time"
)

// src is a source over [minH, maxH) hours with series series, as partition
// q of c (c = 0: unpartitioned).
func src(minH, maxH int64, series uint64, c, q int) Candidate {
	return Candidate{MinT: minH * h, MaxT: maxH * h, Series: series, PartitionCount: c, PartitionID: q}
}

func TestEstimateSeries(t *testing.T) {
	sixTwoHour := func(series uint64) []Candidate {
		var bs []Candidate
		for i := int64(0); i < 6; i++ {
			bs = append(bs, src(2*i, 2*i+2, series, 0, 0))
		}
		return bs
	}
	rf3 := func(series uint64) []Candidate {
		var bs []Candidate
		for _, b := range sixTwoHour(series) {
			bs = append(bs, b, b, b)
		}
		return bs
	}
	tests := []struct {
		name  string
		srcs  []Candidate
		churn float64
		want  uint64
	}{
		{"none", nil, 0.2, 0},
		{"one block", sixTwoHour(30000)[:1], 0.2, 30000},
		// The tenant: 6 × 2h blocks of 30k series; the old sum
		// said 180k.
		{"consecutive blocks add churn", sixTwoHour(30000), 0.2, 30000 + 30000},
		{"churn 1 is the sum", sixTwoHour(30000), 1, 180000},
		{"churn 0 is the largest stretch", sixTwoHour(30000), 0, 30000},
		{"replicas count once", rf3(30000), 0.2, 60000},
		{"partitions of one range are summed", []Candidate{src(0, 12, 100, 2, 0), src(0, 12, 120, 2, 1), src(12, 24, 100, 2, 0), src(12, 24, 100, 2, 1)}, 0.5, 220 + 100},
		{"replicated partitions count once each", []Candidate{src(0, 12, 100, 2, 0), src(0, 12, 100, 2, 0), src(0, 12, 90, 2, 1)}, 0.2, 190},
		{"the largest stretch counts whole", []Candidate{src(0, 2, 10, 0, 0), src(2, 4, 1000, 0, 0)}, 0.5, 1005},
		{"a late block overlapping a compacted range joins its stretch", []Candidate{src(0, 24, 500, 0, 0), src(4, 6, 50, 0, 0)}, 0.2, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := EstimateSeries(tc.srcs, tc.churn); got != tc.want {
				t.Fatalf("EstimateSeries = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestEstimateReadsOnlyWhatThePartitionHolds(t *testing.T) {
	p := Policy{Throughput: 1 << 20}.Defaults()
	whole := []Candidate{
		{MinT: 0, MaxT: 2 * h, Series: 100, IndexBytes: 1 << 20, ChunkBytes: 9 << 20},
		{MinT: 2 * h, MaxT: 4 * h, Series: 100, IndexBytes: 1 << 20, ChunkBytes: 9 << 20},
	}
	e := p.Estimate(whole, 1, 4)
	if e.Opened != 2 || e.ReadBytes != 20<<20 || e.OutputBytes != 5<<20 || e.ScratchBytes != 5<<19 {
		t.Errorf("unpartitioned sources: %+v; want both read whole (20 MiB), a quarter written (5 MiB), and on disk only their indexes and a quarter of them (2.5 MiB)", e)
	}
	if e.Duration != 25*time.Second {
		t.Errorf("duration %v at 1 MiB/s, want 25s", e.Duration)
	}
	// The same data split in 4 on arrival: partition 1 of 4 reads only
	// the sources' partition 1, and keeps all of it.
	var split []Candidate
	for _, b := range whole {
		for q := range 4 {
			s := b
			s.IndexBytes, s.ChunkBytes, s.PartitionCount, s.PartitionID = b.IndexBytes/4, b.ChunkBytes/4, 4, q
			split = append(split, s)
		}
	}
	e = p.Estimate(split, 1, 4)
	if e.Opened != 2 || e.ReadBytes != 5<<20 || e.OutputBytes != 5<<20 {
		t.Errorf("split sources: %+v; want 2 of 8 read (5 MiB) and all of them written", e)
	}
	// Partition 1 of 8 over sources split in 4: half of source partition 1.
	e = p.Estimate(split, 1, 8)
	if e.Opened != 2 || e.ReadBytes != 5<<20 || e.OutputBytes != 5<<19 {
		t.Errorf("finer than the sources: %+v; want 2 read (5 MiB) and half of them written (partition 1 of 8 is half of 1 of 4)", e)
	}
}

func TestSize(t *testing.T) {
	gib := uint64(1 << 30)
	whole := func(n int, each uint64) []Candidate {
		var bs []Candidate
		for i := range n {
			bs = append(bs, Candidate{MinT: int64(i) * 2 * h, MaxT: int64(i+1) * 2 * h, Series: 1000, IndexBytes: each / 10, ChunkBytes: each - each/10})
		}
		return bs
	}
	splitIn := func(bs []Candidate, c int) []Candidate {
		var out []Candidate
		for _, b := range bs {
			for q := range c {
				s := b
				s.IndexBytes, s.ChunkBytes, s.Series, s.PartitionCount, s.PartitionID = b.IndexBytes/uint64(c), b.ChunkBytes/uint64(c), b.Series/uint64(c), c, q
				out = append(out, s)
			}
		}
		return out
	}
	indexHeavy := func(n int, index uint64) []Candidate {
		bs := whole(n, gib)
		for i := range bs {
			bs[i].IndexBytes, bs[i].ChunkBytes = index, 1<<20
		}
		return bs
	}
	p := Policy{ScratchBytes: 8 * gib, MaxSeriesPerPartition: 1 << 40}.Defaults()
	fast := p
	fast.Throughput = 1 << 40
	tests := []struct {
		name   string
		policy Policy
		srcs   []Candidate
		n      int
		fits   bool
		why    string
	}{
		{"small group: one job", p, whole(6, gib/2), 1, true, ""},
		// 6 GiB read and 6 written at 24 MiB/s is 512 s, twice that over
		// the 15 minutes; at N=2 each job still reads all 6 GiB but writes
		// 3: 384 s.
		{"a smaller output share needs more partitions", p, whole(6, gib), 2, true, ""},
		// 12 GiB of unpartitioned sources: every job reads them all, 512 s
		// at least: no N fits.
		{"unpartitioned sources too long for any job", p, whole(6, 2*gib), 1, false, "job timeout"},
		// The same bytes split in 8 on arrival: partition p of 4 reads
		// the sources' partitions p and p+4 (3 GiB) and writes them.
		{"split sources fit once each job reads a share", p, splitIn(whole(6, 2*gib), 8), 4, true, ""},
		// Chunks never touch the disk; indexes do. 6 indexes of 1 GiB and
		// the output's (6 GiB at N=1) are over 8 GiB, at N=2 (6 + 3) too,
		// at N=4 (6 + 1.5) they fit.
		{"indexes and the output's share of them fill scratch", fast, indexHeavy(6, gib), 4, true, ""},
		// 12 GiB of indexes: N starts at 8 (2 GiB of index per
		// partition), and every job still downloads all 12.
		{"indexes alone over the scratch budget", fast, indexHeavy(6, 2*gib), 8, false, "of scratch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.policy
			n, fits, why := p.Size(tc.srcs)
			if n != tc.n || fits != tc.fits || !strings.Contains(why, tc.why) {
				t.Fatalf("Size = %d, %v, %q; want %d, %v, containing %q", n, fits, why, tc.n, tc.fits, tc.why)
			}
			if ok, _ := p.JobsFit(tc.srcs, n); ok != fits {
				t.Fatalf("JobsFit(%d) = %v, Size said %v", n, ok, fits)
			}
		})
	}
}

func TestFitsTimeAndSeries(t *testing.T) {
	p := Policy{JobTimeout: 10 * time.Minute}.Defaults()
	if ok, why := p.Fits(JobEstimate{Duration: 5*time.Minute + time.Second}); ok || !strings.Contains(why, "over half the 10m0s job timeout") {
		t.Errorf("a job estimated at over half the timeout: %v %q", ok, why)
	}
	if ok, _ := p.Fits(JobEstimate{Duration: 5 * time.Minute}); !ok {
		t.Error("a job at exactly half the timeout must fit")
	}
	if ok, why := p.Fits(JobEstimate{Series: JobSeriesLimit + 1}); ok || !strings.Contains(why, "series") {
		t.Errorf("a job over the series limit: %v %q", ok, why)
	}
}

func TestHoldsMatchesBruteForce(t *testing.T) {
	for _, c := range []int{0, 1, 2, 4, 8, 3} {
		for q := range max(c, 1) {
			for _, n := range []int{1, 2, 4, 8, 16} {
				for part := range n {
					want := c <= 1 || c == 3
					for hash := range 64 {
						if c > 1 && c != 3 && hash%c == q && hash%n == part {
							want = true
						}
					}
					if got := Holds(c, q, part, n); got != want {
						t.Errorf("Holds(c=%d, q=%d, p=%d, n=%d) = %v, want %v", c, q, part, n, got, want)
					}
				}
			}
		}
	}
}

func TestSplitCount(t *testing.T) {
	mib := uint64(1 << 20)
	big := Candidate{ID: "01HK3QGM00JS67MS0A0DFMSX3V", MinT: 0, MaxT: 2 * h, Series: 100_000, IndexBytes: 50 * mib, ChunkBytes: 450 * mib}
	// A 12h range of six such blocks is estimated at 100k + 5 × 20k =
	// 200k series: 8 partitions of 25k.
	p := Policy{MaxSeriesPerPartition: 25_000}
	with := func(f func(*Candidate)) Candidate { c := big; f(&c); return c }
	tests := []struct {
		name   string
		policy Policy
		c      Candidate
		want   int
	}{
		{"big block: the count its group would get", p, big, 8},
		{"under SplitBytes", p, with(func(c *Candidate) { c.ChunkBytes = 100 * mib }), 0},
		{"SplitBytes lowered", Policy{MaxSeriesPerPartition: 25_000, SplitBytes: 100 * mib}, with(func(c *Candidate) { c.ChunkBytes = 60 * mib }), 8},
		{"never", Policy{MaxSeriesPerPartition: 25_000, SplitBytes: NeverSplit}, big, 0},
		{"its group would get fewer than 4 partitions", Policy{MaxSeriesPerPartition: 100_000}, big, 0},
		{"already partitioned", p, with(func(c *Candidate) { c.PartitionCount, c.PartitionID = 2, 1 }), 0},
		{"not an upload", p, with(func(c *Candidate) { c.Level = 1 }), 0},
		{"a Thanos bucket never splits", Policy{MaxSeriesPerPartition: 25_000, SingleBlock: true}, big, 0},
		// 2 × 12 GiB at 24 MiB/s is over half the 15 minutes.
		{"the split job would not fit", p, with(func(c *Candidate) { c.ChunkBytes = 12 << 30 }), 0},
		// Its group's jobs write one output each and fit; the split
		// writes 8 at once and does not: the block is compacted directly.
		{"the split's 8 outputs would not fit the job's memory", Policy{MaxSeriesPerPartition: 25_000, MemoryBytes: JobMemory(8) - 1}, big, 0},
		{"the split's 8 outputs fit the job's memory", Policy{MaxSeriesPerPartition: 25_000, MemoryBytes: JobMemory(8)}, big, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.policy.SplitCount(tc.c); got != tc.want {
				t.Fatalf("SplitCount = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPlanSplit(t *testing.T) {
	p := Policy{MaxSeriesPerPartition: 25_000}
	b := Candidate{ID: "01HK3QGM00JS67MS0A0DFMSX3V", MinT: 2 * h, MaxT: 4 * h, Series: 100_000, IndexBytes: 50 << 20, ChunkBytes: 450 << 20, Plannable: true}
	g := SplitKey(st, b.MinT, b.ID)
	other := b
	other.ID = "01HK3QGM00JS67MS0A0DFMSX3W"
	busy := b
	busy.Busy, busy.Plannable = true, false
	gone := b
	gone.Plannable = false
	tests := []struct {
		name   string
		blocks []Candidate
		n      int
		wait   string
	}{
		{"its block alone, in the count", []Candidate{other, b}, 8, ""},
		{"busy", []Candidate{busy}, 0, "busy"},
		{"no longer plannable", []Candidate{gone}, 0, "not live"},
		{"not there", []Candidate{other}, 0, "not registered"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Plan(g, tc.blocks, time.Unix(0, 0))
			if d.Partitions != tc.n || !strings.Contains(d.Wait, tc.wait) || (tc.n > 0) != (len(d.Sources) == 1 && d.Sources[0].ID == b.ID) {
				t.Fatalf("Plan = %+v; want %d partitions of %s, wait %q", d, tc.n, b.ID, tc.wait)
			}
		})
	}
	if parent, ok := p.Parent(g); !ok || parent != (GroupKey{Stream: st, Level: 1, RangeStart: 0}) {
		t.Errorf("Parent of a split = %v, %v; want the level-1 group holding its block", parent, ok)
	}
}

// A job's outputs hold a bounded number of bytes together however many it
// writes: each keeps the uploads' defaults while the budget allows, and
// never less than two of S3's smallest parts.
func TestOutputBuffers(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		outputs         int
		threshold, part int64
	}{
		{1, 64 * mib, 16 * mib},
		{8, 64 * mib, 16 * mib},
		{16, 24 * mib, 16 * mib},
		{32, 10 * mib, 10 * mib},
		{64, 5 * mib, 5 * mib},
	}
	for _, tc := range tests {
		threshold, part := OutputBuffers(tc.outputs)
		if threshold != tc.threshold || part != tc.part {
			t.Errorf("OutputBuffers(%d) = %d MiB held, parts of %d MiB; want %d, %d", tc.outputs, threshold/mib, part/mib, tc.threshold/mib, tc.part/mib)
		}
	}
	for n := 1; n <= 64; n++ {
		threshold, part := OutputBuffers(n)
		if held := int64(n) * (threshold + part); held > OutputBufferBudget || part < 5*mib || threshold < part {
			t.Errorf("%d outputs: %d MiB held in all, parts of %d MiB, threshold %d MiB; want at most %d MiB, parts of at least 5 MiB, threshold at least a part",
				n, held/mib, part/mib, threshold/mib, OutputBufferBudget/mib)
		}
	}
	if JobMemory(64) > DefaultJobMemoryBytes {
		t.Errorf("a split into 64 needs %d MiB, over the default %d MiB: the most partitions must fit the default function", JobMemory(64)/mib, DefaultJobMemoryBytes/mib)
	}
}

func TestFitsMemory(t *testing.T) {
	p := Policy{MemoryBytes: JobMemory(16) - 1}
	if ok, why := p.Fits(JobEstimate{Partitions: 16, Outputs: 16}); ok || !strings.Contains(why, "the job writing 16 partitions needs about") {
		t.Errorf("a job over the memory budget: %v %q", ok, why)
	}
	if ok, _ := (Policy{MemoryBytes: JobMemory(1)}).Fits(JobEstimate{Outputs: 1}); !ok {
		t.Error("a job at exactly the memory budget must fit")
	}
	if _, fits, why := (Policy{MemoryBytes: JobMemory(1) - 1}).Size([]Candidate{src(0, 2, 10, 0, 0), src(2, 4, 10, 0, 0)}); fits || !strings.Contains(why, "of memory") {
		t.Errorf("a function too small for any job: fits %v (%q); want no partition count to fit, for its memory", fits, why)
	}
}
