package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// sourceBytes is what a job reading every block whole moves: their index
// and chunk files.
func sourceBytes(t *testing.T, blocks []blockgen.Block) uint64 {
	t.Helper()
	return blockBytes(t, blocks, func(rel string) bool {
		return rel == "index" || strings.HasPrefix(rel, "chunks"+string(filepath.Separator))
	})
}

// indexBytes is what a job reading every block downloads to its scratch
// directory: their indexes (chunks are streamed).
func indexBytes(t *testing.T, blocks []blockgen.Block) uint64 {
	t.Helper()
	return blockBytes(t, blocks, func(rel string) bool { return rel == "index" })
}

func blockBytes(t *testing.T, blocks []blockgen.Block, counts func(rel string) bool) uint64 {
	t.Helper()
	var n uint64
	for _, b := range blocks {
		err := filepath.Walk(b.Dir, func(path string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(b.Dir, path)
			if !info.IsDir() && counts(rel) {
				n += uint64(info.Size())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestJobThatWouldNotFitIsReplanned: the planner sizes a group for one
// job, but the compact function that takes the job has less time than the
// planner assumed (a shorter timeout than SLUICE_JOB_TIMEOUT says). The job
// estimates itself before reading anything, refuses, and says two
// partitions would fit; the version is superseded and re-planned with two,
// whose jobs fit and compact everything.
//
// The throughput is set so the sources (R bytes) take 120 s to move: one
// job of one partition is estimated at 2R (read + write) = 240 s, of two
// at 1.5R = 180 s. The planner allows an hour (half: 1800 s, N=1 fits);
// the compact function is given 420 s past its deadline margin, so 2 ×
// 240 does not fit and 2 × 180 does, with a minute of slack either way.
func TestJobThatWouldNotFitIsReplanned(t *testing.T) {
	t.Parallel()
	blocks, err := blockgen.Generate(t.TempDir(), blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 31, ThanosFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	throughput := max(sourceBytes(t, blocks)/120, 1)
	const margin = time.Minute
	w := testworld.New(t, testworld.Options{
		Configure: func(c *config.Config) {
			c.Policy.Ranges = []time.Duration{12 * time.Hour}
			c.Policy.Throughput, c.Policy.JobTimeout = throughput, time.Hour
			c.DeadlineMargin = margin
		},
		Pipeline: localrun.Options{Wrap: func(name string, h eventsource.Handler) eventsource.Handler {
			if name != "compact" {
				return h
			}
			return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				ctx, cancel := context.WithTimeout(ctx, margin+420*time.Second)
				defer cancel()
				return h(ctx, ev)
			}
		}},
	})
	ctx := context.Background()
	for _, b := range blocks {
		w.Upload(ctx, "acme", b.Dir)
	}
	settle(t, w, "acme")

	g := planning.GroupKey{Stream: w.Blocks(ctx, "acme")[0].Stream, Level: 1, RangeStart: day().UnixMilli()}
	versions := groupVersions(t, w, "acme", g)
	v1, v2 := versions[1], versions[2]
	if v1.Partitions != 1 || v1.State != protocol.GroupSuperseded || v1.LastErrorKind != records.FailureDoesNotFit ||
		!strings.Contains(v1.Reason, "did not fit") || !strings.Contains(v1.Reason, "2 partitions would fit") {
		t.Fatalf("v1: %d partition(s), %s, %q: %q; want one partition SUPERSEDED because its job did not fit and 2 would",
			v1.Partitions, v1.State, v1.LastErrorKind, v1.Reason)
	}
	if v2.Partitions != 2 || v2.State != protocol.GroupRetired || v2.Failures != 0 {
		t.Fatalf("v2: %d partition(s), %s with %d failures; want 2 partitions RETIRED", v2.Partitions, v2.State, v2.Failures)
	}
	live := testworld.Live(w.Blocks(ctx, "acme"))
	if len(live) != 2 {
		t.Fatalf("%d live blocks, want v2's two partitions", len(live))
	}
	for _, b := range live {
		if !strings.HasPrefix(b.ProducedBy, v2.Ref()+"/p") || b.PartitionCount != 2 {
			t.Errorf("live block %s produced by %q as partition of %d; want a partition of 2 of %s", b.ID, b.ProducedBy, b.PartitionCount, v2.Ref())
		}
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestGroupTooBigForAnyJobIsQuarantined: the sources' indexes are larger
// than the scratch budget, so every partition of any count would download
// them all (the sources are not partitioned) and none fits. The version's job
// refuses before reading anything and the group is quarantined at once —
// not after three failed attempts — with the reason status shows; the
// sources stay as they were, claimed by the version, and readable.
func TestGroupTooBigForAnyJobIsQuarantined(t *testing.T) {
	t.Parallel()
	blocks, err := blockgen.Generate(t.TempDir(), blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 32, ThanosFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	budget := indexBytes(t, blocks) / 2
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.Policy.Ranges = []time.Duration{12 * time.Hour}
		c.Policy.ScratchBytes = budget
	}})
	w.QuarantinedGroupsExpected = true
	ctx := context.Background()
	for _, b := range blocks {
		w.Upload(ctx, "acme", b.Dir)
	}
	settle(t, w, "acme")

	g := planning.GroupKey{Stream: w.Blocks(ctx, "acme")[0].Stream, Level: 1, RangeStart: day().UnixMilli()}
	head, ok, err := w.Store.GetGroup(ctx, "acme", g)
	if err != nil || !ok {
		t.Fatalf("group %s: %v, %v", g, ok, err)
	}
	if head.Version != 1 || head.State != protocol.GroupQuarantined || head.LastErrorKind != records.FailureTooBig ||
		head.Failures != 1 || !strings.Contains(head.Reason, "of scratch") || !strings.Contains(head.Reason, "no partition count") {
		t.Fatalf("group %s: v%d %s after %d failure(s) (%s): %q; want v1 QUARANTINED after one too-big refusal, saying why",
			g, head.Version, head.State, head.Failures, head.LastErrorKind, head.Reason)
	}
	for _, b := range w.Blocks(ctx, "acme") {
		if b.State != protocol.BlockClaimed || b.ClaimedBy != head.Ref() {
			t.Errorf("block %s is %s claimed by %q; want every source kept CLAIMED by %s", b.ID, b.State, b.ClaimedBy, head.Ref())
		}
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}
