// Package bench measures the block engine against plain Prometheus
// compaction on one shared input, in one process, and prints a table.
//
//	make bench    # go test ./tests/bench -run '^$' -bench . -benchtime 1x
//
// Environment: SLUICE_BENCH_SERIES (default 20000), SLUICE_BENCH_SOURCES (6),
// SLUICE_BENCH_SAMPLES (120 per series per source), SLUICE_BENCH_RF (1:
// consecutive 2h blocks; 3: sources/3 ranges × 3 replicas, overlapping),
// SLUICE_BENCH_REPEAT (2: the best of this many runs is reported).
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/compaction"
)

type input struct {
	base    string
	dirs    []string
	samples uint64
	desc    string
}

var (
	inputOnce sync.Once
	shared    input
	inputErr  error

	resultsMu sync.Mutex
	results   = map[string]*result{}
	order     []string
)

type result struct {
	wall       time.Duration
	cpu        time.Duration // user+system CPU of the process
	peakHeap   uint64        // of one job (max over partitions)
	indexBytes int64         // summed over outputs
	outSamples uint64
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func sharedInput(b *testing.B) input {
	inputOnce.Do(func() {
		series, sources, samples, rf := envInt("SLUICE_BENCH_SERIES", 20000), envInt("SLUICE_BENCH_SOURCES", 6),
			envInt("SLUICE_BENCH_SAMPLES", 120), envInt("SLUICE_BENCH_RF", 1)
		base, err := os.MkdirTemp("", "sluice-bench-*")
		if err != nil {
			inputErr = err
			return
		}
		shared.base = base
		start := time.Now()
		blocks, err := blockgen.Generate(filepath.Join(base, "in"), blockgen.Options{
			Tenant: "bench", Blocks: max(sources/rf, 1), ReplicationFactor: rf, Series: series,
			SamplesPerSeries: samples, Histograms: true, Seed: 42, ThanosFiles: true,
		})
		if err != nil {
			inputErr = err
			return
		}
		var hist uint64
		for _, bl := range blocks {
			shared.dirs = append(shared.dirs, bl.Dir)
			shared.samples += bl.Meta.Stats.NumSamples
			hist += bl.Meta.Stats.NumHistogramSamples
		}
		layout := "consecutive 2h blocks"
		if rf > 1 {
			layout = fmt.Sprintf("%d ranges × RF=%d overlapping replicas", max(sources/rf, 1), rf)
		}
		shared.desc = fmt.Sprintf("%d sources × %d series × %d samples = %.1fM samples (%s, %.0f%% native-histogram samples); generated in %s",
			len(blocks), series, samples, float64(shared.samples)/1e6, layout, 100*float64(hist)/float64(shared.samples), time.Since(start).Round(time.Millisecond))
	})
	if inputErr != nil {
		b.Fatal(inputErr)
	}
	return shared
}

func record(name string, r result) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	prev, ok := results[name]
	if !ok {
		order = append(order, name)
		results[name] = &r
		return
	}
	// Keep the best run.
	prev.wall = min(prev.wall, r.wall)
	prev.cpu = min(prev.cpu, r.cpu)
	prev.peakHeap = min(prev.peakHeap, r.peakHeap)
}

// timed runs fn with the default GC settings and returns its wall time
// and the CPU time (user+system, all threads, GC included) the process
// spent meanwhile. On a shared machine CPU time is the steadier measure.
func timed(fn func() error) (wall, cpu time.Duration, err error) {
	runtime.GC()
	c0 := cpuTime()
	start := time.Now()
	err = fn()
	return time.Since(start), cpuTime() - c0, err
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakHeap runs fn with GOGC=5, so that heap objects track live memory
// closely instead of the garbage a default GC cycle lets pile up, and
// returns the peak of heap objects above the level before it, sampled
// every millisecond.
func peakHeap(fn func() error) (time.Duration, uint64, error) {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	err := fn()
	wall := time.Since(start)
	close(done)
	wg.Wait()
	if peak < base {
		return wall, 0, err
	}
	return wall, peak - base, err
}

func repeats() int { return envInt("SLUICE_BENCH_REPEAT", 2) }

func indexSize(dir string) int64 {
	fi, err := os.Stat(filepath.Join(dir, blockmeta.IndexFilename))
	if err != nil {
		return 0
	}
	return fi.Size()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func BenchmarkPlainLeveledCompactor(b *testing.B) {
	in := sharedInput(b)
	for i := 0; i < b.N; i++ {
		for r := 0; r <= repeats(); r++ {
			dest := filepath.Join(in.base, "plain")
			os.RemoveAll(dest)
			var out string
			var outSamples uint64
			job := func() error {
				c, err := tsdb.NewLeveledCompactor(context.Background(), nil, quiet, []int64{int64(24 * time.Hour / time.Millisecond)}, nil, nil)
				if err != nil {
					return err
				}
				ids, err := c.Compact(dest, in.dirs, nil)
				if err == nil && len(ids) == 1 {
					out = filepath.Join(dest, ids[0].String())
				}
				return err
			}
			// Runs 0..repeats-1 are timed; the last one measures memory.
			var wall, cpu time.Duration
			var peak uint64 = math.MaxUint64
			var err error
			if r < repeats() {
				wall, cpu, err = timed(job)
			} else {
				wall, cpu = math.MaxInt64, math.MaxInt64
				_, peak, err = peakHeap(job)
			}
			if err != nil {
				b.Fatal(err)
			}
			if m, err := blockmeta.ReadDir(out); err == nil {
				outSamples = m.Stats.NumSamples
			}
			record("plain", result{wall: wall, cpu: cpu, peakHeap: peak, indexBytes: indexSize(out), outSamples: outSamples})
		}
	}
}

func runPartitions(b *testing.B, name string, n int, keepAll bool) {
	in := sharedInput(b)
	for i := 0; i < b.N; i++ {
		for r := 0; r <= repeats(); r++ {
			dest := filepath.Join(in.base, name)
			os.RemoveAll(dest)
			var (
				total   time.Duration
				cpuSum  time.Duration
				maxPeak uint64
				idx     int64
				samples uint64
			)
			for p := 0; p < n; p++ {
				job := compaction.Job{
					SourceDirs: in.dirs, Partition: p, PartitionCount: n, OutDir: dest,
					ULID:           compaction.OutputULID(time.Unix(1700000000, 0), "bench", "g", 1, p),
					KeepAllSymbols: keepAll,
				}
				if n > 1 {
					job.PartitionInfo = &blockmeta.PartitionInfo{PartitionCount: n, PartitionID: p}
				}
				var res *compaction.Result
				run := func() (err error) {
					res, err = compaction.Compact(context.Background(), quiet, job)
					return err
				}
				var wall, cpu time.Duration
				var peak uint64
				var err error
				if r < repeats() {
					wall, cpu, err = timed(run)
				} else {
					_, peak, err = peakHeap(run)
				}
				if err != nil {
					b.Fatal(err)
				}
				total += wall
				cpuSum += cpu
				maxPeak = max(maxPeak, peak)
				if !res.Empty {
					idx += indexSize(res.Dir)
					samples += res.NumSamples
				}
			}
			if r < repeats() {
				maxPeak = math.MaxUint64
			} else {
				total, cpuSum = math.MaxInt64, math.MaxInt64
			}
			record(name, result{wall: total, cpu: cpuSum, peakHeap: maxPeak, indexBytes: idx, outSamples: samples})
		}
	}
}

func BenchmarkPartitioned(b *testing.B) {
	for _, n := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { runPartitions(b, fmt.Sprintf("N=%d", n), n, false) })
	}
}

func BenchmarkPartitionedKeepAllSymbols(b *testing.B) {
	for _, n := range []int{4, 8} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			runPartitions(b, fmt.Sprintf("N=%d keep-all-symbols", n), n, true)
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if len(order) > 0 {
		printTable(os.Stdout)
	}
	if shared.base != "" {
		os.RemoveAll(shared.base)
	}
	os.Exit(code)
}

func printTable(w io.Writer) {
	plain := results["plain"]
	fmt.Fprintf(w, "\nSluice block engine — input: %s\nGOMAXPROCS=%d; wall and CPU are the best of %d runs; partition rows run all N jobs one after another;\nCPU is user+system time of the process (GC included); peak heap is of one job (max over partitions),\nmeasured in a separate run with GOGC=5 so it tracks live memory.\n\n",
		shared.desc, runtime.GOMAXPROCS(0), repeats())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "job\twall\tMsamples/s\twall × plain\tCPU\tCPU × plain\tpeak heap MiB\theap × plain\tindex bytes\tindex × plain\toutput samples\t")
	for _, name := range order {
		r := results[name]
		ratio, cpuRatio, heap, idx := "-", "-", "-", "-"
		if plain != nil {
			ratio = fmt.Sprintf("%.2f", r.wall.Seconds()/plain.wall.Seconds())
			cpuRatio = fmt.Sprintf("%.2f", r.cpu.Seconds()/plain.cpu.Seconds())
			heap = fmt.Sprintf("%.2f", float64(r.peakHeap)/float64(plain.peakHeap))
			idx = fmt.Sprintf("%.3f", float64(r.indexBytes)/float64(plain.indexBytes))
		}
		label := name
		if name == "plain" {
			label = "plain LeveledCompactor.Compact"
		}
		fmt.Fprintf(tw, "%s\t%.2fs\t%.2f\t%s\t%.2fs\t%s\t%.1f\t%s\t%d\t%s\t%d\t\n", label, r.wall.Seconds(),
			float64(shared.samples)/r.wall.Seconds()/1e6, ratio, r.cpu.Seconds(), cpuRatio, float64(r.peakHeap)/(1<<20), heap, r.indexBytes, idx, r.outSamples)
	}
	tw.Flush()
	if a, b := results["N=4"], results["N=4 keep-all-symbols"]; a != nil && b != nil {
		fmt.Fprintf(w, "\nsymbol pruning: N=4 index bytes %d vs %d unpruned (%.1f%% smaller)", a.indexBytes, b.indexBytes, 100*(1-float64(a.indexBytes)/float64(b.indexBytes)))
	}
	if a, b := results["N=8"], results["N=8 keep-all-symbols"]; a != nil && b != nil {
		fmt.Fprintf(w, "; N=8 %d vs %d (%.1f%% smaller)", a.indexBytes, b.indexBytes, 100*(1-float64(a.indexBytes)/float64(b.indexBytes)))
	}
	fmt.Fprintln(w, strings.Repeat("", 0))
}
