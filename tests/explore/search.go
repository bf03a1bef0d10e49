package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/tests/testworld"
)

// Scope is what one exploration covers.
type Scope struct {
	// Actors: how many instances of each function run at once ("planner",
	// "compact", "cleaner", "uploader"). Two deliveries of one kind can
	// interleave only when that kind has two instances.
	Actors map[string]int
	// Crashes is how many deliveries of one schedule may crash (stop
	// before one of their writes, or after their last call without being
	// acknowledged, so the message comes again).
	Crashes int
	// Preemptions is how many times one schedule may stop a delivery
	// before one of its calls and run another delivery to its end there.
	Preemptions int
	// Late uploads the late block (version 2) at some point; Reupload the
	// first source again (a shipper's retry).
	Late, Reupload bool
	// MaxStates and Budget stop the search early (the report then says it
	// was not exhaustive); MaxDepth bounds one schedule's length (a longer
	// one is reported: the pipeline did not settle).
	MaxStates int
	MaxDepth  int
	Budget    time.Duration
	// Mutant, if set, breaks one condition of the protocol on purpose.
	Mutant *Mutant
}

// Report is what an exploration did and found.
type Report struct {
	States      int // distinct states reached
	Transitions int // deliveries, crashes, interleavings and time steps executed
	Pruned      int // transitions that led to a state already explored with at least the same budget
	Terminal    int // quiescent states checked for I1–I4
	Calls       int // AWS calls the handlers made
	MaxDepth    int
	Deepest     []string // the longest schedule explored
	// Covered: every schedule of at most this many steps was run and
	// checked (the search is breadth first; when it stops early, the
	// schedules it reached are complete up to this length).
	Covered    int
	Exhaustive bool
	Took       time.Duration
	Kinds      map[string]int // transitions executed, by kind
	Violations []Violation
}

// Violation is something an invariant check caught, with the schedule
// that led there (Replay runs it again).
type Violation struct {
	Trace []string
	What  string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s\n  schedule (%d steps): %s", v.What, len(v.Trace), strings.Join(v.Trace, " → "))
}

// transition is one step between quiescent states.
type transition struct {
	kind   string // deliver, crash, pair, time, late, reupload
	a, b   item
	actorA string
	actorB string
	k      int // crash: before call k (len+1: after the last); pair: B starts before A's call k
	// pair: B stops before its call j while A runs to its end, then
	// finishes (0: B runs to its end first). lease: A's lease expires
	// before B starts.
	j     int
	lease bool
}

// cost is the preemptions a pair spends: each time a delivery is stopped
// for another to run.
func (t transition) cost() int {
	if t.j > 0 {
		return 2
	}
	return 1
}

func (t transition) String() string {
	switch t.kind {
	case "deliver":
		return fmt.Sprintf("%s@%s", t.a.id, t.actorA)
	case "crash":
		return fmt.Sprintf("%s@%s!%d", t.a.id, t.actorA, t.k)
	case "pair":
		sep := "|"
		if t.lease {
			sep = "|+lease|"
		}
		b := fmt.Sprintf("%s@%s", t.b.id, t.actorB)
		if t.j > 0 {
			b += fmt.Sprintf("^%d", t.j)
		}
		return fmt.Sprintf("%s@%s^%d%s%s", t.a.id, t.actorA, t.k, sep, b)
	}
	return t.kind
}

type budget struct{ crashes, preemptions int }

func (b budget) covers(o budget) bool {
	return b.crashes >= o.crashes && b.preemptions >= o.preemptions
}

// Explorer searches the schedules of one scope.
type Explorer struct {
	t        testing.TB
	x        *world
	scope    Scope
	visited  map[string][]budget
	readable map[string]error
	report   Report
	start    time.Time
	stopped  bool
	seenViol int
	refused  int64
}

// New builds the explored world for scope.
func New(t testing.TB, blocks Blocks, base time.Time, scope Scope) *Explorer {
	if scope.MaxDepth == 0 {
		scope.MaxDepth = 200
	}
	return &Explorer{t: t, x: newWorld(t, blocks, base, scope.Actors, scope.Mutant), scope: scope,
		visited: map[string][]budget{}, readable: map[string]error{}, report: Report{Kinds: map[string]int{}}}
}

// initial uploads the sources and returns the state their notifications
// leave.
func (e *Explorer) initial() (*state, error) {
	for _, b := range e.x.blocks.Sources {
		if err := e.x.upload(b); err != nil {
			return nil, err
		}
	}
	s := e.x.save(nil, 0, false, false)
	if err := e.x.takeEvents(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run explores every schedule of the scope from the first uploads.
func (e *Explorer) Run() Report {
	e.start = time.Now()
	s, err := e.initial()
	if err != nil {
		e.violation(nil, fmt.Sprintf("setting up: %v", err))
		return e.report
	}
	// Breadth first: the shortest schedules come first, so a violation is
	// found with its shortest schedule, and a bounded search covers every
	// schedule up to some length instead of one corner to any depth.
	queue := []node{{s, nil, budget{crashes: e.scope.Crashes, preemptions: e.scope.Preemptions}}}
	for len(queue) > 0 && !e.outOfBudget() {
		n := queue[0]
		e.report.Covered = len(n.path)
		queue = queue[1:]
		queue = append(queue, e.visit(n)...)
	}
	if len(queue) == 0 {
		e.report.Covered = e.report.MaxDepth
	}
	e.report.Exhaustive = !e.stopped
	e.report.Took = time.Since(e.start)
	return e.report
}

// Replay runs one schedule (a Violation's Trace) and reports what its
// checks find on the way, and at its end if the pipeline is quiescent
// there.
func (e *Explorer) Replay(trace []string) Report {
	e.start = time.Now()
	s, err := e.initial()
	if err != nil {
		e.violation(nil, fmt.Sprintf("setting up: %v", err))
		return e.report
	}
	var path []string
	for _, step := range trace {
		e.x.restore(s)
		t, err := e.parse(s, step)
		if err != nil {
			e.violation(path, err.Error())
			return e.report
		}
		path = append(path, step)
		next, _, problems, err := e.apply(s, t)
		if err != nil {
			e.violation(path, err.Error())
			return e.report
		}
		s = next
		e.x.restore(s)
		e.check(s, path, problems)
	}
	e.x.restore(s)
	items, err := e.x.items(s)
	if err != nil {
		e.violation(path, err.Error())
		return e.report
	}
	if ts, err := e.enabled(s); err == nil && len(ts) == 0 && len(items) == 0 {
		e.terminal(s, path)
	}
	e.report.Took = time.Since(e.start)
	return e.report
}

func (e *Explorer) violation(path []string, what string) {
	e.report.Violations = append(e.report.Violations, Violation{Trace: slices.Clone(path), What: what})
}

func (e *Explorer) outOfBudget() bool {
	if e.stopped {
		return true
	}
	if (e.scope.MaxStates > 0 && e.report.States >= e.scope.MaxStates) ||
		(e.scope.Budget > 0 && time.Since(e.start) > e.scope.Budget) || len(e.report.Violations) >= 5 {
		e.stopped = true
	}
	return e.stopped
}

// node is a state still to explore, the schedule that reached it and the
// budget left there.
type node struct {
	s    *state
	path []string
	b    budget
}

// visit executes every transition from a node's state and returns the
// states they reach that are worth exploring on.
func (e *Explorer) visit(n node) []node {
	s, path, b := n.s, n.path, n.b
	if e.outOfBudget() {
		return nil
	}
	e.x.restore(s)
	d, err := e.x.digest(s)
	if err != nil {
		e.violation(path, err.Error())
		return nil
	}
	for _, seen := range e.visited[d] {
		if seen.covers(b) {
			e.report.Pruned++
			return nil
		}
	}
	e.visited[d] = append(e.visited[d], b)
	e.report.States++
	if len(path) > e.report.MaxDepth {
		e.report.MaxDepth, e.report.Deepest = len(path), slices.Clone(path)
	}
	if len(path) >= e.scope.MaxDepth {
		e.violation(path, fmt.Sprintf("liveness: the pipeline did not settle within %d steps", e.scope.MaxDepth))
		return nil
	}
	items, err := e.x.items(s)
	if err != nil {
		e.violation(path, err.Error())
		return nil
	}
	others, err := e.enabled(s)
	if err != nil {
		e.violation(path, err.Error())
		return nil
	}
	if len(items) == 0 && len(others) == 0 {
		e.terminal(s, path)
		return nil
	}
	var out []node
	// Every delivery on its own, run to its end, first: their calls decide
	// which crashes and interleavings can change anything.
	type child struct {
		t        transition
		state    *state
		problems []string
	}
	var children []child
	calls := map[string][]call{}
	for _, it := range items {
		t := transition{kind: "deliver", a: it, actorA: it.kind + "-1"}
		next, out, problems, err := e.apply(s, t)
		if err != nil {
			e.violation(append(slices.Clone(path), t.String()), err.Error())
			return nil
		}
		calls[it.id] = out
		children = append(children, child{t, next, problems})
	}
	var ts []transition
	if b.crashes > 0 {
		for _, it := range items {
			for k := 1; k <= len(calls[it.id])+1; k++ {
				if k <= len(calls[it.id]) && !calls[it.id][k-1].writes() {
					continue // crashing before a read is crashing before the next write
				}
				ts = append(ts, transition{kind: "crash", a: it, actorA: it.kind + "-1", k: k})
			}
		}
	}
	if b.preemptions > 0 {
		ts = append(ts, e.interleavings(items, calls, b.preemptions)...)
	}
	ts = append(ts, others...)
	for _, c := range children {
		out = append(out, e.step(c.state, path, c.t, c.problems, b)...)
	}
	for _, t := range ts {
		if e.outOfBudget() {
			return out
		}
		next, _, problems, err := e.apply(s, t)
		if err != nil {
			e.violation(append(slices.Clone(path), t.String()), err.Error())
			continue
		}
		nb := b
		switch t.kind {
		case "crash":
			nb.crashes--
		case "pair":
			if t.cost() > nb.preemptions {
				continue
			}
			nb.preemptions -= t.cost()
		}
		out = append(out, e.step(next, path, t, problems, nb)...)
	}
	return out
}

// enabled lists the transitions of s that deliver nothing: time passing
// (only while nothing waits to be delivered, as in an idle pipeline), the
// late block's upload and the re-upload. The world must be in s.
func (e *Explorer) enabled(s *state) ([]transition, error) {
	var ts []transition
	if len(s.mail.Mail) == 0 && len(s.events) == 0 && !s.waited {
		next, err := e.x.nextDeadline()
		if err != nil {
			return nil, err
		}
		if !next.IsZero() {
			ts = append(ts, transition{kind: "time"})
		}
	}
	if e.scope.Late && !s.late {
		ts = append(ts, transition{kind: "late"})
	}
	if e.scope.Reupload && !s.reup {
		ts = append(ts, transition{kind: "reupload"})
	}
	return ts, nil
}

// step checks the state a transition reached: the node to explore on
// from, unless a check failed there.
func (e *Explorer) step(next *state, path []string, t transition, problems []string, b budget) []node {
	p := append(slices.Clone(path), t.String())
	e.x.restore(next)
	if !e.check(next, p, problems) {
		return nil
	}
	return []node{{next, p, b}}
}

// interleavings lists, for every two deliveries that may run at once,
// the points of the first before which starting the second can change
// the outcome: those where the first's next call touches what the second
// writes, or writes what the second touches. Elsewhere the two orders
// are the same schedule. With two preemptions to spend, the second may
// also stop at such a point of its own — before a call that conflicts
// with what the first has left to do — while the first runs to its end.
func (e *Explorer) interleavings(items []item, calls map[string][]call, preemptions int) []transition {
	var ts []transition
	points := func(a, b []call) []int {
		var ks []int
		for k := 2; k <= len(a); k++ {
			for _, c := range b {
				if conflicts(a[k-1], c) {
					ks = append(ks, k)
					break
				}
			}
		}
		return ks
	}
	add := func(t transition) {
		ts = append(ts, t)
		if preemptions < 2 {
			return
		}
		for _, j := range points(calls[t.b.id], calls[t.a.id][t.k-1:]) {
			t2 := t
			t2.j = j
			ts = append(ts, t2)
		}
	}
	for _, a := range items {
		for _, b := range items {
			if a.id == b.id {
				continue
			}
			actorB := b.kind + "-1"
			if a.kind == b.kind {
				if e.scope.Actors[a.kind] < 2 {
					continue
				}
				actorB = b.kind + "-2"
			}
			for _, k := range points(calls[a.id], calls[b.id]) {
				add(transition{kind: "pair", a: a, actorA: a.kind + "-1", k: k, b: b, actorB: actorB})
			}
		}
		// The same message delivered twice at once (its visibility timeout
		// ran out under a slow first delivery), by a second instance —
		// also once the first's lease has expired.
		if e.scope.Actors[a.kind] >= 2 && a.mail != nil {
			for _, k := range points(calls[a.id], calls[a.id]) {
				add(transition{kind: "pair", a: a, actorA: a.kind + "-1", k: k, b: a, actorB: a.kind + "-2"})
				if a.kind == "compact" {
					add(transition{kind: "pair", lease: true, a: a, actorA: a.kind + "-1", k: k, b: a, actorB: a.kind + "-2"})
				}
			}
		}
	}
	return ts
}

// --- executing a transition ---

// driver runs one delivery call by call.
type driver struct {
	r       *run
	calls   []call
	pending bool
	done    *event
}

func (d *driver) advance() error {
	ev, err := d.r.next()
	if err != nil {
		return err
	}
	if ev.done {
		d.done = &ev
	} else {
		d.calls = append(d.calls, *ev.call)
		d.pending = true
	}
	return nil
}

// runTo lets the delivery go on until its call n is about to be made (n ≥
// 1), or to its end (n = 0).
func (d *driver) runTo(n int) error {
	for d.done == nil {
		if d.pending {
			if n > 0 && len(d.calls) == n {
				return nil
			}
			d.pending = false
			d.r.verdict <- true
		}
		if err := d.advance(); err != nil {
			return err
		}
	}
	return nil
}

// crash refuses the pending call and every later one.
func (d *driver) crash() error {
	for d.done == nil {
		if d.pending {
			d.pending = false
			d.r.verdict <- false
		}
		if err := d.advance(); err != nil {
			return err
		}
	}
	return nil
}

func (e *Explorer) begin(it item, actor string) (*driver, error) {
	deps, ok := e.x.actors[actor]
	if !ok {
		return nil, fmt.Errorf("no actor %s in the scope", actor)
	}
	d := &driver{r: start(e.x.ctx, e.x.deliver(it, deps))}
	return d, d.advance()
}

// apply executes t from s and returns the state it leaves, the calls
// delivery a made, and what the Monitor caught while it ran.
func (e *Explorer) apply(s *state, t transition) (*state, []call, []string, error) {
	e.x.restore(s)
	next := &state{events: slices.Clone(s.events), eventSeq: s.eventSeq, late: s.late, reup: s.reup}
	e.report.Transitions++
	e.report.Kinds[t.kind]++
	var callsA []call
	switch t.kind {
	case "late":
		if err := e.x.upload(e.x.blocks.Late); err != nil {
			return nil, nil, nil, err
		}
		next.late = true
		e.x.w.Uploaded[tenant] = append(e.x.w.Uploaded[tenant], e.x.blocks.Late.Dir)
	case "reupload":
		if err := e.x.upload(e.x.blocks.Reupload); err != nil {
			return nil, nil, nil, err
		}
		next.reup = true
	case "time":
		at, err := e.x.nextDeadline()
		if err != nil {
			return nil, nil, nil, err
		}
		e.x.clock.offset.Store(int64(at.Sub(e.x.clock.base)))
		next.waited = true
	default:
		var err error
		if callsA, err = e.deliveries(next, t); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", t, err)
		}
	}
	next.offset = time.Duration(e.x.clock.offset.Load())
	next.mail = e.x.mb.State()
	sortMail(&next.mail)
	if err := e.x.takeEvents(next); err != nil {
		return nil, nil, nil, err
	}
	next.ddb, next.s3 = e.x.w.Env.Cloud.DynamoDB.Snapshot(), e.x.w.Env.Cloud.S3.Snapshot()
	return next, callsA, e.problems(), nil
}

// deliveries runs the deliveries of t (one, or two interleaved).
func (e *Explorer) deliveries(next *state, t transition) ([]call, error) {
	dup := t.kind == "pair" && t.b.id == t.a.id
	take(e.x, next, t.a)
	if t.kind == "pair" && !dup {
		take(e.x, next, t.b)
	}
	a, err := e.begin(t.a, t.actorA)
	if err != nil {
		return nil, err
	}
	switch t.kind {
	case "deliver":
		if err := a.runTo(0); err != nil {
			return nil, err
		}
		e.settle(next, t.a, a.done.err != nil)
	case "crash":
		if err := a.runTo(t.k); err != nil {
			return nil, err
		}
		if err := a.crash(); err != nil {
			return nil, err
		}
		e.settle(next, t.a, true)
	case "pair":
		if err := a.runTo(t.k); err != nil {
			return nil, err
		}
		if t.lease {
			e.x.clock.offset.Add(int64(leaseDuration + time.Second))
		}
		b, err := e.begin(t.b, t.actorB)
		if err != nil {
			return nil, err
		}
		if err := b.runTo(t.j); err != nil {
			return nil, err
		}
		if err := a.runTo(0); err != nil {
			return nil, err
		}
		if err := b.runTo(0); err != nil {
			return nil, err
		}
		e.report.Calls += len(b.calls)
		if dup {
			// One message delivered twice: SQS keeps it only if neither
			// delivery acknowledged it.
			e.settle(next, t.a, a.done.err != nil && b.done.err != nil)
		} else {
			e.settle(next, t.b, b.done.err != nil)
			e.settle(next, t.a, a.done.err != nil)
		}
	}
	e.report.Calls += len(a.calls)
	return a.calls, nil
}

// problems is what the Monitor caught and what AWS would have refused
// since the last call.
func (e *Explorer) problems() []string {
	var out []string
	if v := e.x.mon.Violations(); len(v) > e.seenViol {
		for _, what := range v[e.seenViol:] {
			out = append(out, "online: "+what)
		}
		e.seenViol = len(v)
	}
	if n := e.x.w.Pipeline.Refused.N(); n > e.refused {
		out = append(out, fmt.Sprintf("AWS limits: %d request(s) AWS would refuse", n-e.refused))
		e.refused = n
	}
	return out
}

// take removes it from the world before it is delivered.
func take(x *world, s *state, it item) {
	switch {
	case it.mail != nil:
		seq := it.mail.Seq
		x.mb.Take(func(m testworld.Mail) bool { return m.Seq == seq })
	case it.event != nil:
		s.events = slices.DeleteFunc(slices.Clone(s.events), func(p pendingEvent) bool { return "e"+strconv.Itoa(p.seq) == it.id })
	}
}

// settle puts a delivery's message back when the delivery failed or
// crashed (again: SQS delivers it again), and drops it when it succeeded.
func (e *Explorer) settle(s *state, it item, again bool) {
	if !again {
		return
	}
	switch {
	case it.mail != nil:
		e.x.mb.Put(*it.mail)
	case it.event != nil:
		seq, _ := strconv.Atoi(strings.TrimPrefix(it.id, "e"))
		s.events = append(s.events, pendingEvent{seq: seq, msg: *it.event})
		sort.Slice(s.events, func(i, j int) bool { return s.events[i].seq < s.events[j].seq })
	}
}

// sortMail keeps mail in send order: a message put back after a failed
// delivery is again ahead of the later messages of its FIFO group.
func sortMail(m *testworld.MailboxState) {
	sort.SliceStable(m.Mail, func(i, j int) bool { return m.Mail[i].Seq < m.Mail[j].Seq })
}

// --- checks ---

// check judges the state a step reached: what went wrong while the step
// ran (the Monitor's online checks — I5, deletes against records,
// published meta.json — and requests AWS would refuse), and I1/I3 as a
// reader sees the bucket now. It reports whether to go on from there.
func (e *Explorer) check(s *state, path []string, problems []string) bool {
	for _, p := range problems {
		e.violation(path, p)
	}
	key, err := e.x.bucketDigest(s)
	if err != nil {
		e.violation(path, err.Error())
		return false
	}
	rerr, cached := e.readable[key]
	if !cached {
		_, rerr = e.x.w.CheckReadable(e.x.ctx, e.x.clock.Now(), tenant)
		e.readable[key] = rerr
	}
	if rerr != nil {
		e.violation(path, "reader's view: "+rerr.Error())
		return false
	}
	return len(problems) == 0
}

// terminal checks a quiescent state: I1–I4 at rest.
func (e *Explorer) terminal(s *state, path []string) {
	e.x.restore(s)
	e.report.Terminal++
	if err := e.x.w.CheckQuiescent(context.Background(), tenant); err != nil {
		var lines []string
		for _, x := range unjoin(err) {
			lines = append(lines, x.Error())
		}
		e.violation(path, "at quiescence: "+strings.Join(lines, "; "))
	}
}

func unjoin(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		return j.Unwrap()
	}
	return []error{err}
}

// parse reads one step of a trace in state s.
func (e *Explorer) parse(s *state, step string) (transition, error) {
	switch step {
	case "time", "late", "reupload":
		return transition{kind: step}, nil
	}
	items, err := e.x.items(s)
	if err != nil {
		return transition{}, err
	}
	find := func(ref string) (item, string, error) {
		id, actor, ok := strings.Cut(ref, "@")
		if !ok {
			return item{}, "", fmt.Errorf("step %q: want <item>@<actor>", step)
		}
		for _, it := range items {
			if it.id == id {
				return it, actor, nil
			}
		}
		return item{}, "", fmt.Errorf("step %q: no %s can be delivered here", step, id)
	}
	if a, rest, ok := strings.Cut(step, "^"); ok {
		kstr, b, _ := strings.Cut(rest, "|")
		lease := strings.HasPrefix(b, "+lease|")
		b = strings.TrimPrefix(b, "+lease|")
		j := 0
		if bref, jstr, ok := strings.Cut(b, "^"); ok {
			var err error
			if j, err = strconv.Atoi(jstr); err != nil {
				return transition{}, fmt.Errorf("step %q: %w", step, err)
			}
			b = bref
		}
		k, err := strconv.Atoi(kstr)
		if err != nil {
			return transition{}, fmt.Errorf("step %q: %w", step, err)
		}
		ia, aa, err := find(a)
		if err != nil {
			return transition{}, err
		}
		ib, ab, err := find(b)
		if err != nil {
			return transition{}, err
		}
		return transition{kind: "pair", lease: lease, a: ia, actorA: aa, k: k, b: ib, actorB: ab, j: j}, nil
	}
	if a, kstr, ok := strings.Cut(step, "!"); ok {
		k, err := strconv.Atoi(kstr)
		if err != nil {
			return transition{}, fmt.Errorf("step %q: %w", step, err)
		}
		it, actor, err := find(a)
		return transition{kind: "crash", a: it, actorA: actor, k: k}, err
	}
	it, actor, err := find(step)
	return transition{kind: "deliver", a: it, actorA: actor}, err
}
