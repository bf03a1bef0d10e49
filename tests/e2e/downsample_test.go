package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Downsampling end to end: four 2h blocks (native histograms among their
// series) compact to an 8h top-level block, which is downsampled to 5m by
// a version of its own. The 5m block is published in the 5m stream, byte
// for byte what the downsample engine writes from the raw block (the
// engine is held to the raw samples' windows and to Thanos' bytes in
// shared/downsample); the raw block stays, with its downsample recorded.
//
// Raw retention is shorter than the block's age, and a retention pass
// runs while the downsample is not yet planned: the raw block is held, not
// expired (Thanos #3716, #5664), and status counts it held. Once the
// downsample is published the next pass expires it; the 5m block stays.
func TestDownsamplingKeepsRawDataUntilItsDownsampleIsPublished(t *testing.T) {
	t.Parallel()
	steps := &testworld.Steps{}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: steps.Hook}, Configure: func(c *config.Config) {
		c.Policy.Ranges = []time.Duration{4 * time.Hour, 8 * time.Hour}
		c.Policy.Downsample = true
		c.Policy.DownsampleRawSpan = 6 * time.Hour
		c.Retention.Raw = time.Since(day().Add(9 * time.Hour)) // the 8h block, ending at day()+8h, is past it
		c.RetentionInterval = time.Hour                        // the test runs each pass itself
	}})
	ctx := context.Background()
	// Every downsample planning waits at its version's creation until
	// the gate opens (a retention pass asks for one too).
	gate, reached := make(chan struct{}), make(chan struct{}, 1)
	steps.Next = func(ctx context.Context, step pipeline.Step, subject string) error {
		if step != "planner.before-create" || !strings.Contains(subject, "#d300000#") {
			return nil
		}
		select {
		case reached <- struct{}{}:
		default:
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 4, Series: 25, SamplesPerSeries: 240, Seed: 81, ThanosFiles: true, Histograms: true})
	for _, b := range blocks {
		w.Upload(ctx, "acme", b.Dir)
	}
	var topID atomic.Value // the top raw block's ULID, once known
	settled := make(chan error, 1)
	go func() {
		settled <- w.Pipeline.Settle(ctx, 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
			id, _ := topID.Load().(string)
			if id == "" {
				return false, nil
			}
			b, _, err := w.Store.GetBlock(ctx, "acme", id)
			if err != nil || b.Downsampled != planning.Resolution5m || b.State != protocol.BlockLive {
				return false, err
			}
			return w.Quiescent(ctx, "acme")
		})
	}()
	select {
	case <-reached:
	case <-time.After(settleTimeout):
		t.Fatal("no downsample was planned")
	}

	top := topRawBlock(ctx, t, w)
	topID.Store(top.ID)
	if top.Level != 2 || top.State != protocol.BlockLive || top.Downsampled != 0 {
		t.Fatalf("top raw block %s: level %d, %s, downsampled %d; want level 2, LIVE, not downsampled", top.ID, top.Level, top.State, top.Downsampled)
	}
	rep, err := cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Tenants[0].Retention; r == nil || r.HeldForDownsample != 1 || r.Due != 0 {
		t.Errorf("status retention = %+v; want one block held for its downsample, none due", r)
	}
	// The pass holds the block, and asks for its downsample.
	cleaner := pipeline.Cleaner{Deps: w.Pipeline.Deps}
	if err := cleaner.Retention(ctx); err != nil {
		t.Fatal(err)
	}
	after, _, err := w.Store.GetBlock(ctx, "acme", top.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != protocol.BlockLive || after.Gen != top.Gen {
		t.Fatalf("retention moved raw block %s to %s (gen %d → %d) before its downsample was published", top.ID, after.State, top.Gen, after.Gen)
	}
	close(gate)
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	fiveMin := downsampledOf(ctx, t, w, top)
	if fiveMin.Level != top.Level || fiveMin.MinT != top.MinT || fiveMin.MaxT != top.MaxT {
		t.Errorf("5m block %s: level %d [%d, %d); want the raw block's level %d [%d, %d)", fiveMin.ID, fiveMin.Level, fiveMin.MinT, fiveMin.MaxT, top.Level, top.MinT, top.MaxT)
	}
	sameBytesAsTheEngine(ctx, t, w, top, fiveMin)
	// Every window of every series against the raw samples, while the
	// raw block is there to compare to.
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if w.ChecksMade()[testworld.CheckDownsampled] == 0 {
		t.Fatal("the downsampled block was not held to the raw samples")
	}
	rep, err = cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{Tenant: "acme", AllGroups: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Tenants[0].Groups, func(g cli.GroupStatus) bool {
		return g.Downsample == top.ID && g.To == "5m" && g.State == string(protocol.GroupRetired)
	}) {
		t.Errorf("status shows no retired downsample of %s to 5m: %+v", top.ID, rep.Tenants[0].Groups)
	}

	if err := cleaner.Retention(ctx); err != nil {
		t.Fatal(err)
	}
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", top.ID)
		return b.State == protocol.BlockDeleted, err
	}, "acme")
	if b, _, err := w.Store.GetBlock(ctx, "acme", fiveMin.ID); err != nil || b.State != protocol.BlockLive {
		t.Errorf("5m block %s is %s after raw retention (%v); want LIVE", fiveMin.ID, b.State, err)
	}
	for _, b := range blocks {
		dropUpload(w, "acme", b)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// topRawBlock is the tenant's one LIVE published raw block at the top level.
func topRawBlock(ctx context.Context, t *testing.T, w *testworld.World) records.Block {
	t.Helper()
	var top []records.Block
	for _, b := range w.Blocks(ctx, "acme") {
		if b.Level == w.Config.Policy.TopLevel() && b.State == protocol.BlockLive && b.Published && !isDownsample(b) {
			top = append(top, b)
		}
	}
	if len(top) != 1 {
		t.Fatalf("%d live top-level raw blocks, want 1: %+v", len(top), top)
	}
	return top[0]
}

func isDownsample(b records.Block) bool {
	r, err := protocol.ParsePartitionRef(b.ProducedBy)
	return err == nil && r.Group.IsDownsample()
}

// downsampledOf is the one LIVE published block a downsample of src made,
// checked for what Thanos reads in its meta.json.
func downsampledOf(ctx context.Context, t *testing.T, w *testworld.World, src records.Block) records.Block {
	t.Helper()
	var outs []records.Block
	for _, b := range w.Blocks(ctx, "acme") {
		if isDownsample(b) && b.State == protocol.BlockLive && b.Published {
			outs = append(outs, b)
		}
	}
	if len(outs) != 1 {
		t.Fatalf("%d live downsampled blocks, want 1", len(outs))
	}
	out := outs[0]
	if out.Stream == src.Stream {
		t.Errorf("5m block %s is in the raw block's stream %s", out.ID, src.Stream)
	}
	m, err := blockmeta.Parse([]byte(out.Meta), out.Key())
	if err != nil {
		t.Fatal(err)
	}
	sm, err := blockmeta.Parse([]byte(src.Meta), src.Key())
	if err != nil {
		t.Fatal(err)
	}
	if m.Thanos == nil || m.Thanos.Downsample.Resolution != planning.Resolution5m {
		t.Errorf("5m block %s meta.json: thanos %+v; want resolution %d", out.ID, m.Thanos, planning.Resolution5m)
	}
	if !slices.Equal(m.Compaction.Sources, sm.Compaction.Sources) || m.Compaction.Level != sm.Compaction.Level {
		t.Errorf("5m block %s: sources %v level %d; want the raw block's %v level %d", out.ID, m.Compaction.Sources, m.Compaction.Level, sm.Compaction.Sources, sm.Compaction.Level)
	}
	return out
}

// sameBytesAsTheEngine downsamples the raw block, as downloaded, with the
// engine on local disk and holds the pipeline's 5m block (whose chunks
// the job streamed from S3) to it: the same index and chunk bytes.
func sameBytesAsTheEngine(ctx context.Context, t *testing.T, w *testworld.World, raw, out records.Block) {
	t.Helper()
	dirs, err := w.DownloadBlocks(ctx, []records.Block{raw, out})
	if err != nil {
		t.Fatal(err)
	}
	src, err := tsdb.OpenBlock(nil, dirs[0], downsample.NewPool(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	meta, err := blockmeta.ReadDir(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	meta.Thanos.Labels = map[string]string{}
	id, err := ulid.ParseStrict(out.ID)
	if err != nil {
		t.Fatal(err)
	}
	local, err := downsample.Block(ctx, w.Env.Logger, src, meta, t.TempDir(), id, planning.Resolution5m)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Stats.NumHistogramSamples > 0 && local.Meta.Stats.NumHistogramSamples == 0 {
		t.Errorf("raw block %s holds %d native histogram samples, its downsample no histogram window", raw.ID, meta.Stats.NumHistogramSamples)
	}
	files, err := blockmeta.GatherFiles(local.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.RelPath == blockmeta.MetaFilename {
			continue
		}
		want, err := os.ReadFile(filepath.Join(local.Dir, f.RelPath))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dirs[1], f.RelPath))
		if err != nil {
			t.Fatalf("the pipeline's 5m block lacks %s: %v", f.RelPath, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s of the pipeline's 5m block differs from the engine's (%d vs %d bytes)", f.RelPath, len(got), len(want))
		}
	}
}

// A block with more series than one job is given is downsampled in
// partitions, as a compaction would write it: one 8h raw block of 25
// series (an adopted Thanos block, say: unpartitioned) with at most 8
// series a partition is downsampled by a version of 4 jobs, each keeping
// the series whose hash lands in its partition and writing partition j of
// 4 (partition_info in its meta.json). Together the 5m partitions hold
// every series once and every window of the raw samples (the invariants
// at quiescence, I2 taking disjoint partitions for what they are), and the
// raw block is recorded downsampled and kept.
func TestBigBlockIsDownsampledInPartitions(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: smallDownsampleJobs})
	ctx := context.Background()
	blocks := w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 1, BlockRange: 8 * time.Hour, Series: 25, SamplesPerSeries: 480,
		Seed: 83, ThanosFiles: true, Histograms: true})
	w.Upload(ctx, "acme", blocks[0].Dir)
	rawID := blocks[0].Meta.ULID.String()
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", rawID)
		return b.Downsampled == planning.Resolution5m, err
	}, "acme")
	raw, _, err := w.Store.GetBlock(ctx, "acme", rawID)
	if err != nil {
		t.Fatal(err)
	}
	if raw.State != protocol.BlockLive || raw.PartitionCount > 1 {
		t.Fatalf("raw block %s is %s, partition count %d; want LIVE and unpartitioned", raw.ID, raw.State, raw.PartitionCount)
	}
	var outs []records.Block
	var series uint64
	seen := map[int]bool{}
	for _, b := range w.Blocks(ctx, "acme") {
		if !isDownsample(b) || b.State != protocol.BlockLive || !b.Published {
			continue
		}
		outs = append(outs, b)
		series += b.Series
		m, err := blockmeta.Parse([]byte(b.Meta), b.Key())
		if err != nil {
			t.Fatal(err)
		}
		pi, ok := m.PartitionInfo()
		if !ok || pi.PartitionCount != 4 || b.PartitionCount != 4 || pi.PartitionID != b.PartitionID || seen[b.PartitionID] {
			t.Errorf("5m block %s: partition_info %+v (present %v), record partition %d of %d; want a distinct partition of 4", b.ID, pi, ok, b.PartitionID, b.PartitionCount)
		}
		seen[b.PartitionID] = true
		if b.MinT != raw.MinT || b.MaxT != raw.MaxT || b.Stream == raw.Stream {
			t.Errorf("5m block %s: [%d, %d) in stream %s; want the raw block's range in a stream of its own", b.ID, b.MinT, b.MaxT, b.Stream)
		}
	}
	if len(outs) < 2 || series != raw.Series {
		t.Fatalf("%d live 5m partitions holding %d series; want several, holding the raw block's %d", len(outs), series, raw.Series)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if w.ChecksMade()[testworld.CheckDownsampled] == 0 {
		t.Fatal("the downsampled partitions were not held to the raw samples")
	}
	rep, err := cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{Tenant: "acme", AllGroups: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Tenants[0].Groups, func(g cli.GroupStatus) bool {
		return g.Downsample == raw.ID && g.State == string(protocol.GroupRetired) && g.Partitions == 4
	}) {
		t.Errorf("status shows no retired 4-partition downsample of %s: %+v", raw.ID, rep.Tenants[0].Groups)
	}
}

// smallDownsampleJobs downsamples 8h raw blocks, 8 series to a job.
func smallDownsampleJobs(c *config.Config) {
	c.Policy.Ranges = []time.Duration{4 * time.Hour, 8 * time.Hour}
	c.Policy.Downsample = true
	c.Policy.DownsampleRawSpan = 6 * time.Hour
	c.Policy.MaxSeriesPerPartition = 8
}

// A block that is itself a partition, too big to downsample in one job:
// two 4h uploads of 16 series compact to an 8h block in two partitions
// (8 series each at most, as estimated), and hashing gives one of them
// more than the 8 a job may hold, so its downsample is written in
// partitions too — of partition p of 2, the partitions p + 2·j of 4. Each
// job must read the source (chaos seeds 221 and 274: it left out the
// index, and the job failed until the healthy block was quarantined).
func TestPartitionIsDownsampledInPartitions(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		smallDownsampleJobs(c)
		c.Policy.SeriesChurn = 0.01 // the 8h block's 16 series: two partitions
	}})
	ctx := context.Background()
	for _, b := range w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 2, BlockRange: 4 * time.Hour, Series: 16, SamplesPerSeries: 240,
		Seed: 221, ThanosFiles: true}) {
		w.Upload(ctx, "acme", b.Dir)
	}
	rawPartitions := func(ctx context.Context) []records.Block {
		var raw []records.Block
		for _, b := range w.Blocks(ctx, "acme") {
			if !isDownsample(b) && b.State == protocol.BlockLive && b.PartitionCount > 1 {
				raw = append(raw, b)
			}
		}
		return raw
	}
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		for _, b := range w.Blocks(ctx, "acme") {
			if b.State == protocol.BlockQuarantined {
				return false, fmt.Errorf("block %s is quarantined", b.ID)
			}
		}
		raw := rawPartitions(ctx)
		return len(raw) > 1 && !slices.ContainsFunc(raw, func(b records.Block) bool { return b.Downsampled != planning.Resolution5m }), nil
	}, "acme")
	raw := rawPartitions(ctx)
	var rawSeries, series uint64
	for _, b := range raw {
		rawSeries += b.Series
	}
	byCount := map[int]int{}
	for _, b := range w.Blocks(ctx, "acme") {
		if !isDownsample(b) || b.State != protocol.BlockLive {
			continue
		}
		series += b.Series
		byCount[b.PartitionCount]++
		src := slices.IndexFunc(raw, func(r records.Block) bool {
			return b.PartitionID%r.PartitionCount == r.PartitionID && b.MinT == r.MinT && b.MaxT == r.MaxT
		})
		if src < 0 {
			t.Errorf("5m block %s (partition %d of %d, [%d, %d)) is no partition of a raw partition %+v", b.ID, b.PartitionID, b.PartitionCount, b.MinT, b.MaxT, raw)
		}
	}
	if byCount[4] < 2 || series != rawSeries {
		t.Fatalf("live 5m blocks by partition count %v, holding %d series; want a source's downsample in partitions of 4, holding the raw partitions' %d", byCount, series, rawSeries)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if w.ChecksMade()[testworld.CheckDownsampled] == 0 {
		t.Fatal("the downsampled partitions were not held to the raw samples")
	}
}

// A raw range compacted in more partitions than the range below it, whose
// partitions were downsampled already: the finer partitions' downsamples
// replace the coarser 5m blocks. Two 2h uploads of 12 series compact to a
// 4h block in 2 partitions, each downsampled to 5m (partitions of 2).
// Two 1h uploads of 20 series, an hour apart, compact to a 3h-long block
// of the next 4h range (too short to downsample) in 4 partitions, and the
// 8h range to 4 partitions. The downsample of the 8h block's partition p
// of 4 overlaps the 5m partition p mod 2 of 2, which also holds series of
// its sibling p + 2: the two are downsampled by one version, which
// replaces the coarser block (chaos seed 1526: each partition's
// downsample waited for the coarser block to go, for ever).
func TestFinerPartitionsReplaceACoarserDownsample(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.Policy.Ranges = []time.Duration{4 * time.Hour, 8 * time.Hour}
		c.Policy.Downsample = true
		c.Policy.DownsampleRawSpan = 4 * time.Hour
		c.Policy.MaxSeriesPerPartition = 8
		c.Policy.SeriesChurn = 0.01
	}})
	ctx := context.Background()
	live := func(ctx context.Context, level int, down bool) []records.Block {
		var out []records.Block
		for _, b := range w.Blocks(ctx, "acme") {
			m, err := blockmeta.Parse([]byte(b.Meta), b.Key())
			if err != nil || m.Thanos == nil {
				t.Fatalf("block %s: no thanos section in its meta.json (%v)", b.Key(), err)
			}
			if b.State == protocol.BlockLive && b.Published && b.Level == level && (m.Thanos.Downsample.Resolution > 0) == down {
				out = append(out, b)
			}
		}
		return out
	}
	downsampled := func(level int) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			raw := live(ctx, level, false)
			return len(raw) > 1 && !slices.ContainsFunc(raw, func(b records.Block) bool { return b.Downsampled != planning.Resolution5m }), nil
		}
	}
	for _, b := range w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 2, BlockRange: 2 * time.Hour, Series: 12, SamplesPerSeries: 120,
		Seed: 1526, ThanosFiles: true}) {
		w.Upload(ctx, "acme", b.Dir)
	}
	settleUntil(t, w, downsampled(1), "acme")
	coarse := live(ctx, 1, true)
	if len(coarse) != 2 || coarse[0].PartitionCount != 2 {
		t.Fatalf("the first 4h block's downsample is %d 5m blocks (the first of %d partitions); want its 2 partitions", len(coarse), coarse[0].PartitionCount)
	}
	for i, start := range []time.Duration{4 * time.Hour, 6 * time.Hour} {
		for _, b := range w.Generate(blockgen.Options{Tenant: "acme", Start: day().Add(start), Blocks: 1, BlockRange: time.Hour, Series: 20,
			SamplesPerSeries: 60, Seed: 1527 + int64(i), ThanosFiles: true}) {
			w.Upload(ctx, "acme", b.Dir)
		}
	}
	settleUntil(t, w, downsampled(2), "acme")
	raw := live(ctx, 2, false)
	if len(raw) < 3 || raw[0].PartitionCount < 4 {
		t.Fatalf("the 8h block is %d partitions of %d; want at least 4 partitions (some may hold no series)", len(raw), raw[0].PartitionCount)
	}
	for _, b := range coarse {
		cur, _, err := w.Store.GetBlock(ctx, "acme", b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.State == protocol.BlockLive {
			t.Errorf("the coarser 5m block %s (partition %d of %d) is still live beside the 8h block's downsample", b.ID, b.PartitionID, b.PartitionCount)
		}
	}
	// Every partition of the 8h block's series is in a 5m block or
	// recorded empty by one (a job that found none of its series), which
	// is what lets the 5m stream merge them later (planning's
	// partialSource).
	fine := 1
	fives := live(ctx, 2, true)
	for _, b := range fives {
		fine = max(fine, b.PartitionCount)
	}
	for r := range fine {
		if !slices.ContainsFunc(fives, func(b records.Block) bool {
			return planning.Holds(b.PartitionCount, b.PartitionID, r, fine) || slices.Contains(b.EmptyPartitions, r%max(b.PartitionCount, 1))
		}) {
			t.Errorf("partition %d of %d of the 8h block's series is in no 5m block and recorded empty by none", r, fine)
		}
	}
	groups, err := w.Store.TenantGroups(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	together := 0
	for _, g := range groups {
		if g.Key.IsDownsample() && slices.ContainsFunc(raw, func(b records.Block) bool { return b.ID == g.Key.Block }) {
			if n := len(slices.DeleteFunc(slices.Clone(g.Sources), func(id string) bool {
				return !slices.ContainsFunc(raw, func(b records.Block) bool { return b.ID == id })
			})); n > 1 {
				together++
			}
		}
	}
	if together == 0 {
		t.Error("no downsample version took an 8h partition's siblings with it")
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if w.ChecksMade()[testworld.CheckDownsampled] == 0 {
		t.Fatal("the downsampled partitions were not held to the raw samples")
	}
}
