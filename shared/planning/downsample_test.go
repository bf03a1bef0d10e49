package planning

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	cases := []struct {
		n, p, c, q int
		want       bool
	}{
		{0, 0, 0, 0, true}, {4, 1, 0, 0, true}, {0, 0, 2, 1, false},
		{4, 3, 2, 1, true}, {4, 2, 2, 1, false}, {2, 1, 4, 1, false}, {4, 1, 4, 1, true}, {4, 1, 4, 2, false},
	}
	for _, tc := range cases {
		if got := within(tc.n, tc.p, tc.c, tc.q); got != tc.want {
			t.Errorf("within(%d of %d in %d of %d) = %v, want %v", tc.p, tc.n, tc.q, tc.c, got, tc.want)
		}
	}
}

func TestDownsampleTo(t *testing.T) {
	on := Policy{Downsample: true}
	h := int64(time.Hour / time.Millisecond)
	cases := []struct {
		name   string
		pol    Policy
		res    int64
		span   int64
		want   int64
		wantOK bool
	}{
		{"off by default", Policy{}, 0, 48 * h, 0, false},
		{"raw, 2d", on, 0, 48 * h, Resolution5m, true},
		{"raw, exactly 40h", on, 0, 40 * h, Resolution5m, true},
		{"raw, 24h", on, 0, 24 * h, 0, false},
		{"5m, 14d", on, Resolution5m, 14 * 24 * h, Resolution1h, true},
		{"5m, 2d", on, Resolution5m, 48 * h, 0, false},
		{"1h is the last", on, Resolution1h, 100 * 24 * h, 0, false},
		{"configured span", Policy{Downsample: true, DownsampleRawSpan: 4 * time.Hour}, 0, 4 * h, Resolution5m, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.pol.DownsampleTo(tc.res, 1000, 1000+tc.span)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("DownsampleTo = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestPlanDownsample(t *testing.T) {
	const (
		raw = "aaaaaaaaaaaaaaaa"
		fm  = "bbbbbbbbbbbbbbbb"
		h   = int64(time.Hour / time.Millisecond)
	)
	now := time.UnixMilli(1_000 * h)
	pol := Policy{Downsample: true, Ranges: []time.Duration{8 * time.Hour, 48 * time.Hour}}
	src := Candidate{ID: "01HK3QGM00JS67MS0A0DFMSX3V", Stream: raw, MinT: 0, MaxT: 48 * h, Level: 2, Plannable: true,
		Sources: []string{"S1", "S2", "S3"}}
	down := func(id string, sources ...string) Candidate {
		return Candidate{ID: id, Stream: fm, Resolution: Resolution5m, MinT: 0, MaxT: 48 * h, Level: 2, Plannable: true, Sources: sources}
	}
	busy := func(c Candidate) Candidate { c.Busy, c.Plannable = true, false; return c }
	replica := func(id string) Candidate {
		return Candidate{ID: id, Stream: raw, MinT: 0, MaxT: 48 * h, Level: 2, Plannable: true, Sources: []string{"S1", "S2", "S3"}}
	}
	part := func(c Candidate, n, p int) Candidate { c.PartitionCount, c.PartitionID = n, p; return c }
	g := DownsampleKey(raw, 0, src.ID, Resolution5m)
	// sibling is partition p of n of the version that made src.
	sibling := func(id string, n, p int) Candidate { return part(replica(id), n, p) }
	empty := func(c Candidate, e ...int) Candidate { c.EmptyPartitions = e; return c }
	const sib2, sib3 = "01HK3QGM00JS67MS0A0DFMSX3W", "01HK3QGM00JS67MS0A0DFMSX3X"
	cases := []struct {
		name    string
		blocks  []Candidate
		sources []string
		by      []string
		wait    string
		recheck bool
		jobs    int // the version's partitions when it is planned (0: 1)
	}{
		{"nothing downsampled yet", []Candidate{src}, []string{src.ID}, nil, "", false, 0},
		{"already downsampled (Thanos did it)", []Candidate{src, down("D1", "S1", "S2"), down("D2", "S3")}, nil, []string{"D1", "D2"}, "already hold", false, 0},
		{"covered by a block being published", []Candidate{src, busy(down("D1", "S1", "S2", "S3"))}, nil, nil, "busy", true, 0},
		{"a late block joined: the old downsample is replaced", []Candidate{src, down("D1", "S1", "S2")}, []string{src.ID, "D1"}, nil, "", false, 0},
		{"overlapping downsample of other data", []Candidate{src, down("D1", "S1", "X")}, nil, nil, "holds data it does not", false, 0},
		{"the block it replaces is busy", []Candidate{src, busy(down("D1", "S1"))}, nil, nil, "busy", true, 0},
		{"source busy", []Candidate{busy(src)}, nil, nil, "busy with another group", true, 0},
		{"source too short", []Candidate{func() Candidate { c := src; c.MaxT = 24 * h; return c }()}, nil, nil, "not to be downsampled", false, 0},
		{"not registered", nil, nil, nil, "not registered", false, 0},
		// Partitions share their block's sources, not its series.
		{"a partition's downsample does not hold the block, which replaces it", []Candidate{src, part(down("D1", "S1", "S2", "S3"), 2, 0)}, []string{src.ID, "D1"}, nil, "", false, 0},
		{"a sibling partition's downsample is left alone", []Candidate{part(src, 2, 1), part(down("D1", "S1", "S2", "S3"), 2, 0)}, []string{src.ID}, nil, "", false, 0},
		{"the same partition's downsample holds it", []Candidate{part(src, 2, 1), part(down("D1", "S1", "S2", "S3"), 2, 1)}, nil, []string{"D1"}, "already hold", false, 0},
		{"a finer partition's earlier downsample is replaced", []Candidate{part(src, 2, 1), part(down("D1", "S1"), 4, 3)}, []string{src.ID, "D1"}, nil, "", false, 0},
		{"an unpartitioned downsample holds a partition", []Candidate{part(src, 4, 2), down("D1", "S1", "S2", "S3")}, nil, []string{"D1"}, "already hold", false, 0},
		// A replica (or late block) in src's own stream is merged with it
		// first; its sibling partitions and a block never to be compacted
		// (no-compact: neither plannable nor busy) are not waited for.
		{"a replica not merged yet", []Candidate{src, replica("R1")}, nil, nil, "of its own stream", true, 0},
		{"a sibling partition of its stream", []Candidate{part(src, 2, 1), part(replica("R1"), 2, 0)}, []string{src.ID}, nil, "", false, 0},
		{"a no-compact block of its stream", []Candidate{src, func() Candidate { c := replica("R1"); c.Plannable = false; return c }()}, []string{src.ID}, nil, "", false, 0},
		// A coarser downsample (of an earlier block of the same sources,
		// in fewer partitions) also holds series of src's sibling
		// partitions: they are downsampled with src, or need nothing when
		// recorded empty (chaos seed 1526: src and its sibling each waited
		// on the coarser block for ever).
		{"a coarser downsample is replaced with the sibling it holds", []Candidate{part(src, 4, 0), sibling(sib2, 4, 2), sibling(sib3, 4, 1), part(down("D1", "S1", "S2"), 2, 0)},
			[]string{src.ID, sib2, "D1"}, nil, "", false, 2},
		{"a coarser downsample whose other partition is empty", []Candidate{empty(part(src, 4, 0), 2), part(down("D1", "S1", "S2"), 2, 0)},
			[]string{src.ID, "D1"}, nil, "", false, 0},
		{"a coarser downsample, the sibling without a block and not empty", []Candidate{part(src, 4, 0), part(down("D1", "S1", "S2"), 2, 0)},
			nil, nil, "has no block", true, 0},
		{"a coarser downsample, the sibling busy", []Candidate{part(src, 4, 0), busy(sibling(sib2, 4, 2)), part(down("D1", "S1", "S2"), 2, 0)},
			nil, nil, "sibling partition " + sib2 + " is busy", true, 0},
		{"a sibling of other sources is not one", []Candidate{part(src, 4, 0), func() Candidate { c := sibling(sib2, 4, 2); c.Sources = []string{"S1"}; return c }(),
			part(down("D1", "S1", "S2"), 2, 0)}, nil, nil, "has no block", true, 0},
		{"an unpartitioned downsample of some sources takes every sibling", []Candidate{part(src, 2, 0), sibling(sib2, 2, 1), down("D1", "S1")},
			[]string{src.ID, sib2, "D1"}, nil, "", false, 2},
		{"the sibling's own downsample is replaced too", []Candidate{part(src, 4, 0), sibling(sib2, 4, 2), part(down("D1", "S1"), 2, 0), part(down("D2", "S2"), 8, 6)},
			[]string{src.ID, sib2, "D1", "D2"}, nil, "", false, 2},
		{"a coarser downsample of other data still waits", []Candidate{part(src, 4, 0), sibling(sib2, 4, 2), part(down("D1", "S1", "X"), 2, 0)},
			nil, nil, "holds data it does not", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := pol.Plan(g, tc.blocks, now)
			var ids []string
			for _, c := range d.Sources {
				ids = append(ids, c.ID)
			}
			if !slices.Equal(ids, tc.sources) || !slices.Equal(d.DownsampledBy, tc.by) {
				t.Fatalf("sources %v, downsampled by %v; want %v, %v (wait %q)", ids, d.DownsampledBy, tc.sources, tc.by, d.Wait)
			}
			if want := max(tc.jobs, 1); len(ids) > 0 && d.Partitions != want {
				t.Errorf("partitions %d, want %d", d.Partitions, want)
			}
			if !strings.Contains(d.Wait, tc.wait) {
				t.Errorf("wait %q, want it to say %q", d.Wait, tc.wait)
			}
			if got := d.ClosesAt > 0; got != tc.recheck {
				t.Errorf("re-planned later: %v, want %v", got, tc.recheck)
			}
		})
	}
}

// SizeDownsample: a block's downsample is written in partitions when its
// series are more than a partition holds (not with SingleBlock, below
// JobSeriesLimit), more again when a job's output does not fit the scratch
// budget, and not at all (wait, with the reason) when reading the block
// alone takes longer than a job may run.
func TestSizeDownsample(t *testing.T) {
	const h = int64(time.Hour / time.Millisecond)
	src := Candidate{ID: "01HK3QGM00JS67MS0A0DFMSX3V", Stream: "s", MinT: 0, MaxT: 48 * h, Level: 2, Plannable: true, Series: 25}
	big := func(c Candidate, index, chunks uint64) Candidate {
		c.IndexBytes, c.ChunkBytes = index, chunks
		return c
	}
	cases := []struct {
		name string
		pol  Policy
		src  Candidate
		m    int
		wait string
	}{
		{"few series: one job", Policy{MaxSeriesPerPartition: 100}, src, 1, ""},
		{"25 series, 8 a partition: 4 jobs", Policy{MaxSeriesPerPartition: 8}, src, 4, ""},
		{"SingleBlock: one job below the job limit", Policy{MaxSeriesPerPartition: 8, SingleBlock: true}, src, 1, ""},
		{"output over the scratch budget: more jobs", Policy{MaxSeriesPerPartition: 100, ScratchBytes: 2 << 30}, big(src, 1<<30, 7<<30), 4, ""},
		{"the block takes too long to read: waits", Policy{MaxSeriesPerPartition: 100}, big(src, 1<<30, 20<<30), 0, "over half the"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.pol.Downsample, tc.pol.Ranges = true, []time.Duration{8 * time.Hour, 48 * time.Hour}
			d := tc.pol.Plan(DownsampleKey("s", 0, src.ID, Resolution5m), []Candidate{tc.src}, time.UnixMilli(1000*h))
			if tc.wait != "" {
				if len(d.Sources) != 0 || !strings.Contains(d.Wait, tc.wait) {
					t.Fatalf("planned %d sources (wait %q); want a wait saying %q", len(d.Sources), d.Wait, tc.wait)
				}
				return
			}
			if len(d.Sources) != 1 || d.Partitions != tc.m {
				t.Fatalf("planned %d sources in %d partitions (wait %q); want the block in %d", len(d.Sources), d.Partitions, d.Wait, tc.m)
			}
			if ok, why := tc.pol.Fits(tc.pol.EstimateDownsample(tc.src, d.Partitions)); !ok {
				t.Errorf("the planned jobs do not fit: %s", why)
			}
		})
	}
}
