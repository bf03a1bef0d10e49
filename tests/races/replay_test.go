// Package races replays, step by step, the three production incidents that
// Sluice is built to make impossible (../shared/seeds/, docs/design.md §6), plus
// variants of each. Every test names the seed file whose timeline it
// replays.
//
// A replay drives the real handlers of shared/pipeline against the
// emulator, one call at a time: handlers are paused at their protocol steps
// (pipeline.Hook, testworld.Steps), rivals run while they wait, and then
// they are released. Messages the handlers send are kept in a
// testworld.Mailbox, so the test decides what is delivered when — held back,
// duplicated, late. Time is a testworld.Clock the test moves forward, so
// lease expiry and deletion delays need no sleeping.
//
// I1–I5 (docs/design.md §5) are asserted at the end (testworld.CheckQuiescent,
// the reader's view), and at every step where they must hold: the reader's
// view (I1, I3) between steps, and the testworld.Monitor online — every
// accepted write judged against the state it left (I5), every delete
// against the records (I1, I4), every block op against its gen (I5).
package races

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// The seed files the replays follow (../shared/seeds/ next to the repo).
const (
	seed000 = "000_d90c1df027825b86.txt" // Cortex: cleaner vs compactor on group versions
	seed003 = "003_bbf5ade7bbe7884f.txt" // Janus: aggregation vs collection
	seed004 = "004_b0eb2b2dc6464648.txt" // Neon: delayed DELETE vs re-creation
)

// Replay-sized durations: a job runs (lease) < the orphan delay < the
// deletion delay, as in production (20m < 30m < 48h); the test moves the
// clock instead of waiting.
const (
	leaseDuration = time.Minute
	redriveAfter  = 2 * time.Minute
	orphanDelay   = 5 * time.Minute
	deletionDelay = 10 * time.Minute
	stuckAfter    = 30 * time.Minute
)

// stepTimeout bounds every wait for a handler to reach a step or return:
// it is a few requests away, but the whole suite shares one emulator on a
// two-core machine, so the bound is generous; it only ends a stuck test.
const stepTimeout = 2 * time.Minute

// day is the start of a day two days ago: every range of it has ended.
func day() time.Time { return time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour) }

type replay struct {
	t      *testing.T
	ctx    context.Context
	w      *testworld.World
	clock  *testworld.Clock
	mon    *testworld.Monitor
	mb     *testworld.Mailbox
	tenant string
	main   *actor
}

// newReplay builds the world of one replay: a fresh deployment whose
// handlers send into a mailbox and read a clock the test moves.
func newReplay(t *testing.T, seedFile, tenant string, configure func(*config.Config)) *replay {
	t.Helper()
	if p := filepath.Join("..", "..", "..", "shared", "seeds", seedFile); fileExists(p) {
		t.Logf("replays the timeline of %s", p)
	} else {
		t.Logf("replays the timeline of seeds/%s (not found next to the repo)", seedFile)
	}
	clock := &testworld.Clock{}
	w := testworld.New(t, testworld.Options{
		Env:      []envtest.Option{envtest.WithLogLevel(slog.LevelInfo)},
		Pipeline: localrun.Options{Now: clock.Now},
		Configure: func(c *config.Config) {
			c.LeaseDuration, c.RedriveAfter, c.StuckAfter = leaseDuration, redriveAfter, stuckAfter
			c.OrphanDelay, c.DeletionDelay = orphanDelay, deletionDelay
			if configure != nil {
				configure(c)
			}
		},
	})
	mon := testworld.NewMonitor(w)
	mon.Install(w)
	mb := testworld.NewMailbox(w.Config.Queues)
	w.Pipeline.Deps.Send = messages.Sender{SQS: awslimits.SQS{SQSSender: mb, Refused: w.Pipeline.Refused}, Queues: w.Config.Queues}
	r := &replay{t: t, ctx: context.Background(), w: w, clock: clock, mon: mon, mb: mb, tenant: tenant}
	r.main = r.actor("main", nil)
	t.Cleanup(func() {
		if err := mon.Err(); err != nil {
			t.Errorf("online checks: %v", err)
		}
		if t.Failed() {
			t.Logf("steps seen by main: %s", strings.Join(r.main.steps.Trace(), " | "))
		}
	})
	return r
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// actor is one handler instance (a Lambda): its own owner name, clock and
// step pauses, sharing the world's table, bucket and mailbox.
type actor struct {
	name  string
	deps  *pipeline.Deps
	steps *testworld.Steps
}

// actor returns a new handler instance; now nil means the replay's clock.
func (r *replay) actor(name string, now func() time.Time) *actor {
	d := *r.w.Pipeline.Deps
	st := &testworld.Steps{Next: r.mon.Hook}
	d.Hook, d.Owner = st.Hook, name
	if now != nil {
		d.Now = now
	}
	return &actor{name: name, deps: &d, steps: st}
}

// deliver hands one message to a's handler, as the event source would.
func (r *replay) deliver(a *actor, m testworld.Mail) error {
	switch v := m.Msg.(type) {
	case messages.Job:
		return pipeline.Compact{Deps: a.deps}.Run(r.ctx, v)
	case messages.CleanerNote:
		g, err := planning.ParseGroupKey(v.Group)
		if err != nil {
			return err
		}
		return pipeline.Cleaner{Deps: a.deps}.Advance(r.ctx, v.Tenant, g, false)
	case messages.BlockOp:
		return pipeline.Uploader{Deps: a.deps}.Execute(testworld.WithOp(r.ctx, v), v)
	case messages.PlanRequest:
		g, err := planning.ParseGroupKey(v.Group)
		if err != nil {
			return err
		}
		return pipeline.Planner{Deps: a.deps}.PlanGroup(r.ctx, v.Tenant, g)
	}
	return fmt.Errorf("deliver: unexpected %T", m.Msg)
}

// go runs a delivery in the background; the returned channel yields its
// result.
func (r *replay) goDeliver(a *actor, m testworld.Mail) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.deliver(a, m) }()
	return done
}

// takeEvents removes the S3 notifications waiting on the block-events
// queue and returns them, for a test to deliver itself.
func (r *replay) takeEvents() []events.SQSMessage {
	r.t.Helper()
	url := r.w.Env.Deployment.QueueURLs[spec.BlockEvents]
	var evs []events.SQSMessage
	for {
		out, err := r.w.Env.Clients.SQS.ReceiveMessage(r.ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 0})
		if err != nil {
			r.t.Fatalf("receive S3 events: %v", err)
		}
		if len(out.Messages) == 0 {
			return evs
		}
		for _, m := range out.Messages {
			evs = append(evs, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
				Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
			if _, err := r.w.Env.Clients.SQS.DeleteMessage(r.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				r.t.Fatalf("delete S3 event: %v", err)
			}
		}
	}
}

// goEvent hands one S3 notification to a's planner in the background.
func (r *replay) goEvent(a *actor, m events.SQSMessage) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := pipeline.Planner{Deps: a.deps}.Handle(r.ctx, events.SQSEvent{Records: []events.SQSMessage{m}})
		if err == nil && len(resp.BatchItemFailures) > 0 {
			err = fmt.Errorf("planner reported the event failed")
		}
		done <- err
	}()
	return done
}

// drainEvents hands every S3 notification waiting on the block-events
// queue (uploads, and the uploader's meta.json writes) to a's planner.
func (r *replay) drainEvents(a *actor) int {
	r.t.Helper()
	url := r.w.Env.Deployment.QueueURLs[spec.BlockEvents]
	n := 0
	for {
		out, err := r.w.Env.Clients.SQS.ReceiveMessage(r.ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 0})
		if err != nil {
			r.t.Fatalf("receive S3 events: %v", err)
		}
		if len(out.Messages) == 0 {
			return n
		}
		for _, m := range out.Messages {
			ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
				Attributes: map[string]string{"ApproximateReceiveCount": "1"}}}}
			resp, err := pipeline.Planner{Deps: a.deps}.Handle(r.ctx, ev)
			if err != nil || len(resp.BatchItemFailures) > 0 {
				r.t.Fatalf("planner failed on an S3 event: %v %+v", err, resp)
			}
			if _, err := r.w.Env.Clients.SQS.DeleteMessage(r.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				r.t.Fatalf("delete S3 event: %v", err)
			}
			n++
		}
	}
}

// pump delivers S3 events and mailbox messages to a until nothing is left
// but what hold keeps back.
func (r *replay) pump(a *actor, hold func(testworld.Mail) bool) {
	r.t.Helper()
	for {
		n := r.drainEvents(a)
		mail := r.mb.Take(func(m testworld.Mail) bool { return hold == nil || !hold(m) })
		for _, m := range mail {
			if err := r.deliver(a, m); err != nil {
				r.t.Fatalf("%s: delivering %s: %v", a.name, m.Body, err)
			}
		}
		if n == 0 && len(mail) == 0 {
			return
		}
	}
}

// sweep runs the cleaner's scheduled sweep as a.
func (r *replay) sweep(a *actor) {
	r.t.Helper()
	if err := (pipeline.Cleaner{Deps: a.deps}).Sweep(r.ctx); err != nil {
		r.t.Fatalf("sweep: %v", err)
	}
}

// run delivers, to main, the jobs of the given partitions of version v
// that wait in the mailbox; what they send stays there.
func (r *replay) run(v int64, parts ...int) {
	r.t.Helper()
	for _, p := range parts {
		for _, m := range r.mb.Take(isJob(v, p)) {
			if err := r.deliver(r.main, m); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// goSweep runs the cleaner's sweep as a in the background.
func (r *replay) goSweep(a *actor) <-chan error {
	done := make(chan error, 1)
	go func() { done <- pipeline.Cleaner{Deps: a.deps}.Sweep(r.ctx) }()
	return done
}

// finish lets every delay pass (deletion, second orphan sweeps) and runs
// the pipeline until the tenant is quiescent with nothing due, then checks
// I1–I4 at quiescence, the reader's view, and the online checks (I5).
func (r *replay) finish() {
	r.t.Helper()
	for round := 0; ; round++ {
		r.pump(r.main, nil)
		r.clock.Advance(deletionDelay + orphanDelay + time.Minute)
		r.sweep(r.main)
		r.pump(r.main, nil)
		ok, err := r.w.Quiescent(r.ctx, r.tenant)
		if err != nil {
			r.t.Fatal(err)
		}
		if ok && r.nothingDue() {
			break
		}
		if round > 10 {
			r.t.Fatalf("not quiescent after %d rounds; mailbox holds %d", round, r.mb.Len())
		}
	}
	if n := r.mb.Len(); n > 0 {
		r.t.Fatalf("mailbox still holds %d messages", n)
	}
	if err := r.w.CheckQuiescent(r.ctx, r.tenant); err != nil {
		r.t.Fatalf("at quiescence: %v", err)
	}
	r.readable("at quiescence")
	if err := r.mon.Err(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("online checks made: %v", r.mon.Checks())
	count := func(c []awsenv.Count) (n int) {
		for _, x := range c {
			n += x.N
		}
		return n
	}
	r.t.Logf("requests to the emulator: %d", count(r.w.Requests.Snapshot())+count(r.w.Env.Counter.Snapshot()))
}

func (r *replay) nothingDue() bool {
	for _, k := range []records.AgendaKind{records.AgendaDelete, records.AgendaOrphans, records.AgendaActive} {
		due, err := r.w.Store.Due(r.ctx, k, r.clock.Now())
		if err != nil {
			r.t.Fatal(err)
		}
		if len(due) > 0 {
			return false
		}
	}
	return true
}

// readable asserts I1 and I3 as a reader sees the bucket now.
func (r *replay) readable(when string) testworld.Readable {
	r.t.Helper()
	res, err := r.w.CheckReadable(r.ctx, r.clock.Now(), r.tenant)
	if err != nil {
		r.t.Fatalf("%s: %v", when, err)
	}
	return res
}

func (r *replay) upload(blocks ...blockgen.Block) {
	for _, b := range blocks {
		r.w.Upload(r.ctx, r.tenant, b.Dir)
	}
}

func (r *replay) head(g planning.GroupKey) records.Group {
	r.t.Helper()
	h, ok, err := r.w.Store.GetGroup(r.ctx, r.tenant, g)
	if err != nil || !ok {
		r.t.Fatalf("group %s: found=%v err=%v", g, ok, err)
	}
	return h
}

func (r *replay) partitions(g planning.GroupKey, v int64) []records.Partition {
	r.t.Helper()
	ps, err := r.w.Store.Partitions(r.ctx, r.tenant, g, v)
	if err != nil {
		r.t.Fatal(err)
	}
	return ps
}

func (r *replay) block(id string) records.Block {
	r.t.Helper()
	b, ok, err := r.w.Store.GetBlock(r.ctx, r.tenant, id)
	if err != nil || !ok {
		r.t.Fatalf("block %s: found=%v err=%v", id, ok, err)
	}
	return b
}

// wantState fails unless the group's head is at version v in state s.
func (r *replay) wantState(g planning.GroupKey, v int64, s protocol.GroupState) records.Group {
	r.t.Helper()
	h := r.head(g)
	if h.Version != v || h.State != s {
		r.t.Fatalf("group %s is at v%d %s, want v%d %s", g, h.Version, h.State, v, s)
	}
	return h
}

// commits returns the monitor's commit attempts on ref ("…@v1/p0").
func (r *replay) commits(ref string) (accepted, rejected []string) {
	for _, c := range r.mon.Commits() {
		if strings.HasSuffix(c.Ref, ref) {
			if c.Accepted {
				accepted = append(accepted, c.Owner)
			} else {
				rejected = append(rejected, c.Owner)
			}
		}
	}
	return accepted, rejected
}

// isJob selects the job of partition p of version v.
func isJob(v int64, p int) func(testworld.Mail) bool {
	return func(m testworld.Mail) bool {
		j, ok := m.Msg.(messages.Job)
		return ok && j.Version == v && j.Partition == p
	}
}

// takeOne takes the single message sel selects from the mailbox.
func (r *replay) takeOne(sel func(testworld.Mail) bool) testworld.Mail {
	r.t.Helper()
	got := r.mb.Take(sel)
	if len(got) != 1 {
		r.t.Fatalf("want one message, mailbox has %d", len(got))
	}
	return got[0]
}

// objectVersions lists every version under the block's prefix, "rel@vid".
func (r *replay) objectVersions(id string) []string {
	r.t.Helper()
	prefix := r.tenant + "/" + id + "/"
	out, err := r.w.Env.Clients.S3.ListObjectVersions(r.ctx, &s3.ListObjectVersionsInput{
		Bucket: aws.String(r.w.Config.Bucket), Prefix: aws.String(prefix)})
	if err != nil {
		r.t.Fatal(err)
	}
	var vs []string
	for _, v := range out.Versions {
		vs = append(vs, strings.TrimPrefix(aws.ToString(v.Key), prefix)+"@"+aws.ToString(v.VersionId))
	}
	for _, m := range out.DeleteMarkers {
		r.t.Errorf("delete marker on %s", aws.ToString(m.Key))
	}
	sort.Strings(vs)
	return vs
}

// seriesOf lists the series in a downloaded block's index.
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

// wait returns what a background delivery returned, failing after
// stepTimeout.
func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(stepTimeout):
		t.Fatalf("a released handler did not return within %v", stepTimeout)
		return nil
	}
}
