// Package scale is `make bench-scale` (issue 11), not part of `make test`:
// one group of 12 × 2h blocks with at least 500k series and 1 GiB of
// chunks, compacted in N = 8 partitions through the real S3 path — the
// SDK's requests over HTTP to an AWS-protocol emulator — directly, and
// with every block split on arrival, each compaction job in a process of
// its own, as a Lambda runs it, beside plain tsdb.LeveledCompactor over
// the same blocks on local disk. It prints, for each job, peak scratch,
// peak RSS, bytes read from S3, wall and CPU, and the goals as
// ratios; every output is checked sample by sample against the uploads
// (testworld's I1).
//
// The emulator is the in-memory one (localstack/memaws) served on a port
// of its own: moto deep-copies a bucket's version lists on every LIST, and
// with the bench's 2.8 GB in the bucket one LIST of one block's prefix took
// 58 s, so registrations outlived the planner's minute. SLUICE_SCALE_BACKEND=
// emulator runs against AWS_ENDPOINT_URL instead (moto or LocalStack),
// for a smaller input.
//
//	make bench-scale                              # 500k series, 12 blocks, N = 8
//	SLUICE_SCALE_SERIES=20000 make bench-scale    # a quick run
//
// Environment: SLUICE_SCALE_SERIES (500000), SLUICE_SCALE_BLOCKS (12),
// SLUICE_SCALE_SAMPLES (120 per series per block), SLUICE_SCALE_N (8),
// SLUICE_SCALE_MODES (direct,split), SLUICE_SCALE_CPUPROFILE (a directory: a
// CPU profile of every job process), SLUICE_SCALE_DIR (where the input is
// generated once and kept: ~/.cache/sluice/bench-scale),
// SLUICE_SCALE_BACKEND (memaws, or emulator), SLUICE_SCALE_CHECK (0 skips
// the equivalence checks, most of a run's time, for a run that compares
// CPU only).
package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/localstack/memaws"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/tests/testworld"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// params are the bench's input and partition count.
type params struct {
	series, blocks, samples, n int
	modes                      []string
}

func paramsFromEnv() params {
	p := params{series: envInt("SLUICE_SCALE_SERIES", 500_000), blocks: envInt("SLUICE_SCALE_BLOCKS", 12),
		samples: envInt("SLUICE_SCALE_SAMPLES", 120), n: envInt("SLUICE_SCALE_N", 8), modes: []string{"direct", "split"}}
	if m := os.Getenv("SLUICE_SCALE_MODES"); m != "" {
		p.modes = strings.Split(m, ",")
	}
	return p
}

// input is the generated blocks, kept between runs (generating 500k
// series × 12 blocks takes minutes).
type input struct {
	dirs                    []string
	indexBytes, chunkBytes  int64
	samples, seriesPerBlock uint64
}

func generate(t *testing.T, p params) input {
	t.Helper()
	base := os.Getenv("SLUICE_SCALE_DIR")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache", "sluice", "bench-scale")
	}
	dir := filepath.Join(base, fmt.Sprintf("s%d-b%d-x%d", p.series, p.blocks, p.samples))
	done := filepath.Join(dir, ".done")
	if _, err := os.Stat(done); err != nil {
		start := time.Now()
		fmt.Printf("generating %d blocks × %d series × %d samples into %s ...\n", p.blocks, p.series, p.samples, dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := blockgen.Generate(dir, blockgen.Options{Tenant: "scale", Start: day(), Blocks: p.blocks, Series: p.series,
			SamplesPerSeries: p.samples, Histograms: true, Seed: 11, ThanosFiles: true}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("generated in %v\n", time.Since(start).Round(time.Second))
	}
	var in input
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(dir, e.Name())
		m, err := blockmeta.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		in.dirs = append(in.dirs, d)
		in.samples += m.Stats.NumSamples
		in.seriesPerBlock = max(in.seriesPerBlock, m.Stats.NumSeries)
		for _, f := range m.Thanos.Files {
			if f.RelPath == "index" {
				in.indexBytes += f.SizeBytes
			} else if strings.HasPrefix(f.RelPath, "chunks/") {
				in.chunkBytes += f.SizeBytes
			}
		}
	}
	sort.Strings(in.dirs)
	return in
}

// day is where the blocks start: two days ago, so every range is closed.
func day() time.Time { return time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour) }

// job is one measured process.
type job struct {
	mode, kind, group string
	partitions        int
	wall, cpu         time.Duration
	sys               time.Duration // cpu's share in the kernel
	faults            int64         // minor page faults: fresh memory touched, 4 KiB a fault
	rss, scratch      int64         // peak bytes
	read, written     int64         // S3 bytes, from the job's own log line
	outIndex          int64         // the job's outputs' index bytes (scratch's share)
}

var (
	jobsMu sync.Mutex
	jobs   []job
)

// TestScale runs the bench. It does nothing unless SLUICE_BENCH_SCALE=1
// (make bench-scale sets it): it takes tens of minutes.
func TestScale(t *testing.T) {
	if os.Getenv("SLUICE_BENCH_SCALE") != "1" {
		t.Skip("make bench-scale runs this (SLUICE_BENCH_SCALE=1)")
	}
	p := paramsFromEnv()
	in := generate(t, p)
	fmt.Printf("input: %d blocks, %d series each, %.0fM samples, %s of chunks, %s of index\n",
		len(in.dirs), in.seriesPerBlock, float64(in.samples)/1e6, mib(in.chunkBytes), mib(in.indexBytes))

	plain := runPlain(t, in)
	endpoint := os.Getenv("AWS_ENDPOINT_URL")
	if os.Getenv("SLUICE_SCALE_BACKEND") != "emulator" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: memaws.New(memaws.Options{})}
		go srv.Serve(ln)
		defer srv.Close()
		endpoint = "http://" + ln.Addr().String()
		fmt.Printf("emulator: localstack/memaws served at %s\n", endpoint)
	}
	for _, mode := range p.modes {
		runMode(t, p, in, mode, endpoint)
	}
	printReport(os.Stdout, p, in, plain)
	if f := os.Getenv("SLUICE_SCALE_REPORT"); f != "" {
		var b bytes.Buffer
		printReport(&b, p, in, plain)
		if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// runPlain compacts the blocks with tsdb.LeveledCompactor on local disk,
// in a child process.
func runPlain(t *testing.T, in input) job {
	t.Helper()
	out := t.TempDir()
	j := job{mode: "plain", kind: "LeveledCompactor", group: "local disk", partitions: 1}
	if err := measure(context.Background(), &j, out, map[string]string{
		"SLUICE_BENCH_CHILD": "plain", "SLUICE_SCALE_INPUT": strings.Join(in.dirs, ","), "SLUICE_SCALE_OUT": out,
	}); err != nil {
		t.Fatalf("plain compaction: %v", err)
	}
	j.read = in.indexBytes + in.chunkBytes
	filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				j.written += fi.Size()
				if d.Name() == "index" {
					j.outIndex += fi.Size()
				}
			}
		}
		return nil
	})
	fmt.Printf("plain LeveledCompactor: %v wall, %v CPU, %s peak RSS\n", j.wall.Round(time.Millisecond), j.cpu.Round(time.Millisecond), mib(j.rss))
	return j
}

// runMode uploads the blocks to a deployment of its own and runs the
// pipeline until it settles, each compaction job a child process, one at
// a time; then checks the outputs sample by sample and deletes the
// deployment.
func runMode(t *testing.T, p params, in input, mode, endpoint string) {
	t.Helper()
	var w *testworld.World
	var one sync.Mutex
	// The group is estimated at series × (1 + churn × (blocks − 1)); the
	// series limit makes that N partitions.
	est := planning.EstimateSeries(candidates(in), planning.DefaultSeriesChurn)
	maxSeries := (est + uint64(p.n) - 1) / uint64(p.n)
	w = testworld.New(t, testworld.Options{
		// Kept: this run deletes the deployment itself once it is checked,
		// to free the emulator's memory before the next mode.
		Env: []envtest.Option{envtest.WithEndpoint(endpoint), envtest.WithLogLevel(slog.LevelWarn), envtest.WithKeep()},
		Pipeline: localrun.Options{Wrap: func(name string, h eventsource.Handler) eventsource.Handler {
			if name != "compact" {
				return h
			}
			return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				one.Lock()
				defer one.Unlock()
				return runJob(ctx, t, mode, endpoint, w.Config, ev)
			}
		}},
		Configure: func(c *config.Config) {
			c.Policy.Ranges = []time.Duration{time.Duration(p.blocks) * 2 * time.Hour}
			c.Policy.MaxSeriesPerPartition = maxSeries
			c.Policy.ScratchBytes, c.Policy.Throughput = 1<<50, 1<<40 // measure, never refuse
			c.Policy.SplitBytes = planning.NeverSplit
			if mode == "split" {
				c.Policy.SplitBytes = 1
			}
			c.LeaseDuration, c.RedriveAfter, c.StuckAfter = 6*time.Hour, 5*time.Hour, 12*time.Hour
		},
	})
	ctx := context.Background()
	start := time.Now()
	for _, d := range in.dirs {
		w.Upload(ctx, "scale", d)
	}
	fmt.Printf("[%s] uploaded %d blocks in %v\n", mode, len(in.dirs), time.Since(start).Round(time.Second))
	start = time.Now()
	if err := w.Pipeline.Settle(ctx, 2*time.Second, 4*time.Hour, func(ctx context.Context) (bool, error) {
		return w.Quiescent(ctx, "scale")
	}); err != nil {
		t.Fatalf("[%s] %v", mode, err)
	}
	fmt.Printf("[%s] settled in %v\n", mode, time.Since(start).Round(time.Second))
	start = time.Now()
	if os.Getenv("SLUICE_SCALE_CHECK") == "0" {
		fmt.Printf("[%s] equivalence: not checked (SLUICE_SCALE_CHECK=0)\n", mode)
	} else if err := w.CheckQuiescent(ctx, "scale"); err != nil {
		t.Errorf("[%s] the outputs are not the uploads: %v", mode, err)
	} else {
		fmt.Printf("[%s] equivalence: the live blocks hold exactly the uploaded samples (checked in %v)\n", mode, time.Since(start).Round(time.Second))
	}
	if err := w.DeleteResources(ctx); err != nil {
		t.Logf("[%s] delete the deployment: %v", mode, err)
	}
}

func candidates(in input) []planning.Candidate {
	var out []planning.Candidate
	for i := range in.dirs {
		slot := (2 * time.Hour).Milliseconds()
		out = append(out, planning.Candidate{MinT: int64(i) * slot, MaxT: int64(i+1) * slot, Series: in.seriesPerBlock})
	}
	return out
}

// runJob runs one compaction job message in a child process, as a Lambda
// invocation, and records what it used.
func runJob(ctx context.Context, t *testing.T, mode, endpoint string, cfg config.Config, ev events.SQSEvent) (events.SQSEventResponse, error) {
	dir, err := os.MkdirTemp("", "sluice-scale-job-*")
	if err != nil {
		return events.SQSEventResponse{}, err
	}
	defer os.RemoveAll(dir)
	scratch := filepath.Join(dir, "scratch")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return events.SQSEventResponse{}, err
	}
	cfg.ScratchDir = scratch
	files := map[string]any{"config.json": cfg, "event.json": ev}
	for name, v := range files {
		b, err := json.Marshal(v)
		if err != nil {
			return events.SQSEventResponse{}, err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return events.SQSEventResponse{}, err
		}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(15 * time.Minute)
	}
	j := job{mode: mode}
	err = measure(ctx, &j, scratch, map[string]string{
		"SLUICE_BENCH_CHILD": "job", "SLUICE_SCALE_JOB": dir, "SLUICE_SCALE_DEADLINE": strconv.FormatInt(deadline.UnixMilli(), 10),
		"AWS_ENDPOINT_URL": endpoint,
	})
	if err != nil {
		return events.SQSEventResponse{}, fmt.Errorf("job process: %w", err)
	}
	var resp events.SQSEventResponse
	b, err := os.ReadFile(filepath.Join(dir, "response.json"))
	if err != nil {
		return resp, fmt.Errorf("job process wrote no response: %w", err)
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return resp, err
	}
	logs, _ := os.ReadFile(filepath.Join(dir, "log.json"))
	sc := bufio.NewScanner(bytes.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["msg"] != "partitions compacted and uploaded" {
			continue
		}
		g, _ := m["group"].(string)
		j.group = g
		j.kind = "group"
		if gk, err := planning.ParseGroupKey(g); err == nil && gk.IsSplit() {
			j.kind = "split"
		}
		j.partitions = int(num(m["partitions"]))
		j.read, j.written, j.outIndex = int64(num(m["readBytes"])), int64(num(m["writtenBytes"])), int64(num(m["outputIndexBytes"]))
	}
	if j.kind == "" {
		j.kind = "no work"
	}
	jobsMu.Lock()
	jobs = append(jobs, j)
	jobsMu.Unlock()
	fmt.Printf("[%s] %s job %s (%d partition(s)): %v wall, %v CPU (%v system, %d page faults), %s RSS, %s scratch, %s read\n", mode, j.kind, short(j.group), j.partitions,
		j.wall.Round(time.Millisecond), j.cpu.Round(time.Millisecond), j.sys.Round(time.Millisecond), j.faults, mib(j.rss), mib(j.scratch), mib(j.read))
	return resp, nil
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

// measure runs this test binary as a child process with env, polling the
// disk used under scratch, and records its wall time, CPU (user + system),
// peak RSS and peak scratch in j.
func measure(ctx context.Context, j *job, scratch string, env map[string]string) error {
	args := []string{"-test.run=^TestScaleChild$", "-test.count=1"}
	if dir := os.Getenv("SLUICE_SCALE_CPUPROFILE"); dir != "" {
		// One CPU profile per job process, to see where a job's CPU goes.
		args = append(args, "-test.cpuprofile="+filepath.Join(dir, fmt.Sprintf("job-%d.pprof", time.Now().UnixNano())))
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan struct{})
	var peak int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, diskUsage(scratch))
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	err := cmd.Run()
	j.wall = time.Since(start)
	close(done)
	wg.Wait()
	j.scratch = peak
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			j.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			j.sys = time.Duration(ru.Stime.Nano())
			j.faults = ru.Minflt
			j.rss = ru.Maxrss * 1024 // kilobytes on Linux
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, peakRSSPrefix); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				j.rss = n
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%w\n%s", err, tail(out.String(), 4000))
	}
	return nil
}

// diskUsage is the disk allocated under dir (preallocated space counts).
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestScaleChild is the child process: one compaction job through the
// compact function's handler, or plain LeveledCompactor.
func TestScaleChild(t *testing.T) {
	switch os.Getenv("SLUICE_BENCH_CHILD") {
	case "job":
		if err := childJob(os.Getenv("SLUICE_SCALE_JOB")); err != nil {
			t.Fatal(err)
		}
	case "plain":
		if err := childPlain(strings.Split(os.Getenv("SLUICE_SCALE_INPUT"), ","), os.Getenv("SLUICE_SCALE_OUT")); err != nil {
			t.Fatal(err)
		}
	default:
		t.Skip("a child of TestScale only")
	}
	// getrusage's peak RSS of a child started from this large parent is
	// the parent's (the kernel carries the high-water mark of the memory
	// the child was forked with over its exec), so the child reports its
	// own.
	if hwm, err := peakRSS(); err == nil {
		fmt.Printf("%s%d\n", peakRSSPrefix, hwm)
	}
}

// peakRSSPrefix starts the line on which a child reports its peak RSS.
const peakRSSPrefix = "sluice-child-peak-rss-bytes="

// peakRSS is this process's peak resident set size: VmHWM of
// /proc/self/status.
func peakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// childJob runs the compact handler on the event in dir, with the
// configuration there, under the invocation's deadline, and writes its
// response and its JSON log there.
func childJob(dir string) error {
	var cfg config.Config
	var ev events.SQSEvent
	for name, v := range map[string]any{"config.json": &cfg, "event.json": &ev} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return err
		}
	}
	ms, _ := strconv.ParseInt(os.Getenv("SLUICE_SCALE_DEADLINE"), 10, 64)
	ctx, cancel := context.WithDeadline(context.Background(), time.UnixMilli(ms))
	defer cancel()
	logf, err := os.Create(filepath.Join(dir, "log.json"))
	if err != nil {
		return err
	}
	defer logf.Close()
	clients, err := awsenv.Load(ctx, awsenv.Options{})
	if err != nil {
		return err
	}
	deps := pipeline.NewDeps(cfg, clients, slog.New(slog.NewJSONHandler(logf, nil)), fmt.Sprintf("bench@%d", os.Getpid()))
	pipeline.SetJobGCTarget() // as the compact function does at start
	resp, err := pipeline.Compact{Deps: deps}.Handle(ctx, ev)
	if err != nil {
		return err
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "response.json"), b, 0o644)
}

func childPlain(dirs []string, out string) error {
	var maxT int64
	for _, d := range dirs {
		m, err := blockmeta.ReadDir(d)
		if err != nil {
			return err
		}
		maxT = max(maxT, m.MaxTime)
	}
	c, err := tsdb.NewLeveledCompactor(context.Background(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)),
		[]int64{int64(len(dirs)) * (2 * time.Hour).Milliseconds()}, nil, nil)
	if err != nil {
		return err
	}
	_, err = c.Compact(out, dirs, nil)
	return err
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func short(g string) string {
	if i := strings.IndexByte(g, '#'); i >= 0 {
		return g[i+1:]
	}
	return g
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// printReport prints every job and the goals as ratios.
func printReport(w io.Writer, p params, in input, plain job) {
	jobsMu.Lock()
	defer jobsMu.Unlock()
	fmt.Fprintf(w, "\nSluice bench-scale — %d blocks × %d series × %d samples (%.0fM samples), %s of chunks, %s of index; N = %d\n",
		len(in.dirs), in.seriesPerBlock, p.samples, float64(in.samples)/1e6, mib(in.chunkBytes), mib(in.indexBytes), p.n)
	fmt.Fprintf(w, "each job a process of its own, one at a time; RSS is the process's own peak (VmHWM, which it reports), scratch the peak disk under its scratch directory,\n")
	fmt.Fprintf(w, "read the bytes it read from S3 (its own log line); CPU is user + system of the job process (the emulator's is not counted),\n")
	fmt.Fprintf(w, "system its share in the kernel, faults the minor page faults it took (fresh memory touched)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tjob\tpartitions\twall\tCPU\tsystem\tfaults\tpeak RSS\tpeak scratch\tS3 read\twritten\t")
	row := func(j job) {
		fmt.Fprintf(tw, "%s\t%s %s\t%d\t%.1fs\t%.1fs\t%.1fs\t%d\t%s\t%s\t%s\t%s\t\n", j.mode, j.kind, short(j.group), j.partitions,
			j.wall.Seconds(), j.cpu.Seconds(), j.sys.Seconds(), j.faults, mib(j.rss), mib(j.scratch), mib(j.read), mib(j.written))
	}
	row(plain)
	for _, j := range jobs {
		row(j)
	}
	tw.Flush()
	for _, mode := range p.modes {
		var cpu, sys, wall time.Duration
		var read, faults, maxRSS, worstScratch int64
		worst := ""
		for _, j := range jobs {
			if j.mode != mode {
				continue
			}
			cpu += j.cpu
			sys += j.sys
			faults += j.faults
			wall += j.wall
			read += j.read
			maxRSS = max(maxRSS, j.rss)
			// The goal: scratch ≤ the group's index bytes + the job's
			// output index + 64 MiB.
			if over := j.scratch - (in.indexBytes + j.outIndex + 64<<20); worst == "" || over > worstScratch {
				worstScratch, worst = over, short(j.group)
			}
		}
		fmt.Fprintf(w, "\n%s: summed CPU %.1fs = %.2f × plain (system %.1fs, %d page faults; plain %.1fs, %d); summed wall %.1fs = %.2f × plain; peak RSS of any job %s (goal ≤ 1 GiB: %s)\n",
			mode, cpu.Seconds(), cpu.Seconds()/plain.cpu.Seconds(), sys.Seconds(), faults, plain.sys.Seconds(), plain.faults,
			wall.Seconds(), wall.Seconds()/plain.wall.Seconds(), mib(maxRSS), met(maxRSS <= 1<<30))
		fmt.Fprintf(w, "%s: peak scratch against the group's index + the job's output index + 64 MiB: %s at most (job %s; goal ≤ 0: %s)\n",
			mode, signed(worstScratch), worst, met(worstScratch <= 0))
		budget := int64(2.2*float64(in.chunkBytes)) + int64(p.n)*in.indexBytes
		fmt.Fprintf(w, "%s: S3 bytes read %s = %.2f × the chunks (goal for split: ≤ 2.2 × chunks + N × index = %s: %s)\n",
			mode, mib(read), float64(read)/float64(in.chunkBytes), mib(budget), met(read <= budget))
	}
	fmt.Fprintf(w, "plain: %.1fs wall, %.1fs CPU, %s peak RSS, reads %s from local disk\n", plain.wall.Seconds(), plain.cpu.Seconds(), mib(plain.rss), mib(plain.read))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func signed(n int64) string {
	if n < 0 {
		return "-" + mib(-n) + " under"
	}
	return mib(n) + " over"
}
