package cli

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A tenant's blocks are laid out on the timeline where their ranges are:
// x from minTime, width from the range, one row per level, overlapping
// blocks of a level (partitions, replicas) in lanes of their own.
func TestTimelineLayout(t *testing.T) {
	h := time.Hour.Milliseconds()
	blocks := []BlockStatus{
		{ID: "a", Level: 0, State: "LIVE", MinT: 0, MaxT: 2 * h},
		{ID: "b", Level: 0, State: "LIVE", MinT: 2 * h, MaxT: 4 * h},
		{ID: "c", Level: 1, State: "PENDING", MinT: 0, MaxT: 12 * h, PartitionCount: 2, PartitionID: 0},
		{ID: "d", Level: 1, State: "PENDING", MinT: 0, MaxT: 12 * h, PartitionCount: 2, PartitionID: 1},
		{ID: "e", Level: 0, State: "RETIRING", MinT: 2 * h, MaxT: 4 * h},
	}
	tl := layoutTimeline(blocks)
	bars := map[string]bar{}
	for _, b := range tl.Bars {
		bars[b.ID] = b
	}
	if len(bars) != 5 || tl.From != 0 || tl.To != 12*h || len(tl.Rows) != 2 {
		t.Fatalf("%d bars over [%d, %d] in %d rows; want 5 over [0, 12h] in 2", len(bars), tl.From, tl.To, len(tl.Rows))
	}
	a, b, c, d, e := bars["a"], bars["b"], bars["c"], bars["d"], bars["e"]
	if a.X != c.X || !near(b.X-a.X, a.W+1) || !near(c.W+1, 6*(a.W+1)) {
		t.Errorf("x: a %.1f+%.1f, b %.1f, c %.1f+%.1f; want a and c at 0, b 2h on, c six times as wide", a.X, a.W, b.X, c.X, c.W)
	}
	if a.Y != b.Y || e.Y == b.Y || c.Y == d.Y || c.Y <= e.Y {
		t.Errorf("y: a %.0f, b %.0f, e %.0f, c %.0f, d %.0f; want a and b in one lane, e beside b, c and d stacked below level 0", a.Y, b.Y, e.Y, c.Y, d.Y)
	}
	if c.Partition != "0/2" || d.Partition != "1/2" {
		t.Errorf("partitions %q and %q, want 0/2 and 1/2", c.Partition, d.Partition)
	}
	for _, k := range tl.Ticks {
		if k.X < float64(timelineLabels) || k.X > float64(tl.Width) {
			t.Errorf("tick %q at x %.0f, outside the plot", k.Label, k.X)
		}
	}
	if len(tl.Ticks) < 3 {
		t.Errorf("%d ticks over 12h", len(tl.Ticks))
	}
}

func near(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }

// The page shows every block on its tenant's timeline, every group with
// its partitions behind a click, the ranges waiting, what is quarantined,
// and the queues; what it shows is escaped.
func TestStatusPage(t *testing.T) {
	h := time.Hour.Milliseconds()
	rep := &StatusReport{At: time.Unix(1_800_000_000, 0), Bucket: "b", Table: "t", Tenants: []TenantStatus{{
		Tenant: "acme", LiveBlocks: 1, LiveSamples: 1000,
		Blocks:    []LevelCount{{Level: 0, States: map[string]int{"DELETED": 6}}, {Level: 1, Range: "12h", States: map[string]int{"LIVE": 1}}},
		BlockList: []BlockStatus{{ID: "01HK3QGM00JS67MS0A0DFMSX3V", Level: 1, State: "LIVE", MinT: 0, MaxT: 12 * h, Series: 10, Samples: 1000}},
		Groups: []GroupStatus{{Group: "g1", Level: 1, RangeStart: 0, RangeEnd: 12 * h, Version: 2, State: "RETIRED", Partitions: 2, Done: 2, Sources: 6,
			PartitionsRead: true, PartitionList: []PartitionStatus{{Index: 0, State: "DONE", Output: "01OUT0"}, {Index: 1, State: "DONE", Empty: true}}}},
		Waiting: []WaitingRange{{Group: "g2", Stream: `{job="<web>"}`, Level: 2, RangeStart: 12 * h, RangeEnd: 36 * h,
			ClosesAt: time.Unix(1_800_003_600, 0)}},
		Quarantined: []Quarantined{{Block: "01BAD", Reason: "checksum <mismatch>"}},
	}}, Queues: []QueueStatus{{Queue: "block-ops", DLQDepth: 2, DLQOldestSeconds: 90}}}
	var b strings.Builder
	if err := rep.RenderHTML(&b, true); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		`data-block="01HK3QGM00JS67MS0A0DFMSX3V"`, `data-level="1"`, `data-state="LIVE"`,
		`<details class="group" data-group="g1">`, `01OUT0`, `(empty: no series hash into it)`,
		`<tr class="waiting" data-group="g2"><td>L2</td><td>1970-01-01 12:00 → 1970-01-02 12:00</td><td><code>{job=&#34;&lt;web&gt;&#34;}</code></td>`,
		`looks again at 2027-01-15 09:00 UTC`, `checksum &lt;mismatch&gt;`, `<td>block-ops</td>`, `1m30s ago`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(page, "<script") {
		t.Error("the page holds a script")
	}
	rows := regexp.MustCompile(`(?s)<details class="group" data-group="g1">.*?</details>`).FindString(page)
	if n := strings.Count(rows, "<tr><td class=\"num\">"); n != 2 {
		t.Errorf("group g1 shows %d partition rows, want 2", n)
	}
	if m := regexp.MustCompile(`data-min="(\d+)" data-max="(\d+)"`).FindStringSubmatch(page); m == nil || m[2] != strconv.FormatInt(12*h, 10) {
		t.Errorf("the block's range is not on it: %v", m)
	}
}
