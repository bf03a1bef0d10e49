package chaos

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Fault kinds, as counted in the report.
const (
	fCrashBeforeS3   = "crash before an S3 call"
	fCrashAfterS3    = "crash after an S3 call"
	fThrottleS3      = "S3 throttling (SlowDown)"
	fCrashBeforeDB   = "crash before a DynamoDB call"
	fCrashAfterDB    = "crash after a DynamoDB write"
	fThrottleDB      = "DynamoDB throttling"
	fCrashBeforeSend = "crash before an SQS send"
	fCrashAfterSend  = "crash after an SQS send"
	fCrashAtStep     = "crash at a protocol step"
	fStall           = "handler stalls at a step (a slow invocation)"
	fShortVisible    = "visibility timeout expiring mid-work (redelivered while running)"
	fDelayDelivery   = "delivery delayed (redelivered later)"
	fDupConcurrent   = "duplicate delivery, concurrent"
	fDupSequential   = "duplicate delivery, after the first"
	fSkewedTakeover  = "lease expiry by a skewed clock (duplicate job ahead by a lease)"
	fClockJump       = "clock jump"
	fLateDup         = "duplicate delivered late, after the pipeline moved on (SQS, DLQ replay)"
	fZombie          = "compaction job outlives its version (clock passes StuckAfter mid-job)"
	fIdleJump        = "time passes while idle (re-drive and supersede deadlines)"
	fDupEvent        = "S3 event duplicated (delayed, reordered)"
	fReupload        = "shipper re-upload of a block"
	fLateBlock       = "late block"
	fShuffledUploads = "uploads reordered"
	fDeadline        = "compaction job with its function's deadline inside the margin (stops, commits nothing)"
	fCorruptSource   = "corrupt source uploaded (damaged index: quarantined, neighbours compact)"
	fTwoStreams      = "tenant with two Prometheus servers (two streams)"
	fLongTenant      = "tenant id of 150 characters"
	fForeignMark     = "another tool's no-compact mark on an upload, mid-run (live, claimed, retiring or deleted)"
	fRepairRetry     = "quarantined upload repaired and retried (sluice retry), mid-run"
	fRetryUnrepaired = "quarantined upload retried unrepaired first (quarantined again)"
)

// faultKinds lists every kind above but the load-dependent ones: a run of
// coverageSeeds seeds or more must inject each at least once (TestChaos
// fails otherwise), so a fault whose injection a change silently disabled
// is noticed.
func faultKinds() []string {
	return []string{
		fCrashBeforeS3, fCrashAfterS3, fThrottleS3, fCrashBeforeDB, fCrashAfterDB, fThrottleDB,
		fCrashBeforeSend, fCrashAfterSend, fCrashAtStep, fStall, fShortVisible, fDelayDelivery,
		fDupConcurrent, fDupSequential, fSkewedTakeover, fClockJump, fLateDup, fZombie,
		fDupEvent, fReupload, fLateBlock, fShuffledUploads, fDeadline, fCorruptSource, fTwoStreams, fLongTenant, fForeignMark, fRepairRetry, fRetryUnrepaired,
	}
}

// loadDependentFaultKinds are injected by the state a seed reaches, not by
// its dice, and how often depends on the machine's load: an idle jump
// happens only when the pipeline waits for time with nothing running, and
// on a loaded machine the random clock jumps pass those deadlines first
// (a 300-seed run made 458 idle jumps; make test's 20 seeds on a loaded CI
// machine made none). Only a run of fullCoverageSeeds must show them.
func loadDependentFaultKinds() []string {
	return []string{fIdleJump}
}

// Probabilities per occasion (a call, a step, a delivery). A message gets
// at most faultsPerMsg faults that can fail it, over all its deliveries
// (calls outside any message, like the sweep's, get any number): with five
// receives before the DLQ every message gets through — the faults test
// safety, not stamina.
const (
	pCrashS3        = 0.01
	pThrottleS3     = 0.005
	pCrashDB        = 0.008
	pThrottleDB     = 0.01
	pCrashSend      = 0.01
	pCrashStep      = 0.015
	pStall          = 0.01
	pDelayDelivery  = 0.03
	pDupConcurrent  = 0.04
	pDupSequential  = 0.02
	pSkewedTakeover = 0.4 // of concurrent duplicates of a compaction job
	pShortVisible   = 0.03
	pLateDup        = 0.03
	pZombie         = 0.03
	pDeadline       = 0.03
	faultsPerMsg    = 2
)

// plan makes every fault decision of one seed. A decision is a hash of
// (seed, site, subject, occurrence), not a draw from one shared generator,
// so it does not depend on how goroutines interleave: replaying a seed
// injects the same faults into the same calls.
type plan struct {
	seed    int64
	mu      sync.Mutex
	seen    map[string]int
	budgets map[string]*atomic.Int32
	counts  sync.Map // kind → *atomic.Int64
}

func newPlan(seed int64) *plan {
	return &plan{seed: seed, seen: map[string]int{}, budgets: map[string]*atomic.Int32{}}
}

// budget is message id's fault budget, shared by all its deliveries.
func (p *plan) budget(id string) *atomic.Int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.budgets[id]
	if !ok {
		b = new(atomic.Int32)
		b.Store(faultsPerMsg)
		p.budgets[id] = b
	}
	return b
}

// roll is a uniform number in [0, 1) for the n-th occasion of (site,
// subject). Subjects are normalised — ULIDs, VersionIds and timestamps
// taken out — so that the same call of a replay, on another day, with other
// ULIDs, rolls the same.
func (p *plan) roll(site, subject string) float64 {
	p.mu.Lock()
	k := site + "\x00" + normalise(subject)
	n := p.seen[k]
	p.seen[k] = n + 1
	p.mu.Unlock()
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(p.seed))
	h.Write(b[:])
	h.Write([]byte(k))
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	return float64(mix64(h.Sum64())>>11) / float64(1<<53)
}

// mix64 is splitmix64's finaliser: FNV leaves the top bits barely touched
// by the last bytes (the occurrence), so they are mixed once more.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// hit decides one fault and counts it. Throttling of DynamoDB is retried
// inside the store, so it does not spend the message's budget.
func (p *plan) hit(ctx context.Context, kind, site, subject string, prob float64) bool {
	b, _ := ctx.Value(budgetKey{}).(*atomic.Int32)
	if b != nil && b.Load() <= 0 {
		return false
	}
	if p.roll(site, subject) >= prob {
		return false
	}
	if b != nil && kind != fThrottleDB {
		b.Add(-1)
	}
	p.count(kind)
	return true
}

func (p *plan) count(kind string) {
	v, _ := p.counts.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (p *plan) faults() map[string]int {
	out := map[string]int{}
	p.counts.Range(func(k, v any) bool {
		out[k.(string)] = int(v.(*atomic.Int64).Load())
		return true
	})
	return out
}

// --- context: the fault budget of the message a call works for ---

type budgetKey struct{}

func withBudget(ctx context.Context, b *atomic.Int32) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// noFaults is the budget of duplicate deliveries: they race, they do not
// crash.
func noFaults(ctx context.Context) context.Context { return withBudget(ctx, new(atomic.Int32)) }

var errCrash = errors.New("chaos: crashed")

func crashErr(what string) error { return fmt.Errorf("%w: %s", errCrash, what) }

func throttleS3() error {
	return &smithy.GenericAPIError{Code: "SlowDown", Message: "chaos: please reduce your request rate", Fault: smithy.FaultServer}
}

// --- S3 ---

type faultS3 struct {
	pipeline.S3
	p *plan
}

func (f *faultS3) before(ctx context.Context, op, key string) error {
	switch {
	case f.p.hit(ctx, fCrashBeforeS3, "s3-before "+op, key, pCrashS3):
		return crashErr("before S3 " + op + " " + key)
	case f.p.hit(ctx, fThrottleS3, "s3-throttle "+op, key, pThrottleS3):
		return throttleS3()
	}
	return nil
}

func (f *faultS3) after(ctx context.Context, op, key string, err error) error {
	if err == nil && f.p.hit(ctx, fCrashAfterS3, "s3-after "+op, key, pCrashS3) {
		return crashErr("after S3 " + op + " " + key)
	}
	return err
}

func (f *faultS3) GetObject(ctx context.Context, in *s3.GetObjectInput, o ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	k := aws.ToString(in.Key)
	if err := f.before(ctx, "GetObject", k); err != nil {
		return nil, err
	}
	out, err := f.S3.GetObject(ctx, in, o...)
	if err2 := f.after(ctx, "GetObject", k, err); err2 != err {
		out.Body.Close()
		return nil, err2
	}
	return out, err
}

func (f *faultS3) HeadObject(ctx context.Context, in *s3.HeadObjectInput, o ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	k := aws.ToString(in.Key)
	if err := f.before(ctx, "HeadObject", k); err != nil {
		return nil, err
	}
	out, err := f.S3.HeadObject(ctx, in, o...)
	if err2 := f.after(ctx, "HeadObject", k, err); err2 != err {
		return nil, err2
	}
	return out, err
}

func (f *faultS3) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	k := aws.ToString(in.Key)
	if err := f.before(ctx, "PutObject", k); err != nil {
		return nil, err
	}
	out, err := f.S3.PutObject(ctx, in, o...)
	if err2 := f.after(ctx, "PutObject", k, err); err2 != err {
		return nil, err2
	}
	return out, err
}

func (f *faultS3) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, o ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error) {
	k := ""
	if in.Delete != nil && len(in.Delete.Objects) > 0 {
		k = aws.ToString(in.Delete.Objects[0].Key)
	}
	if err := f.before(ctx, "DeleteObjects", k); err != nil {
		return nil, err
	}
	out, err := f.S3.DeleteObjects(ctx, in, o...)
	if err2 := f.after(ctx, "DeleteObjects", k, err); err2 != err {
		return nil, err2
	}
	return out, err
}

func (f *faultS3) ListObjectVersions(ctx context.Context, in *s3.ListObjectVersionsInput, o ...func(*s3.Options)) (*s3.ListObjectVersionsOutput, error) {
	k := aws.ToString(in.Prefix)
	if err := f.before(ctx, "ListObjectVersions", k); err != nil {
		return nil, err
	}
	out, err := f.S3.ListObjectVersions(ctx, in, o...)
	if err2 := f.after(ctx, "ListObjectVersions", k, err); err2 != err {
		return nil, err2
	}
	return out, err
}

// --- DynamoDB ---

type faultDB struct {
	records.DynamoDB
	p *plan
}

func dbSubject(key map[string]ddbtypes.AttributeValue) string {
	var pk, sk string
	if v, ok := key["PK"].(*ddbtypes.AttributeValueMemberS); ok {
		pk = v.Value
	}
	if v, ok := key["SK"].(*ddbtypes.AttributeValueMemberS); ok {
		sk = v.Value
	}
	return pk + "/" + sk
}

func throttleDB() error {
	return &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("chaos: throughput exceeded")}
}

func (f *faultDB) read(ctx context.Context, op, subject string) error {
	switch {
	case f.p.hit(ctx, fThrottleDB, "db-throttle "+op, subject, pThrottleDB):
		return throttleDB()
	case f.p.hit(ctx, fCrashBeforeDB, "db-before "+op, subject, pCrashDB/2):
		return crashErr("before DynamoDB " + op + " " + subject)
	}
	return nil
}

func (f *faultDB) write(ctx context.Context, op, subject string, call func() error) error {
	switch {
	case f.p.hit(ctx, fThrottleDB, "db-throttle "+op, subject, pThrottleDB):
		return throttleDB()
	case f.p.hit(ctx, fCrashBeforeDB, "db-before "+op, subject, pCrashDB):
		return crashErr("before DynamoDB " + op + " " + subject)
	}
	err := call()
	if err == nil && f.p.hit(ctx, fCrashAfterDB, "db-after "+op, subject, pCrashDB) {
		return crashErr("after DynamoDB " + op + " " + subject + " (it was applied)")
	}
	return err
}

func (f *faultDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := f.read(ctx, "GetItem", dbSubject(in.Key)); err != nil {
		return nil, err
	}
	return f.DynamoDB.GetItem(ctx, in, o...)
}

func (f *faultDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if err := f.read(ctx, "Query", aws.ToString(in.KeyConditionExpression)); err != nil {
		return nil, err
	}
	return f.DynamoDB.Query(ctx, in, o...)
}

func (f *faultDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	if err := f.read(ctx, "BatchGetItem", ""); err != nil {
		return nil, err
	}
	return f.DynamoDB.BatchGetItem(ctx, in, o...)
}

func (f *faultDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.BatchWriteItemOutput, err error) {
	err = f.write(ctx, "BatchWriteItem", "", func() (e error) { out, e = f.DynamoDB.BatchWriteItem(ctx, in, o...); return })
	return out, err
}

func (f *faultDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.PutItemOutput, err error) {
	err = f.write(ctx, "PutItem", dbSubject(in.Item), func() (e error) { out, e = f.DynamoDB.PutItem(ctx, in, o...); return })
	return out, err
}

func (f *faultDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.UpdateItemOutput, err error) {
	err = f.write(ctx, "UpdateItem", dbSubject(in.Key), func() (e error) { out, e = f.DynamoDB.UpdateItem(ctx, in, o...); return })
	return out, err
}

func (f *faultDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.DeleteItemOutput, err error) {
	err = f.write(ctx, "DeleteItem", dbSubject(in.Key), func() (e error) { out, e = f.DynamoDB.DeleteItem(ctx, in, o...); return })
	return out, err
}

func (f *faultDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (out *dynamodb.TransactWriteItemsOutput, err error) {
	subject := ""
	if len(in.TransactItems) > 0 {
		it := in.TransactItems[0]
		switch {
		case it.Put != nil:
			subject = dbSubject(it.Put.Item)
		case it.Update != nil:
			subject = dbSubject(it.Update.Key)
		case it.ConditionCheck != nil:
			subject = dbSubject(it.ConditionCheck.Key)
		case it.Delete != nil:
			subject = dbSubject(it.Delete.Key)
		}
	}
	err = f.write(ctx, "TransactWriteItems", subject, func() (e error) { out, e = f.DynamoDB.TransactWriteItems(ctx, in, o...); return })
	return out, err
}

// --- S3 notifications ---

// notifyS3 sends an ObjectCreated notification for every meta.json the
// pipeline writes, as the bucket's notification configuration does. It
// sits right above the real client: a write that went through notifies,
// whatever a fault makes the caller believe.
type notifyS3 struct {
	pipeline.S3
	notify func(ctx context.Context, key, versionID string)
}

func (n *notifyS3) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	out, err := n.S3.PutObject(ctx, in, o...)
	if err == nil && strings.HasSuffix(aws.ToString(in.Key), "/meta.json") {
		n.notify(ctx, aws.ToString(in.Key), aws.ToString(out.VersionId))
	}
	return out, err
}

// --- SQS sends ---

type faultSQS struct {
	messages.SQS
	p *plan
}

func (f *faultSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	subject := aws.ToString(in.MessageDeduplicationId)
	if subject == "" {
		subject = aws.ToString(in.MessageBody)
	}
	if f.p.hit(ctx, fCrashBeforeSend, "send-before", subject, pCrashSend) {
		return nil, crashErr("before sending " + subject)
	}
	out, err := f.SQS.SendMessage(ctx, in, o...)
	if err == nil && f.p.hit(ctx, fCrashAfterSend, "send-after", subject, pCrashSend) {
		return nil, crashErr("after sending " + subject)
	}
	return out, err
}

// --- protocol steps ---

// hook crashes a handler at a step, or stalls it there for a second (the
// rival deliveries the bus makes meanwhile get ahead of it).
func (s *scheduler) hook(ctx context.Context, step pipeline.Step, subject string) error {
	if step == "compact.before-commit" && s.zombie.Load() == subject {
		s.zombie.Store("") // its uploads are done: the clock may jump again
	}
	if step == "compact.after-read" && s.zombie.Load() == "" && s.plan.hit(ctx, fZombie, "zombie", subject, pZombie) {
		// The job stalls after reading its sources while the rest of the
		// world's clock runs past StuckAfter: the sweep supersedes its
		// version under it; it then uploads and tries to commit. One at a
		// time: a second jump before it uploaded could run its version's
		// second orphan sweep first (a job outliving OrphanDelay, which
		// the protocol rules out).
		if !s.zombie.CompareAndSwap("", subject) {
			return nil
		}
		s.clock.Advance(s.stuck + time.Second)
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	switch {
	case s.plan.hit(ctx, fCrashAtStep, "step-crash "+string(step), subject, pCrashStep):
		return crashErr(fmt.Sprintf("at %s (%s)", step, subject))
	case s.plan.hit(ctx, fStall, "step-stall "+string(step), subject, pStall):
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// --- deliveries ---

// scheduler owns one seed's delivery-level faults: it wraps each handler
// so that messages are handled one at a time (each under its receive count
// and, for block ops, its op), some delayed, some delivered twice — at once
// (as when a visibility timeout expires mid-work) or after the first.
type scheduler struct {
	plan       *plan
	clock      *testworld.Clock
	visibility time.Duration
	lease      time.Duration
	stuck      time.Duration
	// deadlineMargin is the jobs' SLUICE_DEADLINE_MARGIN (fDeadline gives
	// a job half of it).
	deadlineMargin time.Duration
	deps           *pipeline.Deps // set once the world is built
	zombie         atomic.Value   // subject of the job outliving its version, "" when none
	rogues         sync.WaitGroup
	inRogue        atomic.Int64
	rogueSeq       atomic.Int64
}

func (s *scheduler) wrap(name string, h handler) handler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		if name == "uploader" && len(ev.Records) > 1 {
			return s.uploaderBatch(ctx, h, ev)
		}
		var resp events.SQSEventResponse
		failed := map[string]bool{}
		for _, m := range ev.Records {
			group := m.Attributes["MessageGroupId"]
			fail := func() {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
				if group != "" {
					failed[group] = true
				}
			}
			if group != "" && failed[group] {
				fail()
				continue
			}
			mctx := withBudget(ctx, s.plan.budget(m.MessageId))
			subject := name + " " + m.Body
			if s.plan.hit(mctx, fDelayDelivery, "delay", subject, pDelayDelivery) {
				fail()
				continue
			}
			if name == "uploader" {
				if msg, err := messages.Decode(m.Body); err == nil {
					if op, ok := msg.(messages.BlockOp); ok {
						mctx = testworld.WithOp(mctx, op)
					}
				}
			}
			one := events.SQSEvent{Records: []events.SQSMessage{m}}
			if s.plan.hit(mctx, fDupConcurrent, "dup-concurrent", subject, pDupConcurrent) {
				s.rogue(ctx, name, mctx, one, subject)
			}
			hctx := mctx
			if name == "compact" && s.plan.hit(mctx, fDeadline, "deadline", subject, pDeadline) {
				// The function has less time left than the job's margin: it
				// must stop, record the attempt and commit nothing.
				var cancel context.CancelFunc
				hctx, cancel = context.WithTimeout(mctx, s.deadlineMargin/2)
				defer cancel()
			}
			r, err := h(hctx, one)
			if err != nil || len(r.BatchItemFailures) > 0 {
				fail()
				continue
			}
			if s.plan.hit(mctx, fDupSequential, "dup-sequential", subject, pDupSequential) {
				dctx := noFaults(mctx)
				if op, ok := testworld.OpFrom(dctx); ok {
					dctx = testworld.WithOp(dctx, op)
				}
				_, _ = functionHandler(name, s.deps)(dctx, one)
			}
		}
		return resp, nil
	}
}

// uploaderBatch delivers a batch of block ops to the uploader in one
// invocation, as Lambda does, so that an op runs after the ones before it
// in the batch, as slowly as they make it: each op runs under its
// message's fault budget and its own trace (opContext). Delays
// and duplicates are still decided per message: a delayed message, and
// every later one of its FIFO group, is failed before the invocation; a
// duplicate goes to another instance on its own, at once or afterwards.
func (s *scheduler) uploaderBatch(ctx context.Context, h handler, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	failed := map[string]bool{}
	fail := func(m events.SQSMessage) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		if g := m.Attributes["MessageGroupId"]; g != "" {
			failed[g] = true
		}
	}
	budgets := map[string]*atomic.Int32{}
	var run []events.SQSMessage
	for _, m := range ev.Records {
		if g := m.Attributes["MessageGroupId"]; g != "" && failed[g] {
			fail(m)
			continue
		}
		mctx := withBudget(ctx, s.plan.budget(m.MessageId))
		subject := "uploader " + m.Body
		if s.plan.hit(mctx, fDelayDelivery, "delay", subject, pDelayDelivery) {
			fail(m)
			continue
		}
		one := events.SQSEvent{Records: []events.SQSMessage{m}}
		if msg, err := messages.Decode(m.Body); err == nil {
			if op, ok := msg.(messages.BlockOp); ok {
				budgets[opIdentity(op)] = s.plan.budget(m.MessageId)
				mctx = testworld.WithOp(mctx, op)
			}
		}
		if s.plan.hit(mctx, fDupConcurrent, "dup-concurrent", subject, pDupConcurrent) {
			s.rogue(ctx, "uploader", mctx, one, subject)
		}
		run = append(run, m)
	}
	if len(run) == 0 {
		return resp, nil
	}
	bctx := withBudget(ctx, s.plan.budget(run[0].MessageId+"#batch"))
	bctx = context.WithValue(bctx, opBudgetsKey{}, budgets)
	r, err := h(bctx, events.SQSEvent{Records: run})
	failedIDs := map[string]bool{}
	for _, f := range r.BatchItemFailures {
		failedIDs[f.ItemIdentifier] = true
	}
	for _, m := range run {
		if err != nil || failedIDs[m.MessageId] {
			fail(m)
			continue
		}
		subject := "uploader " + m.Body
		if s.plan.hit(withBudget(ctx, s.plan.budget(m.MessageId)), fDupSequential, "dup-sequential", subject, pDupSequential) {
			dctx := noFaults(ctx)
			if msg, err := messages.Decode(m.Body); err == nil {
				if op, ok := msg.(messages.BlockOp); ok {
					dctx = testworld.WithOp(dctx, op)
				}
			}
			_, _ = functionHandler("uploader", s.deps)(dctx, events.SQSEvent{Records: []events.SQSMessage{m}})
		}
	}
	return resp, nil
}

type opBudgetsKey struct{}

// opIdentity names a block op within a batch.
func opIdentity(op messages.BlockOp) string {
	return fmt.Sprintf("%s %s/%s@%d", op.Op, op.Tenant, op.Block, op.Gen)
}

// opContext is the chaos uploader's pipeline.Deps.OpContext: an op of a
// batch runs under its own message's fault budget and its own trace.
func opContext(ctx context.Context, op messages.BlockOp) context.Context {
	if budgets, ok := ctx.Value(opBudgetsKey{}).(map[string]*atomic.Int32); ok {
		if b := budgets[opIdentity(op)]; b != nil {
			ctx = withBudget(ctx, b)
		}
	}
	return testworld.WithOp(ctx, op)
}

// rogue delivers a copy of a message to another instance of the function,
// concurrently: what SQS does when a visibility timeout expires while the
// first copy is still being worked on. A compaction job's copy may run on
// an instance whose clock is a lease ahead, so it takes the partition over.
func (s *scheduler) rogue(ctx context.Context, name string, mctx context.Context, ev events.SQSEvent, subject string) {
	d := *s.deps
	d.Owner = fmt.Sprintf("rogue-%d", s.rogueSeq.Add(1))
	if name == "compact" && s.plan.roll("skew", subject) < pSkewedTakeover {
		s.plan.count(fSkewedTakeover)
		d.Now = s.clock.Skewed(s.lease + time.Second)
	}
	rctx := noFaults(context.WithoutCancel(mctx))
	if op, ok := testworld.OpFrom(rctx); ok {
		rctx = testworld.WithOp(rctx, op) // its own execution
	}
	s.rogues.Add(1)
	s.inRogue.Add(1)
	go func() {
		defer s.rogues.Done()
		defer s.inRogue.Add(-1)
		_, _ = functionHandler(name, &d)(rctx, ev)
	}()
}

// sortedKeys lists a count map's keys, biggest count first.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

var (
	ulidRE   = regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}`)
	uuidRE   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}`)
	numberRE = regexp.MustCompile(`[0-9]{6,}`)
)

func normalise(s string) string {
	s = ulidRE.ReplaceAllString(s, "U")
	s = uuidRE.ReplaceAllString(s, "V")
	return numberRE.ReplaceAllString(s, "N")
}
