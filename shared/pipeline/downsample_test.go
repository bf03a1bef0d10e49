package pipeline

import (
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/records"
)

// A downsample version's jobs map to its members (the raw blocks of its
// stream among its sources, in ULID order), m each, and their outputs to
// partitions of m·n; the partitions a completed version leaves empty are
// its own empty jobs' outputs and its members' recorded empty partitions,
// carried to that count. A compaction records only its own.
func TestDownsampleJobsAndEmptyPartitions(t *testing.T) {
	const raw, five = "raw", "5m"
	member := func(id string, n, p int, empty ...int) records.Block {
		return records.Block{ID: id, Stream: raw, PartitionCount: n, PartitionID: p, EmptyPartitions: empty}
	}
	coarse := records.Block{ID: "A0", Stream: five, PartitionCount: 2}
	down := func(block string, jobs int) records.Group {
		return records.Group{Key: planning.DownsampleKey(raw, 0, block, planning.Resolution5m), Partitions: jobs}
	}
	parts := func(empty ...int) func(n int) []records.Partition {
		return func(n int) []records.Partition {
			var out []records.Partition
			for i := range n {
				out = append(out, records.Partition{Index: i, Empty: slices.Contains(empty, i)})
			}
			return out
		}
	}
	type job struct{ src, count, id int }
	cases := []struct {
		name  string
		head  records.Group
		srcs  []records.Block
		parts func(int) []records.Partition
		jobs  []job // member index, output partition count and id, by job
		empty []int
	}{
		{"one member, one job", down("C0", 1), []records.Block{member("C0", 4, 0, 2), coarse}, parts(), []job{{0, 4, 0}}, []int{2}},
		{"one member, two jobs, one empty", down("C1", 2), []records.Block{member("C1", 4, 1), coarse}, parts(1), []job{{0, 8, 1}, {0, 8, 5}}, []int{5}},
		{"two members in ULID order, the key's second", down("C2", 4), []records.Block{coarse, member("C2", 4, 2, 1), member("C0", 4, 0, 1)}, parts(3),
			[]job{{0, 8, 0}, {0, 8, 4}, {1, 8, 2}, {1, 8, 6}}, []int{1, 5, 6}},
		{"an unpartitioned member", down("U", 2), []records.Block{member("U", 0, 0)}, parts(0), []job{{0, 2, 0}, {0, 2, 1}}, []int{0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			members := downsampleMembers(tc.head, tc.srcs)
			for k, want := range tc.jobs {
				j, err := downsampleJobOf(tc.head, tc.srcs, k)
				if err != nil {
					t.Fatal(err)
				}
				if count, id := j.output(); j.src.ID != members[want.src].ID || count != want.count || id != want.id {
					t.Errorf("job %d: member %s, output %d of %d; want %s, %d of %d", k, j.src.ID, id, count, members[want.src].ID, want.id, want.count)
				}
			}
			if got := emptyPartitions(tc.head, tc.parts(tc.head.Partitions), tc.srcs); !slices.Equal(got, tc.empty) {
				t.Errorf("empty partitions %v, want %v", got, tc.empty)
			}
		})
	}
	if _, err := downsampleJobOf(down("C0", 3), []records.Block{member("C0", 4, 0), member("C2", 4, 2)}, 0); err == nil {
		t.Error("3 jobs over 2 members: no error")
	}
	if _, err := downsampleJobOf(down("X", 1), []records.Block{member("C0", 4, 0)}, 0); err == nil {
		t.Error("the key's block not a member: no error")
	}
	compaction := records.Group{Key: planning.GroupKey{Stream: raw, Level: 2}, Partitions: 4}
	if got := emptyPartitions(compaction, parts(2)(4), []records.Block{member("A0", 2, 0, 1)}); !slices.Equal(got, []int{2}) {
		t.Errorf("a compaction's empty partitions %v, want its own [2]", got)
	}
}
