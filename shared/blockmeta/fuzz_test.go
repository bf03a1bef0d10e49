package blockmeta

import (
	"errors"
	"testing"
)

// FuzzParse: no meta.json, however malformed, makes Parse panic; every
// error wraps ErrInvalid; and what Parse accepts survives a round trip —
// it marshals, parses again, and keeps its identity (ULID, time range,
// partition_info), so a meta.json Sluice re-publishes says what it read.
// Seed corpus: testdata/fuzz/FuzzParse (Prometheus, Thanos, Cortex shapes,
// and the ways they break).
func FuzzParse(f *testing.F) {
	f.Add([]byte(foreignMeta))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data, "fuzz/01JABCDEFGHJKMNPQRSTVWXYZ0")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		out, err := m.Marshal()
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal it: %v", data, err)
		}
		again, err := Parse(out, "fuzz/again")
		if err != nil {
			t.Fatalf("re-marshalled %q does not parse: %v", out, err)
		}
		if again.ULID != m.ULID || again.MinTime != m.MinTime || again.MaxTime != m.MaxTime {
			t.Fatalf("round trip changed the block: %v [%d,%d) → %v [%d,%d)", m.ULID, m.MinTime, m.MaxTime, again.ULID, again.MinTime, again.MaxTime)
		}
		p1, ok1 := m.PartitionInfo()
		p2, ok2 := again.PartitionInfo()
		if ok1 != ok2 || p1.PartitionCount != p2.PartitionCount || p1.PartitionID != p2.PartitionID ||
			p1.PartitionedGroupID != p2.PartitionedGroupID || p1.PartitionedGroupCreationTime != p2.PartitionedGroupCreationTime {
			t.Fatalf("round trip changed partition_info: %+v (%v) → %+v (%v)", p1, ok1, p2, ok2)
		}
	})
}
