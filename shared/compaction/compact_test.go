package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/equiv"
)

var created = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

// world builds source blocks for a scenario.
type world struct {
	t    *testing.T
	base string
}

func newWorld(t *testing.T) *world { return &world{t: t, base: t.TempDir()} }

func (w *world) gen(name string, o blockgen.Options) []string {
	w.t.Helper()
	blocks, err := blockgen.Generate(filepath.Join(w.base, name), o)
	if err != nil {
		w.t.Fatal(err)
	}
	var dirs []string
	for _, b := range blocks {
		dirs = append(dirs, b.Dir)
	}
	return dirs
}

// compactAll runs every partition of n over sources and returns the
// output dirs (empty partitions have none) and the results.
func (w *world) compactAll(name string, sources []string, n int) ([]string, []*Result) {
	w.t.Helper()
	out := filepath.Join(w.base, name)
	var dirs []string
	var results []*Result
	for p := 0; p < n; p++ {
		res, err := Compact(context.Background(), nil, w.job(sources, out, name, p, n))
		if err != nil {
			w.t.Fatalf("partition %d/%d: %v", p, n, err)
		}
		results = append(results, res)
		if !res.Empty {
			dirs = append(dirs, res.Dir)
		}
	}
	return dirs, results
}

func (w *world) job(sources []string, out, group string, p, n int) Job {
	j := Job{
		SourceDirs: sources, Partition: p, PartitionCount: n, OutDir: out,
		ULID:         OutputULID(created, "tenant-a", group, 1, p),
		ThanosLabels: map[string]string{"__org_id__": "tenant-a"},
	}
	if n > 1 {
		j.PartitionInfo = &blockmeta.PartitionInfo{PartitionedGroupID: 77, PartitionCount: n, PartitionID: p, PartitionedGroupCreationTime: created.Unix()}
	}
	return j
}

func checkEquivalent(t *testing.T, inputs, outputs []string) equiv.Report {
	t.Helper()
	// The jobs label their outputs __org_id__ (as the multi-tenant layout's
	// streams, where __org_id__ is a replica label, do); the inputs have
	// no labels.
	rep, err := equiv.Check(context.Background(), inputs, outputs, []string{"__org_id__"})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.InputSamples == 0 {
		t.Fatalf("not equivalent: %s", rep)
	}
	return rep
}

// checkPartitionMembership asserts every series of each output hashes into
// the output's partition.
func checkPartitionMembership(t *testing.T, results []*Result, n int) {
	t.Helper()
	for p, r := range results {
		if r.Empty {
			continue
		}
		for _, lset := range seriesOf(t, r.Dir) {
			if got := PartitionOf(lset, n); got != p {
				t.Fatalf("partition %d/%d holds %s of partition %d", p, n, lset, got)
			}
		}
	}
}

func seriesOf(t *testing.T, dir string) []labels.Labels {
	t.Helper()
	ir, err := index.NewFileReader(filepath.Join(dir, "index"), index.DecodePostingsRaw)
	if err != nil {
		t.Fatal(err)
	}
	defer ir.Close()
	k, v := index.AllPostingsKey()
	p, err := ir.Postings(context.Background(), k, v)
	if err != nil {
		t.Fatal(err)
	}
	var out []labels.Labels
	var b labels.ScratchBuilder
	for p.Next() {
		if err := ir.Series(p.At(), &b, nil); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Labels().Copy())
	}
	return out
}

func TestEquivalence(t *testing.T) {
	w := newWorld(t)
	start := blockgen.DefaultStart
	// Three ranges × RF=3 replicated ingester blocks, with histograms.
	replicated := w.gen("replicated", blockgen.Options{Tenant: "a", Blocks: 3, Series: 200, ReplicationFactor: 3, Histograms: true, Seed: 1})
	// Consecutive blocks that do not overlap.
	consecutive := w.gen("consecutive", blockgen.Options{Tenant: "a", Blocks: 4, Series: 150, Seed: 2})
	// Partial overlap with interleaved timestamps: a 30s-scrape block over
	// a 60s-scrape one with a subset of the series, plus a shifted range.
	overlapping := append(append(
		w.gen("ov-a", blockgen.Options{Tenant: "a", Blocks: 2, Series: 120, SamplesPerSeries: 120, Histograms: true, Seed: 3}),
		w.gen("ov-b", blockgen.Options{Tenant: "a", Blocks: 1, Series: 200, SamplesPerSeries: 240, Histograms: true, Seed: 4})...),
		w.gen("ov-c", blockgen.Options{Tenant: "a", Start: start.Add(time.Hour), BlockRange: time.Hour, Blocks: 2, Series: 80, SamplesPerSeries: 50, Seed: 5})...)
	// Sources that are themselves partitions of an earlier compaction with
	// a different N.
	prePartitioned := func(m int) []string {
		outs, _ := w.compactAll(fmt.Sprintf("pre-%d", m), replicated, m)
		return outs
	}
	pre2, pre8 := prePartitioned(2), prePartitioned(8)

	for _, sc := range []struct {
		name     string
		sources  []string
		original []string // ground truth inputs
	}{
		{"replicated RF=3 with histograms", replicated, replicated},
		{"consecutive", consecutive, consecutive},
		{"interleaved overlap", overlapping, overlapping},
		{"sources partitioned N=2", pre2, replicated},
		{"sources partitioned N=8", pre8, replicated},
	} {
		for _, n := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/N=%d", sc.name, n), func(t *testing.T) {
				name := strings.NewReplacer(" ", "_", "=", "").Replace(sc.name) + fmt.Sprint(n)
				outs, results := w.compactAll(name, sc.sources, n)
				checkPartitionMembership(t, results, n)
				rep := checkEquivalent(t, sc.original, outs)
				var series, samples uint64
				for _, r := range results {
					series += r.NumSeries
					samples += r.NumSamples
				}
				if series != rep.OutputSeries || samples != rep.OutputSamples {
					t.Fatalf("results count %d series %d samples, blocks hold %d/%d", series, samples, rep.OutputSeries, rep.OutputSamples)
				}
			})
		}
	}

	// Pre-partitioned sources: partitions skip the sources that cannot
	// hold them. N=4 over N=2 partitions reads one of two; N=2 over N=8
	// partitions reads four of eight.
	for _, tc := range []struct {
		sources       []string
		n, read, skip int
	}{{pre2, 4, 1, 1}, {pre8, 2, 4, 4}, {pre8, 8, 1, 7}} {
		_, results := w.compactAll(fmt.Sprintf("skip-%d-%d", len(tc.sources), tc.n), tc.sources, tc.n)
		for p, r := range results {
			if len(r.Read) != tc.read || len(r.Skipped) != tc.skip {
				t.Errorf("N=%d over %d partitions, p=%d: read %d skipped %d, want %d/%d", tc.n, len(tc.sources), p, len(r.Read), len(r.Skipped), tc.read, tc.skip)
			}
		}
	}
}

func TestRF3CompactsToOneCopy(t *testing.T) {
	w := newWorld(t)
	srcs := w.gen("rf3", blockgen.Options{Blocks: 1, Series: 100, ReplicationFactor: 3, Histograms: true})
	res, err := Compact(context.Background(), nil, w.job(srcs, filepath.Join(w.base, "out"), "g", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.NumSeries != 100 || res.NumSamples != 100*120 {
		t.Fatalf("RF=3 of 100 series × 120 samples compacted to %d series, %d samples", res.NumSeries, res.NumSamples)
	}
	m := res.Meta
	if m.Stats.NumHistogramSamples == 0 || m.Stats.NumFloatSamples+m.Stats.NumHistogramSamples != m.Stats.NumSamples {
		t.Fatalf("stats %+v", m.Stats)
	}
}

func TestOutputMeta(t *testing.T) {
	w := newWorld(t)
	srcs := w.gen("src", blockgen.Options{Blocks: 2, Series: 50, ReplicationFactor: 2, ThanosFiles: true})
	pre, _ := w.compactAll("pre", srcs, 2) // level 2, partitioned
	j := w.job(pre, filepath.Join(w.base, "out"), "g", 1, 4)
	j.Resolution = 300000
	res, err := Compact(context.Background(), nil, j)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Meta
	if m.ULID != j.ULID || filepath.Base(res.Dir) != j.ULID.String() {
		t.Fatalf("ULID %s dir %s", m.ULID, res.Dir)
	}
	if m.Compaction.Level != 3 {
		t.Fatalf("level %d, want 3", m.Compaction.Level)
	}
	var want []ulid.ULID
	for _, d := range srcs {
		sm, _ := blockmeta.ReadDir(d)
		want = append(want, sm.ULID)
	}
	slices.SortFunc(want, func(a, b ulid.ULID) int { return a.Compare(b) })
	if !slices.Equal(m.Compaction.Sources, want) {
		t.Fatalf("sources %v, want %v", m.Compaction.Sources, want)
	}
	// Parents and the time range cover the skipped source too.
	if len(m.Compaction.Parents) != 2 || len(res.Skipped) != 1 {
		t.Fatalf("parents %v skipped %v", m.Compaction.Parents, res.Skipped)
	}
	if pi, ok := m.PartitionInfo(); !ok || pi.PartitionID != 1 || pi.PartitionCount != 4 || pi.PartitionedGroupID != 77 {
		t.Fatalf("partition info %+v", pi)
	}
	if m.Thanos.Source != SourceCompactor || m.Thanos.Downsample.Resolution != 300000 || m.Thanos.Labels["__org_id__"] != "tenant-a" {
		t.Fatalf("thanos %+v", m.Thanos)
	}
	// thanos.files match the files on disk; meta.json on disk is m.
	for _, f := range m.Thanos.Files {
		fi, err := os.Stat(filepath.Join(res.Dir, f.RelPath))
		if err != nil {
			t.Fatal(err)
		}
		if f.RelPath != "meta.json" && fi.Size() != f.SizeBytes {
			t.Fatalf("%s: size %d, meta says %d", f.RelPath, fi.Size(), f.SizeBytes)
		}
	}
	onDisk, err := os.ReadFile(filepath.Join(res.Dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Marshal()
	if !bytes.Equal(onDisk, b) {
		t.Fatal("Result.Meta differs from meta.json on disk")
	}
	// Prometheus opens it.
	blk, err := tsdb.OpenBlock(nil, res.Dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	blk.Close()
	// No temporary directories remain.
	entries, _ := os.ReadDir(filepath.Join(w.base, "out"))
	if len(entries) != 1 {
		t.Fatalf("out dir holds %d entries", len(entries))
	}
}

func TestDeterministic(t *testing.T) {
	w := newWorld(t)
	srcs := append(
		w.gen("a", blockgen.Options{Blocks: 3, Series: 150, ReplicationFactor: 2, Histograms: true, Seed: 9}),
		w.gen("b", blockgen.Options{Blocks: 1, Series: 100, SamplesPerSeries: 240, Seed: 10})...)
	for _, n := range []int{1, 4} {
		for p := 0; p < n; p++ {
			first := w.job(srcs, filepath.Join(w.base, fmt.Sprintf("run1-%d", n)), "g", p, n)
			second := first
			second.OutDir = filepath.Join(w.base, fmt.Sprintf("run2-%d", n))
			// The caller's order of sources must not matter.
			second.SourceDirs = slices.Clone(srcs)
			rand.New(rand.NewSource(int64(p))).Shuffle(len(srcs), func(i, j int) {
				second.SourceDirs[i], second.SourceDirs[j] = second.SourceDirs[j], second.SourceDirs[i]
			})
			r1, err := Compact(context.Background(), nil, first)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := Compact(context.Background(), nil, second)
			if err != nil {
				t.Fatal(err)
			}
			files := []string{"index", "meta.json", "chunks/000001"}
			for _, f := range files {
				a, err1 := os.ReadFile(filepath.Join(r1.Dir, f))
				b, err2 := os.ReadFile(filepath.Join(r2.Dir, f))
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if !bytes.Equal(a, b) {
					t.Fatalf("N=%d p=%d: %s differs between runs", n, p, f)
				}
			}
			// Re-running into the same directory replaces the block with the same bytes.
			r3, err := Compact(context.Background(), nil, first)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(filepath.Join(r1.Dir, "index"))
			b, _ := os.ReadFile(filepath.Join(r3.Dir, "index"))
			if !bytes.Equal(a, b) {
				t.Fatal("rerun in place changed the index")
			}
		}
	}
}

func TestCorruptSourceFailsCleanly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(dir string) error
		want    string
		// local: the damage hits some series only, so only the partitions
		// holding them must fail.
		local bool
	}{
		{"garbage meta.json", func(d string) error {
			return os.WriteFile(filepath.Join(d, "meta.json"), []byte("{\"ulid\": \"01"), 0o644)
		}, "truncated JSON", false},
		{"missing index", func(d string) error { return os.Remove(filepath.Join(d, "index")) }, "source block", false},
		{"truncated index", func(d string) error { return truncate(filepath.Join(d, "index"), 0.5) }, "source block", false},
		{"flipped index byte", func(d string) error { return flip(filepath.Join(d, "index"), 0.3) }, "source block", true},
		{"truncated chunks", func(d string) error { return truncate(filepath.Join(d, "chunks", "000001"), 0.5) }, "block", false},
		{"missing chunks", func(d string) error { return os.Remove(filepath.Join(d, "chunks", "000001")) }, "block", false},
		{"flipped chunk byte", func(d string) error { return flip(filepath.Join(d, "chunks", "000001"), 0.6) }, "checksum mismatch", true},
	} {
		for _, thanosFiles := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/thanos.files=%v", tc.name, thanosFiles), func(t *testing.T) {
				w := newWorld(t)
				srcs := w.gen("src", blockgen.Options{Blocks: 3, Series: 100, ThanosFiles: thanosFiles})
				victim := srcs[1]
				id := filepath.Base(victim)
				if err := tc.corrupt(victim); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(w.base, "out")
				for _, n := range []int{1, 2} {
					failed := 0
					for p := 0; p < n; p++ {
						res, err := Compact(context.Background(), nil, w.job(srcs, out, "g", p, n))
						if err == nil && tc.local {
							os.RemoveAll(res.Dir)
							continue
						}
						if err == nil {
							t.Fatalf("N=%d p=%d: compacting a corrupt source succeeded", n, p)
						}
						failed++
						if !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), tc.want) {
							t.Fatalf("error should name source %s and say %q: %v", id, tc.want, err)
						}
						// The pipeline quarantines the source the error
						// blames; a meta.json it could not read names none
						// (the pipeline's come from its records, parsed).
						if blamed, ok := BlamedSource(err); tc.name != "garbage meta.json" && (!ok || blamed.String() != id) {
							t.Fatalf("error blames %v (%v), want source %s: %v", blamed, ok, id, err)
						}
						entries, _ := os.ReadDir(out)
						if len(entries) != 0 {
							t.Fatalf("left behind %v", entries)
						}
					}
					if failed == 0 {
						t.Fatalf("N=%d: no partition noticed the damage", n)
					}
				}
			})
		}
	}
}

func TestSkippedSourcesAreNeverOpened(t *testing.T) {
	w := newWorld(t)
	srcs := w.gen("src", blockgen.Options{Blocks: 2, Series: 100, Histograms: true})
	pre, _ := w.compactAll("pre", srcs, 2)
	// Destroy partition 1's index and chunks: any attempt to open it fails.
	var broken string
	for _, d := range pre {
		m, _ := blockmeta.ReadDir(d)
		if pi, _ := m.PartitionInfo(); pi.PartitionID == 1 {
			broken = d
			os.WriteFile(filepath.Join(d, "index"), []byte("garbage"), 0o644)
			os.RemoveAll(filepath.Join(d, "chunks"))
		}
	}
	for _, p := range []int{0, 2} { // partitions of 4 that only partition 0 of 2 can hold
		res, err := Compact(context.Background(), nil, w.job(pre, filepath.Join(w.base, "out"), "g", p, 4))
		if err != nil {
			t.Fatalf("p=%d: %v", p, err)
		}
		if len(res.Skipped) != 1 || res.Skipped[0].String() != filepath.Base(broken) {
			t.Fatalf("p=%d skipped %v", p, res.Skipped)
		}
	}
	if _, err := Compact(context.Background(), nil, w.job(pre, filepath.Join(w.base, "out"), "g", 1, 4)); err == nil {
		t.Fatal("partition 1 must read the broken source and fail")
	}
	// A skipped source needs nothing but its meta.json.
	metaOnly := filepath.Join(w.base, "meta-only", filepath.Base(broken))
	os.MkdirAll(metaOnly, 0o755)
	b, _ := os.ReadFile(filepath.Join(broken, "meta.json"))
	os.WriteFile(filepath.Join(metaOnly, "meta.json"), b, 0o644)
	srcs2 := []string{metaOnly}
	for _, d := range pre {
		if d != broken {
			srcs2 = append(srcs2, d)
		}
	}
	res, err := Compact(context.Background(), nil, w.job(srcs2, filepath.Join(w.base, "out2"), "g", 0, 4))
	if err != nil || len(res.Skipped) != 1 || len(res.Meta.Compaction.Parents) != 2 {
		t.Fatalf("meta-only skipped source: %+v, %v", res, err)
	}
}

func TestSourceHoldsPartition(t *testing.T) {
	meta := func(count, id int) *blockmeta.Meta {
		m := &blockmeta.Meta{}
		if count > 0 {
			m.SetPartitionInfo(&blockmeta.PartitionInfo{PartitionCount: count, PartitionID: id})
		}
		return m
	}
	for _, tc := range []struct {
		count, id, p, n int
		want            bool
	}{
		{0, 0, 3, 4, true},  // no partition_info
		{1, 0, 3, 4, true},  // unpartitioned
		{2, 0, 0, 4, true},  // hash%2==0 holds hash%4 in {0,2}
		{2, 0, 2, 4, true},  //
		{2, 0, 1, 4, false}, //
		{2, 1, 3, 4, true},  //
		{2, 1, 2, 4, false}, //
		{8, 5, 1, 4, true},  // hash%8==5 → hash%4==1
		{8, 5, 1, 2, true},  //
		{8, 5, 0, 2, false}, //
		{8, 5, 2, 4, false}, //
		{4, 2, 2, 4, true},  // same N
		{4, 2, 1, 4, false}, //
		{4, 2, 0, 1, true},  // N=1 holds everything
		{3, 1, 0, 2, true},  // not a power of two: cannot prove
		{4, 1, 0, 6, true},  //
	} {
		if got := SourceHoldsPartition(meta(tc.count, tc.id), tc.p, tc.n); got != tc.want {
			t.Errorf("source %d/%d, partition %d/%d: %v, want %v", tc.id, tc.count, tc.p, tc.n, got, tc.want)
		}
	}
	// Exhaustively: the answer is false only when no hash can be in both.
	for _, c := range []int{1, 2, 4, 8, 16} {
		for q := 0; q < c; q++ {
			for _, n := range []int{1, 2, 4, 8, 16, 64} {
				for p := 0; p < n; p++ {
					possible := false
					for h := 0; h < 64 && !possible; h++ {
						possible = h%c == q && h%n == p
					}
					if got := SourceHoldsPartition(meta(c, q), p, n); got != possible {
						t.Fatalf("source %d/%d partition %d/%d: %v want %v", q, c, p, n, got, possible)
					}
				}
			}
		}
	}
}

func TestOutputULID(t *testing.T) {
	base := OutputULID(created, "t", "g", 3, 1)
	if base != OutputULID(created, "t", "g", 3, 1) {
		t.Fatal("not deterministic")
	}
	if base.Time() != uint64(created.UnixMilli()) {
		t.Fatal("time is not createdAt")
	}
	seen := map[ulid.ULID]string{base: "base"}
	for name, id := range map[string]ulid.ULID{
		"tenant":    OutputULID(created, "u", "g", 3, 1),
		"group":     OutputULID(created, "t", "h", 3, 1),
		"version":   OutputULID(created, "t", "g", 4, 1),
		"partition": OutputULID(created, "t", "g", 3, 2),
		"split":     OutputULID(created, "tg", "", 3, 1),
	} {
		if prev, dup := seen[id]; dup {
			t.Fatalf("%s collides with %s", name, prev)
		}
		seen[id] = name
	}
}

func TestSymbolPruning(t *testing.T) {
	w := newWorld(t)
	srcs := w.gen("src", blockgen.Options{Blocks: 2, Series: 400, Histograms: true})
	for _, keep := range []bool{false, true} {
		var total int64
		for p := 0; p < 8; p++ {
			j := w.job(srcs, filepath.Join(w.base, fmt.Sprint(keep)), "g", p, 8)
			j.KeepAllSymbols = keep
			res, err := Compact(context.Background(), nil, j)
			if err != nil {
				t.Fatal(err)
			}
			used := map[string]bool{}
			for _, l := range seriesOf(t, res.Dir) {
				l.Range(func(l labels.Label) { used[l.Name], used[l.Value] = true, true })
			}
			syms := symbolsOf(t, res.Dir)
			unused := 0
			for _, s := range syms {
				if !used[s] {
					unused++
				}
			}
			if !keep && unused != 0 {
				t.Fatalf("pruned index of partition %d keeps %d unused symbols", p, unused)
			}
			if keep && unused == 0 {
				t.Fatalf("KeepAllSymbols index of partition %d has no unused symbols", p)
			}
			fi, _ := os.Stat(filepath.Join(res.Dir, "index"))
			total += fi.Size()
		}
		t.Logf("KeepAllSymbols=%v: 8 partitions' index bytes = %d", keep, total)
	}
}

func symbolsOf(t *testing.T, dir string) []string {
	ir, err := index.NewFileReader(filepath.Join(dir, "index"), index.DecodePostingsRaw)
	if err != nil {
		t.Fatal(err)
	}
	defer ir.Close()
	var out []string
	it := ir.Symbols()
	for it.Next() {
		out = append(out, strings.Clone(it.At()))
	}
	return out
}

func TestEmptyPartition(t *testing.T) {
	w := newWorld(t)
	srcs := w.gen("src", blockgen.Options{Series: 3})
	_, results := w.compactAll("out", srcs, 64)
	empty := 0
	for _, r := range results {
		if r.Empty {
			empty++
			if r.Dir != "" || r.Meta != nil {
				t.Fatal("empty result with a block")
			}
		}
	}
	if empty < 61 {
		t.Fatalf("%d empty partitions of 64 with 3 series", empty)
	}
	entries, _ := os.ReadDir(filepath.Join(w.base, "out"))
	if len(entries) != 64-empty {
		t.Fatalf("%d entries for %d non-empty partitions", len(entries), 64-empty)
	}
}

func TestInvalidJobs(t *testing.T) {
	src := newWorld(t).gen("src", blockgen.Options{Series: 3})
	good := Job{SourceDirs: src, ULID: OutputULID(created, "t", "g", 1, 0), OutDir: t.TempDir()}
	for _, tc := range []struct {
		name string
		edit func(*Job)
	}{
		{"N=3", func(j *Job) { j.PartitionCount = 3; j.PartitionInfo = &blockmeta.PartitionInfo{PartitionCount: 3} }},
		{"N=128", func(j *Job) { j.PartitionCount = 128; j.PartitionInfo = &blockmeta.PartitionInfo{PartitionCount: 128} }},
		{"p>=N", func(j *Job) { j.PartitionCount, j.Partition = 2, 2 }},
		{"no ULID", func(j *Job) { j.ULID = ulid.ULID{} }},
		{"no out dir", func(j *Job) { j.OutDir = "" }},
		{"N>1 without partition info", func(j *Job) { j.PartitionCount = 2 }},
		{"partition info mismatch", func(j *Job) {
			j.PartitionCount = 2
			j.PartitionInfo = &blockmeta.PartitionInfo{PartitionCount: 2, PartitionID: 1}
		}},
		{"duplicate source", func(j *Job) { j.SourceDirs = append(j.SourceDirs, j.SourceDirs[0]) }},
	} {
		j := good
		tc.edit(&j)
		if _, err := Compact(context.Background(), nil, j); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
	if _, err := Compact(context.Background(), nil, good); err != nil {
		t.Fatal(err)
	}
	none := good
	none.SourceDirs = nil
	if res, err := Compact(context.Background(), nil, none); err != nil || !res.Empty {
		t.Fatalf("no sources: %+v, %v", res, err)
	}
}

func TestPopulatorWorksInLeveledCompactor(t *testing.T) {
	w := newWorld(t)
	srcs := w.gen("src", blockgen.Options{Blocks: 2, Series: 120, ReplicationFactor: 2, Histograms: true})
	c, err := tsdb.NewLeveledCompactor(context.Background(), nil, nil, []int64{int64(4 * time.Hour / time.Millisecond)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(w.base, "leveled")
	var outs []string
	for p := 0; p < 4; p++ {
		ids, err := c.CompactWithBlockPopulator(dest, srcs, nil, PartitionPopulator{Partition: p, PartitionCount: 4})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			outs = append(outs, filepath.Join(dest, id.String()))
		}
	}
	checkEquivalent(t, srcs, outs)
}

func truncate(path string, frac float64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.Truncate(path, int64(float64(fi.Size())*frac))
}

func flip(path string, frac float64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b[int(float64(len(b))*frac)] ^= 0xff
	return os.WriteFile(path, b, 0o644)
}

func TestStableHashCompatible(t *testing.T) {
	// The fast filter hashes symbol bytes itself; it must agree with
	// labels.StableHash, including label sets over StableHash's 1 KiB fast path.
	w := newWorld(t)
	long := strings.Repeat("x", 700)
	var series []labels.Labels
	for i := 0; i < 300; i++ {
		kv := []string{"__name__", fmt.Sprintf("m%d", i%7), "job", fmt.Sprintf("j%d", i)}
		if i%3 == 0 {
			kv = append(kv, "big", long+fmt.Sprint(i), "bigger", long)
		}
		series = append(series, labels.FromStrings(kv...))
	}
	dir := writeSeries(t, w.base, series)
	b, err := tsdb.OpenBlock(nil, dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ir, _ := b.Index()
	defer ir.Close()
	lr, err := newLabelReader(b, ir)
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Close()
	if _, ok := lr.(*fastLabels); !ok && fastPathSafe {
		t.Fatal("expected the fast reader for a v2 index")
	}
	for _, n := range []uint64{2, 4, 8, 64} {
		got := 0
		for part := uint64(0); part < n; part++ {
			kept, err := lr.filter(context.Background(), tsdb.AllSortedPostings(context.Background(), ir), 1<<part, n, false)
			if err != nil {
				t.Fatal(err)
			}
			var bld labels.ScratchBuilder
			for _, ref := range kept {
				if err := ir.Series(ref, &bld, nil); err != nil {
					t.Fatal(err)
				}
				if h := labels.StableHash(bld.Labels()); h%n != part {
					t.Fatalf("series %s kept in %d/%d, StableHash says %d", bld.Labels(), part, n, h%n)
				}
			}
			got += len(kept)
		}
		if got != len(series) {
			t.Fatalf("N=%d: %d series kept over all partitions, want %d", n, got, len(series))
		}
	}
}

// writeSeries writes a one-sample-per-series block of the given series.
func writeSeries(t *testing.T, base string, series []labels.Labels) string {
	t.Helper()
	var list []storage.Series
	for _, l := range series {
		list = append(list, storage.NewListSeries(l, []chunks.Sample{sample{t: 1000, f: 1}}))
	}
	dir, err := tsdb.CreateBlock(list, base, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Copy() chunks.Sample           { return s }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
