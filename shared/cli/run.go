package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/localpipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
)

func init() {
	register(&command{
		name:    "run",
		summary: "run the pipeline here — the four handlers and the sweep — on the deployment's queues",
		usage:   "[--until-idle] [--log FILE] [--sweep-every D] [--against-aws]",
		aws:     true,
		help: `Runs the planner, compact, cleaner and uploader in this process, fed from the
deployment's queues as Lambda's event sources feed them (batches, FIFO
order per group, partial batch failures, the visibility timeout), with the
cleaner's sweep on a timer: what the deployed functions do, here. It is how
Sluice runs on the local emulator — upload blocks, then 'sluice run
--until-idle' — and it can drain a backlog of a deployment in AWS.

It shows its progress on stderr — blocks by state, versions running, jobs
leased, outputs published, what waits and until when — and writes the
handlers' logs (the same JSON lines the functions write) to --log.

--until-idle stops once nothing is left to do now: no message is queued or
in flight, no version is unfinished, no block is between states. What waits
for time — a range that closes later, deletions after the deletion delay —
is listed; run again later (or set SLUICE_CLOSE_DELAY, SLUICE_UPLOAD_WAIT
and SLUICE_DELETION_DELAY in the settings) to go on. Without it, run goes on
until Ctrl-C.

Ctrl-C stops taking new messages and lets the batches in flight finish;
a second Ctrl-C stops them too (their messages come back after the
visibility timeout, and every step they had not finished is re-driven: the
protocol recovers from a process that stops at any line).

Against AWS (no --endpoint, no AWS_ENDPOINT_URL) it competes with the
deployed functions for the same queues. That is safe — every state change
is fenced on a version, a lease or a generation, whoever makes it — but it
needs the four functions' permissions and a machine that finishes a
compaction job well within its lease (SLUICE_LEASE_DURATION, 20 min), so
it is refused unless --against-aws says you mean it.`,
		setup: func(fs *flag.FlagSet) runFunc {
			untilIdle := fs.Bool("until-idle", false, "stop once nothing is left to do now")
			logFile := fs.String("log", filepath.Join(".sluice", "run.log"), "where the handlers' logs go ('-' for stderr)")
			sweepEvery := fs.Duration("sweep-every", 30*time.Second, "how often the cleaner's sweep runs")
			againstAWS := fs.Bool("against-aws", false, "run against the deployment in AWS itself, beside its functions")
			return func(ctx context.Context, e *Env, args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q", args[0])
				}
				if e.Endpoint() == "" && !*againstAWS {
					return refusef("no endpoint set: this would run against AWS itself, beside the deployed functions " +
						"(safe, every change is fenced, but it needs their permissions): pass --against-aws to mean it, " +
						"or --endpoint / an env file for the local emulator")
				}
				cfg, err := e.Config(true)
				if err != nil {
					return err
				}
				if missing := missingQueues(cfg); len(missing) > 0 {
					return usagef("no URL for queue(s) %s: the env file of a deployment has them (after 'make demo': .sluice/demo.env)", strings.Join(missing, ", "))
				}
				logger, closeLog, err := runLogger(*logFile, e.Stderr)
				if err != nil {
					return err
				}
				defer closeLog()
				c, err := e.Clients(ctx)
				if err != nil {
					return err
				}
				opts := RunOptions{UntilIdle: *untilIdle, SweepEvery: *sweepEvery, Logger: logger, Progress: e.progress(),
					Hard: hardStop(ctx, e.Stderr)}
				sum, err := RunPipeline(ctx, c, cfg, opts)
				if sum != nil {
					sum.Print(e.Stdout)
				}
				return err
			}
		},
	})
}

func missingQueues(cfg config.Config) []string {
	var out []string
	for _, q := range spec.Default("sluice").Queues {
		if localpipeline.QueueURL(cfg, q.ID) == "" {
			out = append(out, string(q.ID))
		}
	}
	return out
}

func runLogger(path string, stderr io.Writer) (*slog.Logger, func(), error) {
	if path == "-" {
		return slog.New(slog.NewJSONHandler(stderr, nil)), func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, refusef("log file %s: %v", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, refusef("log file %s: %v", path, err)
	}
	return slog.New(slog.NewJSONHandler(f, nil)), func() { _ = f.Close() }, nil
}

// hardStop is the context the handlers run under: it outlives ctx (the
// first Ctrl-C stops new work only) and ends on a second Ctrl-C.
func hardStop(ctx context.Context, stderr io.Writer) context.Context {
	hard, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt)
	go func() {
		defer signal.Stop(sig)
		n := 0
		for {
			select {
			case <-sig:
				n++
				if n == 1 {
					fmt.Fprintln(stderr, "\nstopping: the batches in flight finish (Ctrl-C again to stop them too)")
					continue
				}
				fmt.Fprintln(stderr, "stopping now: what was in flight comes back after the visibility timeout")
				cancel()
				return
			case <-hard.Done():
				return
			}
		}
	}()
	return hard
}

// RunOptions tune RunPipeline.
type RunOptions struct {
	// UntilIdle stops once nothing is left to do now.
	UntilIdle bool
	// SweepEvery is the sweep's interval; zero means 30 s.
	SweepEvery time.Duration
	// Logger gets the handlers' logs; nil discards them.
	Logger *slog.Logger
	// Progress gets the live view; nil shows none.
	Progress io.Writer
	// Hard is the handlers' context: it may outlive ctx, so that a stop
	// lets the batches in flight finish. Nil means ctx.
	Hard context.Context
	// Quiet is how long the queues must be still before an idle check
	// (zero: 2 s).
	Quiet time.Duration
}

// RunSummary is what a run did and what waits.
type RunSummary struct {
	Took        time.Duration
	Invocations map[string]int64
	// Waiting lists what waits for time, when the run stopped idle.
	Waiting []string
	// Stopped is true when the run ended on a stop (Ctrl-C), not idle.
	Stopped bool
}

// Print writes the summary.
func (s *RunSummary) Print(w io.Writer) {
	var parts []string
	for _, k := range sortedKeys(s.Invocations) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Invocations[k]))
	}
	how := "nothing is left to do now"
	if s.Stopped {
		how = "stopped"
	}
	fmt.Fprintf(w, "sluice run: %s after %s (invocations: %s)\n", how, s.Took.Round(time.Second), strings.Join(parts, ", "))
	for _, line := range s.Waiting {
		fmt.Fprintf(w, "  waiting: %s\n", line)
	}
}

// RunPipeline runs the four handlers and the sweep on cfg's queues until
// ctx ends or, with UntilIdle, until nothing is left to do now.
func RunPipeline(ctx context.Context, c *awsenv.Clients, cfg config.Config, o RunOptions) (*RunSummary, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SweepEvery == 0 {
		o.SweepEvery = 30 * time.Second
	}
	if o.Quiet == 0 {
		o.Quiet = 2 * time.Second
	}
	hard := o.Hard
	if hard == nil {
		hard = ctx
	}
	host, _ := os.Hostname()
	p, err := localpipeline.New(c, cfg, spec.Default("sluice"), localpipeline.Options{
		Logger: o.Logger, SweepInterval: o.SweepEvery, Owner: fmt.Sprintf("sluice-run@%s-%d", host, os.Getpid()),
		Wrap: func(_ string, h eventsource.Handler) eventsource.Handler {
			return func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				return h(hard, ev)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	sum := &RunSummary{}
	view := newRunView(o.Progress, p.Deps.Store, p.Runner)
	viewCtx, stopView := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); view.run(viewCtx) }()
	defer func() {
		stopView()
		wg.Wait()
		sum.Took = time.Since(start)
		sum.Invocations = map[string]int64{}
		for k, v := range p.Runner.Stats() {
			sum.Invocations[k] = v.Invocations
		}
	}()

	if !o.UntilIdle {
		err := p.Runner.Run(ctx)
		sum.Stopped = true
		return sum, err
	}
	for {
		// Every schedule that is due (the sweep, the bucket index,
		// retention and metrics passes): RunUntilIdle does not wait for
		// them. The runner logs their failures.
		_ = p.Runner.RunDue(hard)
		if err := p.Runner.RunUntilIdle(ctx, o.Quiet); err != nil {
			if ctx.Err() != nil {
				sum.Stopped = true
				return sum, nil
			}
			return sum, err
		}
		idle, waiting, err := NothingToDoNow(ctx, p.Deps.Store, time.Now())
		if err != nil {
			return sum, err
		}
		if idle {
			sum.Waiting = waiting
			return sum, nil
		}
	}
}

// NothingToDoNow reports whether the deployment has nothing left to do at
// now: no version unfinished, no block between states, nothing due on the
// sweep's agenda. waiting lists what waits for time: ranges that close
// later, deletions after the deletion delay.
func NothingToDoNow(ctx context.Context, st *records.Store, now time.Time) (idle bool, waiting []string, err error) {
	tenants, err := st.Tenants(ctx)
	if err != nil {
		return false, nil, err
	}
	for _, t := range tenants {
		groups, err := st.TenantGroups(ctx, t)
		if err != nil {
			return false, nil, err
		}
		quarantined := map[string]bool{}
		for _, g := range groups {
			if g.State.Unfinished() {
				return false, nil, nil
			}
			if g.State == protocol.GroupQuarantined {
				quarantined[g.Ref()] = true
			}
		}
		blocks, err := st.TenantBlocks(ctx, t)
		if err != nil {
			return false, nil, err
		}
		for _, b := range blocks {
			switch {
			case b.State == protocol.BlockClaimed && quarantined[b.ClaimedBy]:
			case b.State == protocol.BlockLive && !b.Published, b.State == protocol.BlockPending, b.State == protocol.BlockClaimed,
				b.State == protocol.BlockRetiring && b.MarkVersionID == "",
				b.State == protocol.BlockQuarantined && b.NoCompactMarkVersionID == "":
				return false, nil, nil
			}
		}
	}
	all, err := st.DueAll(ctx, now.Add(100*365*24*time.Hour))
	if err != nil {
		return false, nil, err
	}
	byKind := records.ByKind(all)
	for _, k := range []records.AgendaKind{records.AgendaDelete, records.AgendaRange, records.AgendaOrphans} {
		entries := byKind[k]
		perTenant := map[string]int{}
		first := map[string]time.Time{}
		ranges := map[string]time.Time{}
		for _, e := range entries {
			if !e.Due.After(now) {
				return false, nil, nil // due now: the next sweep does it
			}
			perTenant[e.Tenant]++
			if f, ok := first[e.Tenant]; !ok || e.Due.Before(f) {
				first[e.Tenant] = e.Due
			}
			if k != records.AgendaRange {
				continue
			}
			// A range re-checked when it closes; one that has been
			// compacted since needs no line (its re-check finds nothing).
			g, err := planning.ParseGroupKey(e.Subject)
			if err != nil {
				continue
			}
			if _, planned, err := st.GetGroup(ctx, e.Tenant, g); err != nil {
				return false, nil, err
			} else if planned {
				continue
			}
			name := e.Tenant + "/" + e.Subject
			if at, ok := ranges[name]; !ok || e.Due.After(at) {
				ranges[name] = e.Due
			}
		}
		for _, name := range sortedKeys(ranges) {
			tenant, group, _ := strings.Cut(name, "/")
			waiting = append(waiting, fmt.Sprintf("%s: a range (group %s) waits until %s, for its blocks to cover it or for its uploads' replicas (SLUICE_UPLOAD_WAIT), and is compacted then",
				tenant, group, ranges[name].UTC().Format(time.DateTime)))
		}
		if k == records.AgendaDelete {
			for _, t := range sortedKeys(perTenant) {
				waiting = append(waiting, fmt.Sprintf("%s: %d compacted source(s) to delete after the deletion delay, the first at %s",
					t, perTenant[t], first[t].UTC().Format(time.DateTime)))
			}
		}
	}
	return true, waiting, nil
}

// runView shows a run's progress: one line, redrawn every two seconds on a
// terminal, printed when it changes (at most every ten seconds) otherwise.
type runView struct {
	w      io.Writer
	st     *records.Store
	runner *eventsource.Runner
	tty    bool
}

func newRunView(w io.Writer, st *records.Store, r *eventsource.Runner) *runView {
	v := &runView{w: w, st: st, runner: r}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			v.tty = true
		}
	}
	return v
}

func (v *runView) run(ctx context.Context) {
	if v.w == nil {
		return
	}
	every := 10 * time.Second
	if v.tty {
		every = 2 * time.Second
	}
	tk := time.NewTicker(every)
	defer tk.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			if v.tty && last != "" {
				fmt.Fprintln(v.w)
			}
			return
		case <-tk.C:
		}
		line, err := v.line(ctx)
		if err != nil || line == last {
			continue
		}
		last = line
		if v.tty {
			fmt.Fprintf(v.w, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(v.w, line)
		}
	}
}

// line is the view: blocks by state, versions at work, jobs leased, and
// the handlers' invocations so far.
func (v *runView) line(ctx context.Context) (string, error) {
	tenants, err := v.st.Tenants(ctx)
	if err != nil {
		return "", err
	}
	states := map[string]int{}
	running, leased := 0, 0
	for _, t := range tenants {
		blocks, err := v.st.TenantBlocks(ctx, t)
		if err != nil {
			return "", err
		}
		for _, b := range blocks {
			states[string(b.State)]++
		}
		groups, err := v.st.TenantGroups(ctx, t)
		if err != nil {
			return "", err
		}
		for _, g := range groups {
			if !g.State.Unfinished() {
				continue
			}
			running++
			parts, err := v.st.Partitions(ctx, t, g.Key, g.Version)
			if err != nil {
				return "", err
			}
			for _, p := range parts {
				if p.State == protocol.PartitionRunning {
					leased++
				}
			}
		}
	}
	var bs []string
	for _, s := range blockStates {
		if n := states[string(s)]; n > 0 {
			bs = append(bs, fmt.Sprintf("%d %s", n, s))
		}
	}
	var inv []string
	for _, k := range sortedKeys(v.runner.Stats()) {
		inv = append(inv, fmt.Sprintf("%s %d", k, v.runner.Stats()[k].Invocations))
	}
	return fmt.Sprintf("[%s] blocks: %s · %d version(s) at work, %d job(s) leased · invocations: %s",
		time.Now().Format("15:04:05"), strings.Join(bs, ", "), running, leased, strings.Join(inv, ", ")), nil
}
