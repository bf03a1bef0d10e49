// Package chaos runs the whole pipeline — the four handlers behind the
// local event-source runner, against the emulator — under a seeded
// scheduler that injects faults: crashes before and after AWS calls and at
// protocol steps, throttling, duplicated, delayed and concurrent
// deliveries, visibility timeouts expiring mid-work, duplicated and delayed
// S3 events, lease expiry by a skewed clock, clock jumps; on a workload of
// several tenants with replicated, late and re-uploaded blocks. Online it
// checks what the testworld.Monitor checks (I5 fencing, deletes against
// records, published files); at quiescence I1–I4 (testworld.CheckQuiescent)
// and that no message ended in a DLQ.
//
//	go test ./tests/chaos -run TestChaos               # 30 seeds (make test runs 20)
//	CHAOS_SEEDS=500 go test ./tests/chaos -run TestChaos -timeout 2h   # make chaos SEEDS=500
//	CHAOS_SEED=17 go test ./tests/chaos -run TestChaos -v              # replay seed 17
package chaos

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/tests/testworld"
)

var (
	flagSeed     = flag.Int64("seed", envInt("CHAOS_SEED", -1), "run only this seed (a replay); env CHAOS_SEED")
	flagSeeds    = flag.Int("seeds", int(envInt("CHAOS_SEEDS", 30)), "how many seeds to run; env CHAOS_SEEDS")
	flagFirst    = flag.Int64("first", envInt("CHAOS_FIRST", 1), "first seed; env CHAOS_FIRST")
	flagParallel = flag.Int("chaos.parallel", int(envInt("CHAOS_PARALLEL", 4)), "seeds run at once; env CHAOS_PARALLEL")
	flagReport   = flag.String("report", os.Getenv("CHAOS_REPORT"), "also write the report to this file; env CHAOS_REPORT")
	flagProgress = flag.String("progress", os.Getenv("CHAOS_PROGRESS"), "append a line to this file as each seed ends (go test shows a passing run's output only at its end); env CHAOS_PROGRESS")
	// flagUploads has a third of the downsampling seeds downsample the 2h
	// uploads themselves. Off in make test: those seeds do about twice
	// the work, and beside the other integration tests on one emulator
	// they (and the seeds sharing it) outran the 8 minute liveness limit.
	// make chaos turns it on.
	flagUploads = flag.Bool("chaos.downsample-uploads", os.Getenv("CHAOS_DOWNSAMPLE_UPLOADS") == "1", "downsample the 2h uploads in a third of the downsampling seeds; env CHAOS_DOWNSAMPLE_UPLOADS=1")
	flagEmus    = flag.String("emulators", os.Getenv("CHAOS_ENDPOINTS"), "comma-separated emulator URLs to spread the seeds over (default AWS_ENDPOINT_URL); env CHAOS_ENDPOINTS")
)

// endpoints are the emulators the seeds are spread over: each moto is one
// Python process, so a run on a machine with more cores goes faster with
// more of them.
func endpoints() []string {
	var out []string
	for _, e := range strings.Split(*flagEmus, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		out = append(out, envtest.Endpoint())
	}
	return out
}

var debugSettle = os.Getenv("CHAOS_DEBUG") != ""

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

// The chaos deployment's durations, on the handlers' clock. As in
// production, a job runs shorter than its lease, the lease is shorter than
// the orphan delay, and nothing waits for the deletion delay but deletes.
const (
	visibility    = 1500 * time.Millisecond
	leaseDuration = 15 * time.Second
	redriveAfter  = 6 * time.Second
	stuckAfter    = 40 * time.Second
	deletionDelay = 3 * time.Second
	orphanDelay   = 25 * time.Second
	// settleTimeout bounds a seed's settling in wall time. A seed settles in
	// about 90 s on an idle two-core machine; six at once on a machine
	// that is also compiling took over four minutes (every seed of that
	// wave failed liveness, none livelocked), so the bound is generous:
	// a livelock is still caught, later. A seed that splits its blocks
	// does more (113 s alone for seed 2) and took over six minutes beside
	// make test's integration tests (ci on eb22dee), and over eight
	// minutes once the downsampling seeds also downsampled native
	// histograms on the same emulator (a fresh-clone .ci/run on 821e608:
	// seed 2 still working at 8m13s, every other seed settled).
	settleTimeout = 12 * time.Minute
	// A job with less than deadlineMargin left stops (fDeadline). A
	// version's jobs may fail maxJobAttempts times before quarantine: far
	// more than in production (3), because the run kills jobs at a rate no
	// Lambda fleet does (a crash before or after any call, at any step) and
	// its clock faults expire leases under live jobs; each such death is a
	// failed attempt when its lease is taken over (seed 10 of an early run
	// quarantined a healthy group after six). A damaged block fails every
	// attempt and still reaches the limit quickly.
	deadlineMargin = 20 * time.Second
	maxJobAttempts = 20
	// chaosUploadWait is the upload wait of the seeds that have one.
	chaosUploadWait = 20 * time.Second
)

// coverageSeeds is the smallest run whose report must show every fault
// kind injected and every check made (make test runs 20 seeds; a replay of
// one seed is not held to it).
const coverageSeeds = 20

// fullCoverageSeeds is the smallest run that must also show the
// load-dependent fault kinds (make chaos runs 300).
const fullCoverageSeeds = 100

// checkLiveness is the run's own check: the seed settled, nothing in a DLQ.
const checkLiveness = "liveness: settled, DLQs empty (per seed)"

// uncovered lists the fault kinds never injected and the checks never made
// in results; the load-dependent kinds count only in a run of
// fullCoverageSeeds or more.
func uncovered(results []result) []string {
	faults, checks := map[string]int{}, map[string]int{}
	for _, r := range results {
		for k, v := range r.faults {
			faults[k] += v
		}
		for k, v := range r.checks {
			checks[k] += v
		}
	}
	kinds := faultKinds()
	if len(results) >= fullCoverageSeeds {
		kinds = append(kinds, loadDependentFaultKinds()...)
	}
	var out []string
	for _, k := range kinds {
		if faults[k] == 0 {
			out = append(out, "fault never injected: "+k)
		}
	}
	for _, k := range append(append(testworld.MonitorChecks(), testworld.QuiescentChecks()...), checkLiveness) {
		if checks[k] == 0 {
			out = append(out, "check never made: "+k)
		}
	}
	if n, _ := tally(results, func(r result) int { return r.splits }); n == 0 {
		out = append(out, "no block was split on arrival: no split job ran")
	}
	if n, _ := tally(results, func(r result) int { return r.downsamples }); n == 0 {
		out = append(out, "no block was downsampled: no downsample job ran")
	}
	if !slices.ContainsFunc(results, func(r result) bool { return r.uploadWait }) {
		out = append(out, "no seed waited for its uploads' replicas")
	}
	return out
}

// progress appends a line to a file as each seed ends: scripts/chaos.sh
// follows it, since go test prints a passing run's output only at its end.
type progress struct {
	path    string
	total   int
	started time.Time
}

func newProgress(path string, total int) *progress {
	if path != "" {
		_ = os.MkdirAll(filepath.Dir(path), 0o755)
		_ = os.WriteFile(path, nil, 0o644)
	}
	return &progress{path: path, total: total, started: time.Now()}
}

// seedDone records one seed's end, done seeds having ended so far; its
// caller serialises the calls.
func (p *progress) seedDone(seed int64, ok bool, took time.Duration, done, failed int) {
	if p.path == "" {
		return
	}
	outcome := "ok"
	if !ok {
		outcome = "FAILED"
	}
	f, err := os.OpenFile(p.path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "chaos: seed %d %s in %s (%d/%d done, %d failed, %s elapsed)\n",
		seed, outcome, took.Round(time.Second), done, p.total, failed, time.Since(p.started).Round(time.Second))
}

// tally sums one count over the seeds, and counts the seeds where it is
// not zero.
func tally(results []result, count func(result) int) (total, seeds int) {
	for _, r := range results {
		if n := count(r); n > 0 {
			total += n
			seeds++
		}
	}
	return total, seeds
}

// result is one seed's outcome.
type result struct {
	seed       int64
	took       time.Duration
	faults     map[string]int
	checks     map[string]int
	violations []string
	blocks     int
	requests   map[string]int // by service: DynamoDB, S3, SQS
	// splits counts the versions of split groups (a block split on
	// arrival) the seed created, downsamples those of downsample groups,
	// partitionedDownsamples the downsample groups whose last version
	// was written in partitions, and siblingDownsamples those whose last
	// version took sibling partitions of its block along (a coarser
	// downsample replaced, docs/protocol.md).
	splits, downsamples, partitionedDownsamples, siblingDownsamples int
	// uploadWait: the seed's ranges waited for their uploads' replicas.
	uploadWait bool
}

func replayCommand(seed int64) string {
	env := ""
	if *flagUploads {
		env = "CHAOS_DOWNSAMPLE_UPLOADS=1 " // the seed's workload depends on it
	}
	return fmt.Sprintf("%sCHAOS_SEED=%d go test ./tests/chaos -run TestChaos -count=1 -v", env, seed)
}

// TestChaos runs the seeds, several at once, each in its own deployment,
// and reports seeds, faults injected by kind, checks made and violations.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: needs the emulator; skipped with -short")
	}
	emus := endpoints()
	for _, e := range emus {
		if !envtest.Answers(context.Background(), e, 2*time.Second) && os.Getenv("SLUICE_REQUIRE_EMULATOR") != "1" {
			t.Skipf("no emulator at %s", e)
		}
	}
	seeds := []int64{*flagSeed}
	if *flagSeed < 0 {
		seeds = seeds[:0]
		for i := 0; i < *flagSeeds; i++ {
			seeds = append(seeds, *flagFirst+int64(i))
		}
	}
	started := time.Now()
	pl, err := generatePool(t.TempDir())
	if err != nil {
		t.Fatalf("chaos: generate the workload: %v", err)
	}
	var (
		mu      sync.Mutex
		results []result
		failed  []int64
	)
	progress := newProgress(*flagProgress, len(seeds))
	// A seed starts on the emulator running the fewest seeds: seeds differ
	// in cost several times over, and a fixed assignment left one
	// emulator idle while the other, at a full core, had six.
	running := make([]int, len(emus))
	sem := make(chan struct{}, max(*flagParallel, 1))
	var wg sync.WaitGroup
	for _, seed := range seeds {
		wg.Add(1)
		sem <- struct{}{}
		mu.Lock()
		e := 0
		for i := range running {
			if running[i] < running[e] {
				e = i
			}
		}
		running[e]++
		mu.Unlock()
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var res result
			ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				res = runSeed(t, seed, emus[e], pl)
				if t.Failed() {
					t.Logf("replay this seed: %s", replayCommand(seed))
				}
			})
			mu.Lock()
			defer mu.Unlock()
			running[e]--
			results = append(results, res)
			if !ok {
				failed = append(failed, seed)
			}
			progress.seedDone(seed, ok, res.took, len(results), len(failed))
		}()
	}
	wg.Wait()
	rep := report(results, failed, time.Since(started))
	t.Log("\n" + rep)
	if len(seeds) >= coverageSeeds {
		for _, u := range uncovered(results) {
			t.Errorf("chaos coverage: %s", u)
		}
	}
	if *flagReport != "" {
		_ = os.MkdirAll(filepath.Dir(*flagReport), 0o755)
		if err := os.WriteFile(*flagReport, []byte(rep), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
}

// runSeed runs one seed: a fresh deployment, the pipeline under the
// seed's faults, the workload; then settles and checks.
func runSeed(t *testing.T, seed int64, emulator string, pl pool) result {
	start := time.Now()
	res := result{seed: seed}
	p := newPlan(seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	clock := &testworld.Clock{}
	sched := &scheduler{plan: p, clock: clock, visibility: visibility, lease: leaseDuration, stuck: stuckAfter, deadlineMargin: deadlineMargin}
	sched.zombie.Store("")
	maxSeries := []uint64{8, 16, 64}[rng.IntN(3)]
	// A third of the seeds split their uploads on arrival (issue 11): each
	// block is split by one job of its own into its group's partition count
	// (4 here: the series limit is lowered to get there) before its range
	// is compacted. Drawn from a stream of its own, so that the other
	// seeds' draws stay as they were. (8 partitions made a seed's work too
	// much to settle in its 6 minutes beside the rest of make test: ci on
	// 1857771, seeds 2 and 21.)
	split := rand.New(rand.NewPCG(uint64(seed), 0x5b17)).IntN(3) == 0
	if split {
		maxSeries = 4
	}
	// A third of the others downsample (issue 13): every raw block of 3h
	// or more (the 4h and 8h outputs) to 5m, and every such 5m block to
	// 1h, each by a version of its own that keeps its block, beside the
	// compaction of every stream: an 8h block's downsample then replaces
	// (retires) its 4h halves' downsamples, or finds them compacted into
	// one that holds its sources already.
	dsRNG := rand.New(rand.NewPCG(uint64(seed), 0xd0b5))
	downsampling := !split && dsRNG.IntN(3) == 0
	// A third of those downsample the 2h uploads themselves, as blocks
	// adopted whole: an upload over the seed's series limit is
	// downsampled in partitions, which the 4h and 8h blocks' downsamples
	// then replace or wait on.
	rawSpan := 3 * time.Hour
	if downsampling && dsRNG.IntN(3) == 0 && *flagUploads {
		rawSpan = 2 * time.Hour
	}
	// A third of all seeds wait for their uploads' replicas
	// (planning.Policy.UploadWait, on the handlers' clock) before a range
	// holding them is compacted: their ranges are planned by the sweep
	// from the agenda, not by the uploads' batches, and the settle loop
	// lets the waits pass as it lets deletion delays pass.
	res.uploadWait = rand.New(rand.NewPCG(uint64(seed), 0x0a17)).IntN(3) == 0
	w := testworld.New(t, testworld.Options{
		Env:      []envtest.Option{envtest.WithLogLevel(slog.LevelInfo), envtest.WithEndpoint(emulator)},
		Pipeline: localrun.Options{Now: clock.Now},
		Configure: func(c *config.Config) {
			c.Policy.Ranges = chaosRanges
			c.Policy.MaxSeriesPerPartition = maxSeries
			if split {
				c.Policy.SplitBytes = 1
			}
			if downsampling {
				c.Policy.Downsample = true
				c.Policy.DownsampleRawSpan, c.Policy.DownsampleFiveMinuteSpan = rawSpan, 3*time.Hour
			}
			c.LeaseDuration, c.RedriveAfter, c.StuckAfter = leaseDuration, redriveAfter, stuckAfter
			c.DeletionDelay, c.OrphanDelay = deletionDelay, orphanDelay
			c.DeadlineMargin, c.MaxJobAttempts = deadlineMargin, maxJobAttempts
			c.ReplicaLabels = []string{"replica"}
			if res.uploadWait {
				c.Policy.UploadWait = chaosUploadWait
			}
		},
	})
	// The bus delivers S3's notifications (notifyS3, the workload): the
	// bucket's own would pile up in the real block-events queue.
	if _, err := w.Env.Clients.S3.PutBucketNotificationConfiguration(context.Background(), &s3.PutBucketNotificationConfigurationInput{
		Bucket: aws.String(w.Config.Bucket), NotificationConfiguration: &s3types.NotificationConfiguration{},
	}); err != nil {
		t.Fatalf("chaos: turn the bucket's notifications off: %v", err)
	}
	mon := testworld.NewMonitor(w)
	b := newBus(seed, p, visibility)
	notes := &notifier{bucket: w.Config.Bucket, queue: w.Config.Queues.BlockEvents, send: b, plan: p,
		rng: rand.New(rand.NewPCG(uint64(seed), 0xe7e))}
	d := w.Pipeline.Deps
	// AWS's limits first (the emulator enforces none), then the Monitor,
	// then the faults.
	limited := awslimits.DynamoDB{DynamoDBAPI: w.Env.Clients.DynamoDB, Refused: w.Pipeline.Refused}
	d.Store = records.NewStore(&faultDB{DynamoDB: mon.DynamoDB(limited), p: p}, w.Config.Table, d.Logger)
	d.S3 = &faultS3{S3: mon.S3(&notifyS3{S3: d.S3, notify: func(ctx context.Context, key, vid string) {
		if err := notes.created(ctx, key, vid); err != nil {
			t.Errorf("notify %s: %v", key, err)
		}
	}}), p: p}
	d.Send = messages.Sender{SQS: awslimits.SQS{SQSSender: &faultSQS{SQS: b, p: p}, Refused: w.Pipeline.Refused}, Queues: w.Config.Queues}
	d.Hook = testworld.ChainHooks(sched.hook, mon.Hook)
	d.OpContext = opContext
	sched.deps = d
	// Each queue keeps a message in flight as long as it would in AWS (six
	// times its function's timeout), not the emulator deployment's 60 s
	// for every queue: the bus's handlers have no timeout to end them.
	inAWS := spec.Default("chaos")
	for _, q := range w.Env.Deployment.Resources.Queues {
		name := string(q.Consumer)
		b.addQueue(name, w.Env.Deployment.QueueURLs[q.ID], q.FIFO, q.BatchSize, min(q.MaxConcurrency, 4), q.MaxReceiveCount,
			inAWS.Queue(q.ID).VisibilityTimeout, sched.wrap(name, functionHandler(name, d)))
	}

	// Two tenants of the pool, now and then three.
	n := 2
	if rng.IntN(4) == 0 {
		n = 3
	}
	var tenants []tenantBlocks
	for _, i := range rng.Perm(len(pl))[:n] {
		tenants = append(tenants, pl[i])
	}
	var names []string
	for _, tb := range tenants {
		names = append(names, tb.tenant)
		res.blocks += len(tb.blocks)
	}
	sort.Strings(names)
	t.Logf("seed %d: tenants %v, at most %d series per partition, split on arrival %v, downsampling %v (raw span %v), upload wait %v", seed, names, maxSeries, split, downsampling, rawSpan, res.uploadWait)

	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout+time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Add(2)
	go func() { defer running.Done(); b.run(runCtx) }()
	// The schedule's sweep, every second.
	sweeps := &sweeper{deps: d}
	go func() { defer running.Done(); sweeps.run(runCtx, time.Second) }()

	wl := &workload{w: w, plan: p, rng: rand.New(rand.NewPCG(uint64(seed), 0x10ad)), tenants: tenants, notes: notes}
	// A third of the seeds see another tool's mark, no-compact or
	// deletion, written on one of their uploads, in a state drawn for it:
	// LIVE, CLAIMED by a version under way, RETIRING or DELETED. Drawn
	// from a stream of its own.
	if mark := rand.New(rand.NewPCG(uint64(seed), 0x3a4c)); mark.IntN(3) == 0 {
		states := []protocol.BlockState{protocol.BlockLive, protocol.BlockClaimed, protocol.BlockRetiring, protocol.BlockDeleted}
		wl.mark, wl.markIn = mark, states[mark.IntN(len(states))]
		wl.markFile = []string{blockkey.NoCompactMarkFile, blockkey.DeletionMarkFile}[mark.IntN(2)]
		wl.marking = newCue()
	}
	// Half the seeds with a damaged upload have an operator repair it once
	// it is quarantined and run `sluice retry` on it. Drawn from a stream
	// of its own.
	if repair := rand.New(rand.NewPCG(uint64(seed), 0x4e9a)); repair.IntN(2) == 0 {
		for _, tb := range tenants {
			if len(tb.sound) > 0 {
				wl.repair, wl.retry = repair, messages.Sender{SQS: b, Queues: w.Config.Queues}
				wl.repairing = newCue()
				break
			}
		}
	}
	var loadErr error
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		loadErr = wl.run(ctx)
	}()
	if wl.mark != nil {
		go wl.markWhen(runCtx)
	}
	if wl.repair != nil {
		go wl.repairWhen(runCtx, loaded)
	}
	// One clock jump, at a seeded moment: re-drives, lease expiry, or a
	// version that looks stuck.
	go func() {
		sleep(ctx, time.Duration(2000+rng.IntN(6000))*time.Millisecond)
		jumps := []time.Duration{redriveAfter + time.Second, leaseDuration + time.Second, stuckAfter + time.Second}
		if j := jumps[rng.IntN(len(jumps))]; ctx.Err() == nil && sched.zombie.CompareAndSwap("", "clock jump") {
			p.count(fClockJump)
			clock.Advance(j)
			t.Logf("clock jumps %v", j)
			sleep(ctx, 3*time.Second) // the jobs it overtook finish before another jump
			sched.zombie.Store("")
		}
	}()

	var idleSince time.Time
	settled := func(ctx context.Context) (bool, error) {
		select {
		case <-loaded:
		default:
			return false, nil
		}
		if loadErr != nil {
			return false, loadErr
		}
		sweeps.held.Lock()
		defer sweeps.held.Unlock()
		activity := func() [2]int64 { return [2]int64{b.sent.Load(), b.delivered.Load()} }
		before := activity()
		if !b.idle() || sched.inRogue.Load() > 0 || sweeps.busy() {
			idleSince = time.Time{}
			return false, nil
		}
		ok, err := w.Quiescent(ctx, names...)
		if err != nil {
			return false, err
		}
		if !ok {
			// Nothing runs and nothing is queued, yet work is left: the
			// pipeline waits for time — a lost job to be re-sent
			// (RedriveAfter), a stuck version to be superseded
			// (StuckAfter). Nothing runs that the jump could overtake.
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) > time.Second {
				clock.Advance(redriveAfter + time.Second)
				p.count(fIdleJump)
				idleSince = time.Time{}
			}
			return false, nil
		}
		// Quiescent and nothing runs: let the delays pass — deletions,
		// second orphan sweeps, and in a seed with an upload wait the
		// ranges waiting out theirs — rather than wait for them. (Ranges
		// wait for other times too, their close or a downsample's recheck:
		// letting every seed's come due made make test's chaos run 666 s
		// long in ci on cd2c49a, 542 s without, for work no check looks
		// at.)
		// A seed whose mark was written lets its ranges' closes pass too:
		// a range that no longer holds a marked upload may have a gap,
		// and is compacted around it once it closes (seed 1322: without
		// this, its late block and the upload it repeats stayed live
		// side by side, waiting for a close that never came).
		kinds := []records.AgendaKind{records.AgendaDelete, records.AgendaOrphans, records.AgendaActive}
		if res.uploadWait || wl.marking.taken() {
			kinds = append(kinds, records.AgendaRange)
		}
		var next time.Time
		for _, k := range kinds {
			all, err := w.Store.Due(ctx, k, clock.Now().Add(24*time.Hour))
			if err != nil {
				return false, err
			}
			for _, e := range all {
				if next.IsZero() || e.Due.Before(next) {
					next = e.Due
				}
			}
		}
		if next.IsZero() {
			// Nothing may have run while the world was read: with the
			// sweep held, only a handler could have, and none was.
			if !b.idle() || sched.inRogue.Load() > 0 || activity() != before {
				return false, nil
			}
			// The mark and the repair, if still to come, come now.
			mark, repair := wl.marking.pending(), wl.repairing.pending()
			return !mark && !repair, nil
		}
		if wait := next.Sub(clock.Now()); wait > 0 {
			clock.Advance(wait + time.Second)
		}
		return false, nil
	}
	deadline := time.Now().Add(settleTimeout)
	var lastState time.Time
	for {
		ok, err := settled(ctx)
		if err != nil {
			res.violations = append(res.violations, fmt.Sprintf("settle: %v", err))
			break
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			res.violations = append(res.violations, fmt.Sprintf("liveness: not quiescent after %v (bus idle %v, %d sent, %d delivered)",
				settleTimeout, b.idle(), b.sent.Load(), b.delivered.Load()))
			break
		}
		if debugSettle && time.Since(lastState) > 2*time.Second {
			lastState = time.Now()
			t.Logf("settle: %s; rogues %d, sweeping %v, clock +%v", b.state(), sched.inRogue.Load(), sweeps.busy(), clock.Offset())
		}
		sleep(ctx, 500*time.Millisecond)
	}
	stop()
	running.Wait()
	sched.rogues.Wait()
	wl.marking.wait()
	wl.repairing.wait()

	if err := w.CheckQuiescent(ctx, names...); err != nil {
		for _, e := range unjoin(err) {
			res.violations = append(res.violations, e.Error())
		}
	}
	res.violations = append(res.violations, mon.Violations()...)
	for _, m := range b.deadLetters() {
		res.violations = append(res.violations, fmt.Sprintf("liveness: in a DLQ: %s", m))
	}
	for _, tenant := range names {
		groups, err := w.Store.TenantGroups(ctx, tenant)
		if err != nil {
			res.violations = append(res.violations, fmt.Sprintf("read groups: %v", err))
		}
		for _, g := range groups {
			if g.Key.IsSplit() {
				res.splits += int(g.Version)
			}
			if g.Key.IsDownsample() {
				res.downsamples += int(g.Version)
				if g.Partitions > 1 {
					res.partitionedDownsamples++
				}
				srcs, err := w.Store.GetBlocks(ctx, tenant, g.Sources)
				if err != nil {
					res.violations = append(res.violations, fmt.Sprintf("read sources of %s: %v", g.Key, err))
				}
				if slices.IndexFunc(srcs, func(b records.Block) bool { return b.Stream == g.Key.Stream && b.ID != g.Key.Block }) >= 0 {
					res.siblingDownsamples++
				}
			}
		}
	}
	res.faults = p.faults()
	res.checks = mon.Checks()
	for k, v := range w.ChecksMade() {
		res.checks[k] += v
	}
	res.checks[checkLiveness]++
	res.took = time.Since(start)
	for _, v := range res.violations {
		t.Errorf("seed %d: %s", seed, v)
	}
	if len(res.violations) > 0 {
		describe(t, w, names, strings.Join(res.violations, " "))
		if os.Getenv("CHAOS_KEEP") == "" {
			if err := w.DeleteResources(context.Background()); err != nil {
				t.Logf("delete the seed's resources: %v", err)
			}
		} else {
			t.Logf("CHAOS_KEEP: resources kept")
		}
	}
	t.Logf("seed %d: %v, faults %v", seed, res.took.Round(time.Millisecond), res.faults)
	res.requests = map[string]int{}
	for _, c := range append(w.Requests.Snapshot(), w.Env.Counter.Snapshot()...) {
		svc, _, _ := strings.Cut(c.Operation, " ")
		res.requests[svc] += c.N
	}
	t.Logf("requests to the emulator: %v", res.requests)
	t.Logf("messages: %d sent, %d delivered", b.sent.Load(), b.delivered.Load())
	return res
}

// describe logs the records of every block a violation names, and every
// group head, to start the diagnosis from.
func describe(t *testing.T, w *testworld.World, tenants []string, violations string) {
	ctx := context.Background()
	for _, tenant := range tenants {
		for _, b := range w.Blocks(ctx, tenant) {
			if strings.Contains(violations, b.ID) {
				t.Logf("record %s: %s gen %d claimedBy=%q producedBy=%q published=%v metaVid=%s markVid=%s retireAt=%d files=%v",
					b.Key(), b.State, b.Gen, b.ClaimedBy, b.ProducedBy, b.Published, b.MetaVersionID, b.MarkVersionID, b.RetireAt, b.Files)
			}
		}
		groups, _ := w.Store.TenantGroups(ctx, tenant)
		for _, g := range groups {
			t.Logf("group %s: %s, %d partitions, sources %v", g.Ref(), g.State, g.Partitions, g.Sources)
		}
	}
}

// sweeper is the schedule that invokes the cleaner's sweep.
type sweeper struct {
	deps    *pipeline.Deps
	running atomic.Bool
	// held is taken by each sweep and by the settle check, so no sweep
	// starts while the check reads the world: one that did could take due
	// ranges off the agenda and send them after the check found the bus
	// idle, and the check would then find nothing due and call the seed
	// settled (seed 17 in ci on d581102: stopped 1 s after a clock jump,
	// its planning cancelled).
	held sync.Mutex
}

func (s *sweeper) busy() bool { return s.running.Load() }

func (s *sweeper) run(ctx context.Context, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		s.held.Lock()
		s.running.Store(true)
		if err := (pipeline.Cleaner{Deps: s.deps}).Sweep(ctx); err != nil && ctx.Err() == nil {
			s.deps.Logger.ErrorContext(ctx, "sweep failed", "err", err)
		}
		s.running.Store(false)
		s.held.Unlock()
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			if e != nil {
				out = append(out, unjoin(e)...)
			}
		}
		return out
	}
	return []error{err}
}

// report renders a run's figures.
func report(results []result, failed []int64, wall time.Duration) string {
	sort.Slice(results, func(i, j int) bool { return results[i].seed < results[j].seed })
	faults, checks := map[string]int{}, map[string]int{}
	nFaults, nChecks, nViol := 0, 0, 0
	var slowest time.Duration
	for _, r := range results {
		for k, v := range r.faults {
			faults[k] += v
			nFaults += v
		}
		for k, v := range r.checks {
			checks[k] += v
			nChecks += v
		}
		nViol += len(r.violations)
		slowest = max(slowest, r.took)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: %d seeds in %v (slowest seed %v), %d failed\n", len(results), wall.Round(time.Second), slowest.Round(time.Second), len(failed))
	reqs := map[string]int{}
	for _, r := range results {
		for k, v := range r.requests {
			reqs[k] += v
		}
	}
	if n := len(results); n > 0 {
		fmt.Fprintf(&b, "emulator requests per seed: DynamoDB %d, S3 %d, SQS %d (provisioning, pipeline and checks)\n",
			reqs["DynamoDB"]/n, reqs["S3"]/n, reqs["SQS"]/n)
	}
	splits, splitSeeds := tally(results, func(r result) int { return r.splits })
	fmt.Fprintf(&b, "blocks split on arrival: %d split versions in %d seeds\n", splits, splitSeeds)
	downsamples, downsampleSeeds := tally(results, func(r result) int { return r.downsamples })
	partitioned, partitionedSeeds := tally(results, func(r result) int { return r.partitionedDownsamples })
	siblings, siblingSeeds := tally(results, func(r result) int { return r.siblingDownsamples })
	fmt.Fprintf(&b, "blocks downsampled: %d downsample versions in %d seeds; %d downsamples written in partitions, in %d seeds; %d with sibling partitions, in %d seeds\n",
		downsamples, downsampleSeeds, partitioned, partitionedSeeds, siblings, siblingSeeds)
	_, waitSeeds := tally(results, func(r result) int {
		if r.uploadWait {
			return 1
		}
		return 0
	})
	fmt.Fprintf(&b, "ranges waiting for their uploads' replicas (upload wait %v): %d seeds\n", chaosUploadWait, waitSeeds)
	fmt.Fprintf(&b, "faults injected: %d\n", nFaults)
	for _, k := range sortedKeys(faults) {
		fmt.Fprintf(&b, "  %6d  %s\n", faults[k], k)
	}
	fmt.Fprintf(&b, "invariant checks made: %d\n", nChecks)
	for _, k := range sortedKeys(checks) {
		fmt.Fprintf(&b, "  %6d  %s\n", checks[k], k)
	}
	fmt.Fprintf(&b, "violations: %d\n", nViol)
	sort.Slice(failed, func(i, j int) bool { return failed[i] < failed[j] })
	for _, r := range results {
		for _, v := range r.violations {
			fmt.Fprintf(&b, "  seed %d: %s\n", r.seed, firstLine(v))
		}
	}
	for _, s := range failed {
		fmt.Fprintf(&b, "replay: %s\n", replayCommand(s))
	}
	return b.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
