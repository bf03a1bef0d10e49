package testworld

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/shared/records"
)

// checkOverlap (I2) on hand-built pairs of live blocks of one stream over
// one range: what a compaction leaves is one version's outputs; what a
// downsample leaves may be partitions of several versions, as long as no
// series can be in two of them.
func TestCheckOverlapExcusesOnlyDisjointDownsamplePartitions(t *testing.T) {
	const (
		compaction  = "beta/b478a453813ea67c#1#1796083200000@v1"
		compaction2 = "beta/b478a453813ea67c#1#1796083200000@v2"
		downsample  = "beta/263ca33491160b64#d300000#1796083200000#01M8Y75G3BAPK8MF22E2PXBHC1@v1"
		downsample2 = "beta/263ca33491160b64#d300000#1796083200000#01M8Y75G3B5NNMDS7A2P93ZQ8N@v1"
	)
	block := func(id, version string, part, count int) records.Block {
		b := records.Block{ID: id, Stream: "b478a453813ea67c", MinT: 1796083200000, MaxT: 1796083200000 + 4*3600_000, PartitionCount: count, PartitionID: part}
		if version != "" {
			b.ProducedBy = version + "/p" + string(rune('0'+part))
		}
		return b
	}
	cases := []struct {
		name string
		a, b records.Block
		bad  bool
	}{
		{"one compaction's partitions", block("A", compaction, 0, 2), block("B", compaction, 1, 2), false},
		{"a downsample beside the other partition of a compaction (seeds 15, 61)", block("A", compaction, 1, 2), block("B", downsample, 0, 2), false},
		{"the downsamples of a block's two partitions", block("A", downsample, 0, 2), block("B", downsample2, 1, 2), false},
		{"a downsample beside the same partition of a compaction", block("A", compaction, 0, 2), block("B", downsample, 0, 2), true},
		{"a downsample beside a partition it may share series with", block("A", compaction, 1, 2), block("B", downsample, 1, 4), true},
		{"a downsample beside an unpartitioned block", block("A", compaction, 0, 0), block("B", downsample, 0, 2), true},
		{"two compactions' disjoint partitions", block("A", compaction, 0, 2), block("B", compaction2, 1, 2), true},
		{"an upload beside a compaction's partition", block("A", "", 0, 0), block("B", compaction, 1, 2), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkOverlap("beta", []records.Block{c.a, c.b})
			if c.bad && (err == nil || !strings.Contains(err.Error(), "I2 violated")) {
				t.Fatalf("checkOverlap = %v, want an I2 violation", err)
			}
			if !c.bad && err != nil {
				t.Fatalf("checkOverlap = %v, want none", err)
			}
			// Blocks that do not overlap in time never violate I2.
			c.b.MinT, c.b.MaxT = c.a.MaxT, c.a.MaxT+3600_000
			if err := checkOverlap("beta", []records.Block{c.a, c.b}); err != nil {
				t.Fatalf("checkOverlap of adjacent blocks = %v, want none", err)
			}
		})
	}
}
