package health_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/health"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

const st = "s1" // a stream id

var day = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// block is a 2h level-0 upload starting at day+startH hours, arrived at
// day+arrivedH hours.
func block(id string, startH, arrivedH float64) records.Block {
	from := day.Add(time.Duration(startH * float64(time.Hour)))
	return records.Block{Tenant: "t", ID: id, Stream: st, Level: 0, State: protocol.BlockLive, Published: true,
		MinT: from.UnixMilli(), MaxT: from.Add(2 * time.Hour).UnixMilli(),
		Arrived: day.Add(time.Duration(arrivedH * float64(time.Hour))).UnixMilli()}
}

func with(b records.Block, f func(*records.Block)) records.Block { f(&b); return b }

// TestOldestUncompacted: a level-0 block counts as behind only from the
// moment the planner would have compacted its 12h range — the range's end,
// or its last arrival if later, plus the 1h close delay — and only when
// it has something to be merged with.
func TestOldestUncompacted(t *testing.T) {
	pol := planning.Policy{}.Defaults() // 12h and 24h ranges, 1h close delay
	cases := []struct {
		name      string
		blocks    []records.Block
		now       time.Time
		want      time.Duration
		wantBlock string
	}{
		{"range still open", []records.Block{block("a", 0, 2), block("b", 2, 4)}, day.Add(10 * time.Hour), 0, ""},
		{"closed, inside the close delay", []records.Block{block("a", 0, 2), block("b", 2, 4)}, day.Add(12*time.Hour + 30*time.Minute), 0, ""},
		{"closed and overdue", []records.Block{block("a", 0, 2), block("b", 2, 4)}, day.Add(16 * time.Hour), 3 * time.Hour, "a"},
		{"the worst range wins", []records.Block{block("a", 0, 2), block("b", 2, 4), block("c", 12, 14), block("d", 14, 16)},
			day.Add(30 * time.Hour), 17 * time.Hour, "a"},
		{"backfill: due from its last arrival", []records.Block{block("a", 0, 100), block("b", 2, 101)},
			day.Add(104 * time.Hour), 2 * time.Hour, "a"},
		{"a single block has nothing to merge", []records.Block{block("a", 0, 2)}, day.Add(48 * time.Hour), 0, ""},
		{"a late block beside the range's output", []records.Block{
			block("late", 0, 20),
			with(block("out", 0, 13), func(b *records.Block) { b.Level, b.MaxT = 1, day.Add(12*time.Hour).UnixMilli() }),
		}, day.Add(23 * time.Hour), 2 * time.Hour, "late"},
		{"no-compact blocks never compact", []records.Block{
			with(block("a", 0, 2), func(b *records.Block) { b.NoCompact = true }), block("b", 2, 4),
		}, day.Add(48 * time.Hour), 0, ""},
		{"retired blocks are done", []records.Block{
			with(block("a", 0, 2), func(b *records.Block) { b.State = protocol.BlockRetiring }),
			with(block("b", 2, 4), func(b *records.Block) { b.State = protocol.BlockDeleted }),
		}, day.Add(48 * time.Hour), 0, ""},
		{"claimed blocks still wait", []records.Block{
			with(block("a", 0, 2), func(b *records.Block) { b.State = protocol.BlockClaimed }),
			with(block("b", 2, 4), func(b *records.Block) { b.State = protocol.BlockClaimed }),
		}, day.Add(14 * time.Hour), time.Hour, "a"},
		{"a block across the 12h boundary is never a source", []records.Block{block("x", 11, 13), block("b", 2, 4)},
			day.Add(48 * time.Hour), 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := health.Tenant(pol, "t", c.blocks, nil, nil, c.now)
			if f.OldestUncompacted != c.want || f.OldestBlock != c.wantBlock {
				t.Errorf("oldest uncompacted %v (%q), want %v (%q)", f.OldestUncompacted, f.OldestBlock, c.want, c.wantBlock)
			}
		})
	}
}

// TestGroupFigures: planned partitions come from unfinished versions
// only; quarantine and churn are counted.
func TestGroupFigures(t *testing.T) {
	g := func(start int64, v int64, s protocol.GroupState) records.Group {
		return records.Group{Tenant: "t", Key: planning.GroupKey{Stream: st, Level: 1, RangeStart: start}, Version: v, State: s}
	}
	groups := []records.Group{
		g(0, 3, protocol.GroupPlanned),
		g(1, 1, protocol.GroupComplete),
		g(2, 7, protocol.GroupRetired),
		g(3, 2, protocol.GroupQuarantined),
	}
	undone := map[string]int{groups[0].Key.String(): 2, groups[1].Key.String(): 1, groups[2].Key.String(): 9}
	blocks := []records.Block{block("a", 0, 2), with(block("q", 2, 4), func(b *records.Block) { b.State = protocol.BlockQuarantined })}
	f := health.Tenant(planning.Policy{}, "t", blocks, groups, undone, day)
	want := health.Figures{Tenant: "t", Planned: 3, QuarantinedBlocks: 1, QuarantinedGroups: 1, MaxVersion: 3, Live: 1}
	if f != want {
		t.Errorf("figures %+v, want %+v", f, want)
	}
	vals := f.Values()
	if len(vals) != 6 {
		t.Fatalf("%d values", len(vals))
	}
	for _, v := range vals {
		if len(v.Dims) != 1 || v.Dims[0] != "t" {
			t.Errorf("%s dims %v, want the tenant", v.Metric.Name, v.Dims)
		}
	}
}
