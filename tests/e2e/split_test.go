package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// lines returns the JSON log lines with message msg.
func (l *logLines) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// blockBytes is a block's index and chunk bytes as its record lists them.
func recordBytes(b records.Block) uint64 {
	var n uint64
	for _, f := range b.Files {
		if f.RelPath == "index" || strings.HasPrefix(f.RelPath, "chunks/") {
			n += uint64(max(f.Size, 0))
		}
	}
	return n
}

// TestBigBlocksAreSplitOnArrival: uploads big enough to be split (the
// threshold lowered to a byte, the partition limit to 20 series, so that
// a half day of 30-series blocks is compacted in 4 partitions) are each
// split by one job of their own into 4 partition blocks, read once; the
// half day's group then compacts them with each of its 4 jobs reading
// only its own partition of every block. Every byte of the uploads is read
// twice over in all — once by the splits, once as their partitions by the
// group — where compacting them directly would have read it 4 times; and
// the live blocks hold exactly the uploaded samples.
func TestBigBlocksAreSplitOnArrival(t *testing.T) {
	t.Parallel()
	logs := &logLines{}
	w := testworld.New(t, testworld.Options{
		Pipeline: localrun.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))},
		Configure: func(c *config.Config) {
			c.Policy.Ranges = []time.Duration{12 * time.Hour}
			c.Policy.MaxSeriesPerPartition = 20
			c.Policy.SplitBytes = 1
		},
	})
	ctx := context.Background()
	uploads := halfDay(ctx, w, "acme", 81)
	settle(t, w, "acme")

	all := byID(w.Blocks(ctx, "acme"))
	var uploaded uint64
	splits := map[string]bool{}
	for _, u := range uploads {
		id := u.Meta.ULID.String()
		b := all[id]
		uploaded += recordBytes(b)
		g := planning.SplitKey(b.Stream, b.MinT, id)
		head, ok, err := w.Store.GetGroup(ctx, "acme", g)
		if err != nil || !ok {
			t.Fatalf("upload %s has no split group %s: %v", id, g, err)
		}
		if head.Version != 1 || head.State != protocol.GroupRetired || head.Partitions != 4 || len(head.Sources) != 1 || head.Sources[0] != id {
			t.Errorf("split %s: v%d %s, %d partitions, sources %v; want v1 RETIRED splitting %s in 4", g, head.Version, head.State, head.Partitions, head.Sources, id)
		}
		if b.State != protocol.BlockDeleted {
			t.Errorf("upload %s is %s; want it retired by its split and DELETED", id, b.State)
		}
		splits[g.String()] = true
	}

	var parts []records.Block
	var partBytes uint64
	for _, b := range all {
		if strings.Contains(b.ProducedBy, "#0#") {
			parts = append(parts, b)
			partBytes += recordBytes(b)
			if b.Level != 0 || b.PartitionCount != 4 || b.State != protocol.BlockDeleted {
				t.Errorf("split output %s: level %d, partition %d of %d, %s; want a level-0 partition of 4, compacted and DELETED", b.ID, b.Level, b.PartitionID, b.PartitionCount, b.State)
			}
		}
	}
	if len(parts) != 4*len(uploads) {
		t.Fatalf("%d split outputs, want 4 for each of the %d uploads", len(parts), len(uploads))
	}
	g := planning.GroupKey{Stream: parts[0].Stream, Level: 1, RangeStart: day().UnixMilli()}
	head, _, err := w.Store.GetGroup(ctx, "acme", g)
	if err != nil {
		t.Fatal(err)
	}
	if head.Version != 1 || head.State != protocol.GroupRetired || head.Partitions != 4 || len(head.Sources) != len(parts) {
		t.Errorf("group %s: v%d %s, %d partitions, %d sources; want v1 RETIRED over the %d split outputs in 4", g, head.Version, head.State, head.Partitions, len(head.Sources), len(parts))
	}
	live := testworld.Live(w.Blocks(ctx, "acme"))
	if len(live) != 4 {
		t.Errorf("%d live blocks, want the group's 4 partitions", len(live))
	}

	// What each job read, from its own log line.
	var splitRead, groupRead uint64
	for _, l := range logs.lines(t, "partitions compacted and uploaded") {
		read := uint64(l["readBytes"].(float64))
		switch group := l["group"].(string); {
		case splits[group]:
			splitRead += read
			if n := l["partitions"].(float64); n != 4 {
				t.Errorf("split job of %s wrote %v partitions, want all 4 in one pass", group, n)
			}
		case group == g.String():
			groupRead += read
		default:
			t.Errorf("a job of group %s, neither a split nor the half day's", group)
		}
	}
	for _, l := range logs.lines(t, "source indexes downloaded") {
		if l["group"] == g.String() && (l["read"].(float64) != float64(len(uploads)) || l["skippedByPartitionInfo"].(float64) != float64(3*len(uploads))) {
			t.Errorf("a job of %s read %v sources and skipped %v; want its own partition of each of the %d splits read, the other 3 skipped",
				g, l["read"], l["skippedByPartitionInfo"], len(uploads))
		}
	}
	if splitRead != uploaded {
		t.Errorf("the splits read %d bytes; want each upload read once: %d", splitRead, uploaded)
	}
	if groupRead != partBytes {
		t.Errorf("the group's jobs read %d bytes; want each split output read once: %d", groupRead, partBytes)
	}
	t.Logf("uploads %d bytes; read by the splits %d, by the group %d: %.2f × the uploads (direct: 4 ×)",
		uploaded, splitRead, groupRead, float64(splitRead+groupRead)/float64(uploaded))
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}
