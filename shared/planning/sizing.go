package planning

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/shared/bytesize"
)

// Sizing defaults. DefaultScratchBytes leaves 2 GiB of Lambda's 10 GiB
// /tmp for the runtime and slack; DefaultThroughput is the conservative
// end of what a compaction job moves per second of wall time (download,
// merge, upload), measured in docs/block-engine.md ("Sizing a job");
// DefaultJobTimeout is Lambda's limit.
const (
	DefaultScratchBytes = 8 << 30
	DefaultThroughput   = 24 << 20
	DefaultJobTimeout   = 15 * time.Minute
	// DefaultSeriesChurn is the share of a later block's series taken as
	// new (not already in an earlier block of the group) when estimating a
	// group's series: see EstimateSeries.
	DefaultSeriesChurn = 0.2
)

// JobEstimate is what one partition job of a version is expected to need,
// from the sources' recorded sizes. The engine streams the chunks of every
// source the partition does not skip from S3 and its output's chunks back
// to S3, keeping none on disk; it downloads those sources' indexes and
// writes its output's index locally. So its scratch is indexes only, and
// its time is every byte it moves.
type JobEstimate struct {
	Partition, Partitions int
	// Opened is how many sources the partition reads (the rest it skips by
	// their partition_info).
	Opened int
	// ReadBytes is what it reads from S3 (indexes and chunks of the opened
	// sources); OutputBytes what it writes.
	ReadBytes, OutputBytes uint64
	// ScratchBytes is its peak local disk: the opened sources' indexes
	// and its output's index.
	ScratchBytes uint64
	// Series is the partition's share of the group's estimated series.
	Series uint64
	// Outputs is how many blocks the job writes at once (a split's N,
	// else 1): its memory is JobMemory of them (Memory).
	Outputs int
	// Duration is (ReadBytes + OutputBytes) at the policy's throughput.
	Duration time.Duration
}

// Fits reports whether the job fits the policy's limits, and if not, why:
// its scratch within ScratchBytes, twice its duration within JobTimeout,
// its series within the job series limit, its memory within MemoryBytes.
func (p Policy) Fits(e JobEstimate) (bool, string) {
	p = p.Defaults()
	switch {
	case e.Memory() > p.MemoryBytes:
		return false, memoryReason(e, p.MemoryBytes)
	case e.ScratchBytes > p.ScratchBytes:
		return false, fmt.Sprintf("partition %d of %d needs %s of scratch for indexes (%d sources read), over the %s budget",
			e.Partition, e.Partitions, bytesString(e.ScratchBytes), e.Opened, bytesString(p.ScratchBytes))
	case 2*e.Duration > p.JobTimeout:
		return false, fmt.Sprintf("partition %d of %d is estimated at %v (%s at %s/s), over half the %v job timeout",
			e.Partition, e.Partitions, e.Duration.Round(time.Second), bytesString(e.ReadBytes+e.OutputBytes), bytesString(p.Throughput), p.JobTimeout.Round(time.Second))
	case e.Series > JobSeriesLimit:
		return false, fmt.Sprintf("partition %d of %d is estimated at %d series, over the %d one job holds",
			e.Partition, e.Partitions, e.Series, JobSeriesLimit)
	}
	return true, ""
}

// Estimate sizes partition part of n of a version over srcs.
func (p Policy) Estimate(srcs []Candidate, part, n int) JobEstimate {
	p = p.Defaults()
	e := JobEstimate{Partition: part, Partitions: n, Series: EstimateSeries(srcs, p.SeriesChurn) / uint64(max(n, 1)),
		Outputs: 1}
	for _, s := range srcs {
		if !Holds(s.PartitionCount, s.PartitionID, part, n) {
			continue
		}
		e.Opened++
		e.ReadBytes += s.IndexBytes + s.ChunkBytes
		// The partition keeps the share of the source's series whose hash
		// lands in it: all of a source partitioned at least as finely, c/n
		// of one partitioned more coarsely, 1/n of an unpartitioned one.
		share := func(b uint64) uint64 {
			if c := uint64(max(s.PartitionCount, 1)); c < uint64(n) {
				return b * c / uint64(n)
			}
			return b
		}
		e.OutputBytes += share(s.IndexBytes + s.ChunkBytes)
		e.ScratchBytes += s.IndexBytes + share(s.IndexBytes)
	}
	e.Duration = time.Duration(float64(e.ReadBytes+e.OutputBytes) / float64(p.Throughput) * float64(time.Second))
	return e
}

// Holds reports whether a source partitioned as partition q of c (c = 0:
// not partitioned) can hold series of partition p of n. It holds exactly
// the series with hash % c == q; partition p wants hash % n == p. With both
// counts powers of two the smaller divides the larger, so both can hold
// for some hash iff p ≡ q (mod min(n, c)). What it cannot prove (no
// partition, counts that are not powers of two, ids out of range) answers
// true: the source is read.
func Holds(c, q, p, n int) bool {
	if c <= 1 || !powerOfTwo(n) || !powerOfTwo(c) || q < 0 || q >= c || p < 0 || p >= n {
		return true
	}
	m := min(n, c)
	return p%m == q%m
}

func powerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// EstimateSeries estimates how many distinct series a group's sources hold
// together, without summing what they share. Sources whose time ranges
// overlap are the same time from different places: replicas (the same
// series: the largest counts) or partitions of one block (disjoint series:
// each partition's largest copy counts, summed). Consecutive stretches of
// time mostly repeat the same series, so the largest stretch counts whole
// and every other one adds churn (a fraction in [0, 1]) of its series as
// new. With churn 1 it is the plain sum over stretches, an upper bound.
func EstimateSeries(srcs []Candidate, churn float64) uint64 {
	if len(srcs) == 0 {
		return 0
	}
	bs := append([]Candidate(nil), srcs...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].MinT < bs[j].MinT })
	var stretches []uint64
	for i := 0; i < len(bs); {
		end, j := bs[i].MaxT, i
		type part struct{ c, q int }
		largest := map[part]uint64{}
		for ; j < len(bs) && (j == i || bs[j].MinT < end); j++ {
			end = max(end, bs[j].MaxT)
			k := part{bs[j].PartitionCount, bs[j].PartitionID}
			largest[k] = max(largest[k], bs[j].Series)
		}
		var sum uint64
		for _, n := range largest {
			sum += n
		}
		stretches = append(stretches, sum)
		i = j
	}
	sort.Slice(stretches, func(i, j int) bool { return stretches[i] > stretches[j] })
	churn = min(max(churn, 0), 1)
	total := float64(stretches[0])
	for _, n := range stretches[1:] {
		total += churn * float64(n)
	}
	return uint64(total + 0.5)
}

func bytesString(b uint64) string { return bytesize.IEC(int64(b)) }
