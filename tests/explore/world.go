package explore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/localstack/memaws/memdynamo"
	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Durations of the explored world: a job runs (lease) < the orphan delay
// < the deletion delay, as in production; time moves only when the
// explorer moves it.
const (
	leaseDuration = time.Minute
	redriveAfter  = 2 * time.Minute
	orphanDelay   = 5 * time.Minute
	deletionDelay = 10 * time.Minute
	stuckAfter    = 30 * time.Minute
)

// clock is the handlers' clock: a fixed instant plus what the explorer
// added. Unlike testworld.Clock it does not follow the wall clock, so a
// schedule run twice sees the same times.
type clock struct {
	base   time.Time
	offset atomic.Int64
}

func (c *clock) Now() time.Time { return c.base.Add(time.Duration(c.offset.Load())) }

// Blocks are the uploads of a scope: the sources of version 1, the late
// block that makes version 2, and the source uploaded again.
type Blocks struct {
	Sources  []blockgen.Block
	Late     blockgen.Block
	Reupload blockgen.Block
}

// GenerateBlocks writes the explored blocks under dir: two 2h blocks of
// one 4h range (4 series each), and a late block of the second slot that
// repeats those samples and adds 2 series.
func GenerateBlocks(dir string, start time.Time) (Blocks, error) {
	src, err := blockgen.Generate(dir+"/v1", blockgen.Options{Tenant: tenant, Start: start, Blocks: 2, Series: 4, Seed: 1,
		ThanosFiles: true, SamplesPerSeries: 6})
	if err != nil {
		return Blocks{}, err
	}
	late, err := blockgen.Generate(dir+"/late", blockgen.Options{Tenant: tenant, Start: start.Add(2 * time.Hour), Blocks: 1, Series: 6, Seed: 1,
		ThanosFiles: true, SamplesPerSeries: 6})
	if err != nil {
		return Blocks{}, err
	}
	return Blocks{Sources: src, Late: late[0], Reupload: src[0]}, nil
}

const tenant = "t1"

// world is the explored deployment: the real handlers as actors over one
// in-memory AWS, their messages in a Mailbox, their clock fixed.
type world struct {
	t      testing.TB
	ctx    context.Context
	w      *testworld.World
	mon    *testworld.Monitor
	mb     *testworld.Mailbox
	clock  *clock
	blocks Blocks
	actors map[string]*pipeline.Deps // "planner-1", "compact-1", ...
}

func newWorld(t testing.TB, blocks Blocks, base time.Time, actors map[string]int, mutant *Mutant) *world {
	t.Helper()
	clk := &clock{base: base}
	tw := testworld.New(t, testworld.Options{
		Env:      []envtest.Option{envtest.WithBackend(envtest.Memory), envtest.WithLogLevel(slog.LevelError)},
		Pipeline: localrun.Options{Now: clk.Now},
		Configure: func(c *config.Config) {
			c.LeaseDuration, c.RedriveAfter, c.StuckAfter = leaseDuration, redriveAfter, stuckAfter
			c.OrphanDelay, c.DeletionDelay = orphanDelay, deletionDelay
			c.Policy.Ranges = []time.Duration{4 * time.Hour}
			c.Policy.MaxSeriesPerPartition = 7 // 8 series in v1, 14 in v2: two partitions each
			c.Policy.MaxPartitions = 2
			c.DownloadParallelism, c.UploadParallelism, c.SweepParallelism = 1, 1, 1
		},
	})
	mon := testworld.NewMonitor(tw)
	mon.Install(tw)
	mb := testworld.NewMailbox(tw.Config.Queues)
	x := &world{t: t, ctx: context.Background(), w: tw, mon: mon, mb: mb, clock: clk, blocks: blocks, actors: map[string]*pipeline.Deps{}}
	base0 := *tw.Pipeline.Deps
	for kind, n := range actors {
		for i := 1; i <= n; i++ {
			d := base0
			name := fmt.Sprintf("%s-%d", kind, i)
			d.Owner, d.Now = name, clk.Now
			var db records.DynamoDB = awslimits.DynamoDB{DynamoDBAPI: tw.Env.Clients.DynamoDB, Refused: tw.Pipeline.Refused}
			if mutant != nil {
				db = mutatedDB{DynamoDB: db, m: *mutant}
			}
			d.Store = records.NewStore(gatedDB{db: mon.DynamoDB(db)}, tw.Config.Table, tw.Env.Logger)
			d.S3 = gatedS3{s3: mon.S3(tw.Env.Clients.S3)}
			d.Send = messages.Sender{SQS: gatedSQS{sqs: awslimits.SQS{SQSSender: mb, Refused: tw.Pipeline.Refused}}, Queues: tw.Config.Queues}
			d.Hook = mon.Hook
			x.actors[name] = &d
		}
	}
	return x
}

// item is one thing that can be delivered: an S3 notification, a message
// of the mailbox, or the cleaner's scheduled sweep.
type item struct {
	id    string // "e3", "m12", "sweep": stable along one path
	kind  string // actor kind: planner, compact, cleaner, uploader
	event *events.SQSMessage
	mail  *testworld.Mail
}

// deliver is the handler call for it on actor d, as the event source
// would make it.
func (x *world) deliver(it item, d *pipeline.Deps) func(context.Context) error {
	return func(ctx context.Context) error {
		switch {
		case it.event != nil:
			resp, err := pipeline.Planner{Deps: d}.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{*it.event}})
			if err == nil && len(resp.BatchItemFailures) > 0 {
				err = fmt.Errorf("the planner failed the event")
			}
			return err
		case it.mail != nil:
			switch v := it.mail.Msg.(type) {
			case messages.Job:
				return pipeline.Compact{Deps: d}.Run(ctx, v)
			case messages.CleanerNote:
				g, err := planning.ParseGroupKey(v.Group)
				if err != nil {
					return err
				}
				return pipeline.Cleaner{Deps: d}.Advance(ctx, v.Tenant, g, false)
			case messages.BlockOp:
				return pipeline.Uploader{Deps: d}.Execute(testworld.WithOp(ctx, v), v)
			case messages.PlanRequest:
				g, err := planning.ParseGroupKey(v.Group)
				if err != nil {
					return err
				}
				return pipeline.Planner{Deps: d}.PlanGroup(ctx, v.Tenant, g)
			}
			return fmt.Errorf("deliver: unexpected %T", it.mail.Msg)
		}
		return pipeline.Cleaner{Deps: d}.Sweep(ctx)
	}
}

func kindOf(m testworld.Mail) string {
	switch m.Queue {
	case "jobs":
		return "compact"
	case "cleaner":
		return "cleaner"
	case "ops":
		return "uploader"
	}
	return "planner"
}

// state is everything the explored world holds between deliveries.
type state struct {
	ddb      *memdynamo.Snapshot
	s3       *mems3.Snapshot
	mail     testworld.MailboxState
	events   []pendingEvent
	eventSeq int
	offset   time.Duration
	late     bool // the late block has been uploaded
	reup     bool // the source has been uploaded again
	// waited: the step that led here was time passing. Time passes again
	// only after something was delivered (the sweep, at least): waiting
	// twice in a row is one longer wait.
	waited bool
}

type pendingEvent struct {
	seq int
	msg events.SQSMessage
}

func (x *world) save(events []pendingEvent, eventSeq int, late, reup bool) *state {
	c := x.w.Env.Cloud
	return &state{ddb: c.DynamoDB.Snapshot(), s3: c.S3.Snapshot(), mail: x.mb.State(),
		events: append([]pendingEvent(nil), events...), eventSeq: eventSeq,
		offset: time.Duration(x.clock.offset.Load()), late: late, reup: reup}
}

func (x *world) restore(s *state) {
	c := x.w.Env.Cloud
	c.DynamoDB.Restore(s.ddb)
	c.S3.Restore(s.s3)
	x.mb.Restore(s.mail)
	x.clock.offset.Store(int64(s.offset))
	x.mon.Forget()
	up := []string{}
	for _, b := range x.blocks.Sources {
		up = append(up, b.Dir)
	}
	if s.late {
		up = append(up, x.blocks.Late.Dir)
	}
	x.w.Uploaded[tenant] = up
}

// takeEvents moves the S3 notifications waiting on block-events into
// the state's pending events.
func (x *world) takeEvents(s *state) error {
	url := x.w.Env.Deployment.QueueURLs[spec.BlockEvents]
	c := x.w.Env.Clients.SQS
	for {
		out, err := c.ReceiveMessage(x.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		if err != nil {
			return fmt.Errorf("receive S3 events: %w", err)
		}
		if len(out.Messages) == 0 {
			return nil
		}
		for _, m := range out.Messages {
			s.eventSeq++
			s.events = append(s.events, pendingEvent{seq: s.eventSeq, msg: events.SQSMessage{
				MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
				Attributes: map[string]string{"ApproximateReceiveCount": "1"}}})
			if _, err := c.DeleteMessage(x.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return fmt.Errorf("delete S3 event: %w", err)
			}
		}
	}
}

// upload puts a block into the bucket as a shipper does.
func (x *world) upload(b blockgen.Block) error {
	return testworld.UploadBlock(x.ctx, x.w.Env.Clients.S3, x.w.Config.Bucket, x.w.Config.Layout, tenant, b.Dir)
}

// items lists what can be delivered in s: every pending S3 event, the
// first message of every FIFO group (and every message of a standard
// queue), and the sweep when something is due.
func (x *world) items(s *state) ([]item, error) {
	var out []item
	for i := range s.events {
		out = append(out, item{id: "e" + strconv.Itoa(s.events[i].seq), kind: "planner", event: &s.events[i].msg})
	}
	heads := map[string]bool{}
	for i := range s.mail.Mail {
		m := &s.mail.Mail[i]
		if m.Group != "" {
			g := m.Queue + "/" + m.Group
			if heads[g] {
				continue
			}
			heads[g] = true
		}
		out = append(out, item{id: "m" + strconv.Itoa(m.Seq), kind: kindOf(*m), mail: m})
	}
	due, err := x.sweepDue()
	if err != nil {
		return nil, err
	}
	if due {
		out = append(out, item{id: "sweep", kind: "cleaner"})
	}
	return out, nil
}

// sweepDue reports whether the sweep has anything to do now: an entry of
// the agenda due, or an unfinished version to look after.
func (x *world) sweepDue() (bool, error) {
	now := x.clock.Now()
	for _, k := range []records.AgendaKind{records.AgendaDelete, records.AgendaOrphans, records.AgendaRange, records.AgendaActive} {
		at := now
		if k == records.AgendaActive {
			at = now.Add(100 * 365 * 24 * time.Hour)
		}
		due, err := x.w.Store.Due(x.ctx, k, at)
		if err != nil {
			return false, err
		}
		if len(due) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// nextDeadline is the next time at which waiting changes what the
// pipeline does: an agenda entry falling due, a lease expiring, a re-drive
// or a stuck version's supersede coming due. Zero when none is ahead.
func (x *world) nextDeadline() (time.Time, error) {
	now := x.clock.Now()
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	far := now.Add(100 * 365 * 24 * time.Hour)
	for _, k := range []records.AgendaKind{records.AgendaDelete, records.AgendaOrphans, records.AgendaRange} {
		all, err := x.w.Store.Due(x.ctx, k, far)
		if err != nil {
			return time.Time{}, err
		}
		for _, e := range all {
			consider(e.Due.Add(time.Second))
		}
	}
	active, err := x.w.Store.Due(x.ctx, records.AgendaActive, far)
	if err != nil {
		return time.Time{}, err
	}
	if len(active) > 0 {
		for _, d := range []time.Duration{leaseDuration, redriveAfter, stuckAfter} {
			consider(now.Add(d + time.Second))
		}
	}
	return next, nil
}

// --- the state's identity ---

var ownerRE = regexp.MustCompile(`(planner|compact|cleaner|uploader)-\d+#[0-9a-f]+`)

// digest identifies a state up to what cannot matter: S3 version ids and
// lease owners are renamed in the order they first appear, so two
// schedules that reach the same objects and records by different paths
// (other ids, other random owner suffixes) meet in one state.
func (x *world) digest(s *state) (string, error) {
	h := sha256.New()
	r := newRenamer()
	if err := x.writeBucket(h, r); err != nil {
		return "", err
	}
	items, err := x.scan()
	if err != nil {
		return "", err
	}
	for _, it := range items {
		var m map[string]any
		if err := attributevalue.UnmarshalMap(it, &m); err != nil {
			return "", fmt.Errorf("digest: %w", err)
		}
		b, _ := json.Marshal(m) // map keys sorted
		fmt.Fprintf(h, "i %s\n", r.text(string(b)))
	}
	for _, m := range s.mail.Mail {
		fmt.Fprintf(h, "m %s %s %s\n", m.Queue, m.Group, r.text(m.Body))
	}
	var evs []string
	for _, e := range s.events {
		evs = append(evs, r.text(eventKey(e.msg.Body)))
	}
	sort.Strings(evs) // a standard queue: order is not state
	fmt.Fprintf(h, "e %s\nt %d late=%v reup=%v waited=%v\n", strings.Join(evs, " "), s.offset, s.late, s.reup, s.waited)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// bucketDigest identifies what a reader of the bucket sees in s: the
// objects, the uploads that count and the clock (deletion marks age).
func (x *world) bucketDigest(s *state) (string, error) {
	h := sha256.New()
	if err := x.writeBucket(h, newRenamer()); err != nil {
		return "", err
	}
	fmt.Fprintf(h, "t %d late=%v\n", s.offset, s.late)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// renamer gives version ids and owners names in order of appearance.
type renamer struct {
	names map[string]string
	vids  []string
}

func newRenamer() *renamer { return &renamer{names: map[string]string{}} }

func (r *renamer) name(prefix, v string) string {
	if n, ok := r.names[v]; ok {
		return n
	}
	n := fmt.Sprintf("%s%d", prefix, len(r.names))
	r.names[v] = n
	return n
}

// text renames every known version id and every owner in text.
func (r *renamer) text(text string) string {
	for _, vid := range r.vids {
		if strings.Contains(text, vid) {
			text = strings.ReplaceAll(text, vid, r.name("V", vid))
		}
	}
	return ownerRE.ReplaceAllStringFunc(text, func(o string) string { return r.name("O", o) })
}

// writeBucket writes every version of every key, in S3's order.
func (x *world) writeBucket(h io.Writer, r *renamer) error {
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(x.w.Config.Bucket)}
	for p := s3.NewListObjectVersionsPaginator(x.w.Env.Clients.S3, in); p.HasMorePages(); {
		out, err := p.NextPage(x.ctx)
		if err != nil {
			return fmt.Errorf("digest: list: %w", err)
		}
		for _, v := range out.Versions {
			vid := aws.ToString(v.VersionId)
			r.vids = append(r.vids, vid)
			fmt.Fprintf(h, "v %s %s %s %d %v\n", aws.ToString(v.Key), r.name("V", vid), aws.ToString(v.ETag), aws.ToInt64(v.Size), aws.ToBool(v.IsLatest))
		}
		for _, m := range out.DeleteMarkers {
			fmt.Fprintf(h, "dm %s %s\n", aws.ToString(m.Key), r.name("V", aws.ToString(m.VersionId)))
		}
	}
	return nil
}

// eventKey is what an S3 notification says: the key and version created.
func eventKey(body string) string {
	var ev struct {
		Records []struct {
			EventName string `json:"eventName"`
			S3        struct {
				Object struct {
					Key       string `json:"key"`
					VersionID string `json:"versionId"`
				} `json:"object"`
			} `json:"s3"`
		}
	}
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		return body
	}
	var parts []string
	for _, r := range ev.Records {
		parts = append(parts, r.EventName+":"+r.S3.Object.Key+"@"+r.S3.Object.VersionID)
	}
	return strings.Join(parts, ";")
}

func (x *world) scan() ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	in := &dynamodb.ScanInput{TableName: aws.String(x.w.Config.Table)}
	for p := dynamodb.NewScanPaginator(x.w.Env.Clients.DynamoDB, in); p.HasMorePages(); {
		page, err := p.NextPage(x.ctx)
		if err != nil {
			return nil, fmt.Errorf("digest: scan: %w", err)
		}
		out = append(out, page.Items...)
	}
	return out, nil
}
