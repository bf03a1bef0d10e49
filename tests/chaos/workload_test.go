package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Levels of the chaos deployment: 2h uploads compact to 4h, then 8h — two
// levels in a short span, so a small workload goes through both and a
// late block meets an already compacted range.
var chaosRanges = []time.Duration{4 * time.Hour, 8 * time.Hour}

// tenantBlocks is one tenant's share of the pool.
type tenantBlocks struct {
	tenant string
	blocks []blockgen.Block // uploaded first, in a shuffled order
	late   []blockgen.Block // uploaded once the pipeline has been at work
	// damaged are blocks with a corrupt index (uploaded among the others,
	// expected to be quarantined; no input of I1).
	damaged []blockgen.Block
	// sound are the damaged blocks as they were before the damage (same
	// ULIDs, in a directory of their own): the repair an operator uploads
	// before `sluice retry`.
	sound []blockgen.Block
	// fault is the fault kind a seed that draws this tenant counts.
	fault string
}

// pool is the workload every seed draws from, generated once before any
// seed runs (blockgen must not run alongside anything that maps TSDB
// files; see tests/races/main_test.go). Each seed has its own bucket, so
// the same blocks can be uploaded by every seed.
type pool []tenantBlocks

// span is an 8h span that ended two days ago.
func span() time.Time { return time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour) }

func generatePool(dir string) (pool, error) {
	start := span()
	type profile struct {
		tenant string
		o      blockgen.Options
		late   []time.Duration // where late blocks start
		// also are more streams of the tenant (other external labels).
		also []blockgen.Options
		// damage corrupts the index of the last replica of the first range.
		damage bool
		fault  string
	}
	profiles := []profile{
		// Thanos sidecar blocks, files listed, native histograms: one 4h range.
		{tenant: "acme", o: blockgen.Options{Blocks: 2, Series: 12, Histograms: true, ThanosFiles: true}, late: []time.Duration{2 * time.Hour}},
		// Replicated ingesters: every range twice, identical samples.
		{tenant: "beta", o: blockgen.Options{Blocks: 2, Series: 10, ReplicationFactor: 2, ThanosFiles: true}, late: []time.Duration{2 * time.Hour}},
		// Plain Prometheus blocks: meta.json lists no files (one LIST each).
		{tenant: "gamma", o: blockgen.Options{Blocks: 2, Series: 14}, late: []time.Duration{2 * time.Hour}},
		// Two 4h ranges, so the 8h level runs too; late blocks meet it.
		{tenant: "delta", o: blockgen.Options{Blocks: 4, Series: 8, ThanosFiles: true}, late: []time.Duration{2 * time.Hour, 6 * time.Hour}},
		// Replicas that differ in a replica label, one of them corrupt: it
		// is quarantined and its range compacts without it.
		{tenant: "epsilon", o: blockgen.Options{Blocks: 2, Series: 10, ReplicationFactor: 2, ReplicaLabel: "replica", ThanosFiles: true,
			ExternalLabels: map[string]string{"cluster": "eu"}}, damage: true, fault: fCorruptSource},
		// Two Prometheus servers, same series names: never merged.
		{tenant: "zeta", o: blockgen.Options{Blocks: 2, Series: 10, ThanosFiles: true, ExternalLabels: map[string]string{"cluster": "east"}},
			late: []time.Duration{2 * time.Hour},
			also: []blockgen.Options{{Blocks: 2, Series: 10, ThanosFiles: true, ExternalLabels: map[string]string{"cluster": "west"}}}, fault: fTwoStreams},
		// The longest tenant id Cortex and Mimir accept.
		{tenant: longTenant, o: blockgen.Options{Blocks: 2, Series: 8, ThanosFiles: true}, late: []time.Duration{2 * time.Hour}, fault: fLongTenant},
	}
	var out pool
	for i, p := range profiles {
		o := p.o
		o.Tenant, o.Start, o.SamplesPerSeries, o.Seed = p.tenant, start, 12, int64(i+1)
		bs, err := blockgen.Generate(filepath.Join(dir, p.tenant), o)
		if err != nil {
			return nil, err
		}
		tb := tenantBlocks{tenant: p.tenant, blocks: bs, fault: p.fault}
		for j, a := range p.also {
			a.Tenant, a.Start, a.SamplesPerSeries, a.Seed = p.tenant, start, 12, int64(100*(i+1)+j)
			more, err := blockgen.Generate(filepath.Join(dir, p.tenant, fmt.Sprintf("stream-%d", j)), a)
			if err != nil {
				return nil, err
			}
			tb.blocks = append(tb.blocks, more...)
		}
		if p.damage {
			victim := o.ReplicationFactor - 1
			sound := bs[victim]
			sound.Dir = filepath.Join(dir, "sound", p.tenant, filepath.Base(sound.Dir))
			if err := testworld.CopyDir(bs[victim].Dir, sound.Dir); err != nil {
				return nil, err
			}
			tb.sound = append(tb.sound, sound)
			if err := damageIndex(bs[victim].Dir); err != nil {
				return nil, err
			}
			tb.damaged = append(tb.damaged, bs[victim])
			tb.blocks = append(bs[:victim:victim], bs[victim+1:]...)
		}
		// A late block repeats a range with 4 more series (same seed: the
		// shared series hold the same samples).
		for _, at := range p.late {
			l := o
			l.Start, l.Blocks, l.ReplicationFactor, l.Series = start.Add(at), 1, 1, o.Series+4
			lb, err := blockgen.Generate(filepath.Join(dir, p.tenant, fmt.Sprintf("late-%v", at)), l)
			if err != nil {
				return nil, err
			}
			tb.late = append(tb.late, lb...)
		}
		out = append(out, tb)
	}
	return out, nil
}

// longTenant is a tenant id of blockkey.MaxTenantLength characters: its
// FIFO group ids (tenant/ULID) are over SQS's 128.
var longTenant = strings.Repeat("a-team-with-a-rather-long-name.", 5)[:blockkey.MaxTenantLength]

// damageIndex flips 64 bytes in the middle of a block's index: its table of
// contents is intact, so registration accepts it, but compaction fails.
func damageIndex(dir string) error {
	path := filepath.Join(dir, blockkey.IndexFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i := len(b) * 2 / 5; i < len(b)*2/5+64 && i < len(b)-60; i++ {
		b[i] ^= 0xff
	}
	return os.WriteFile(path, b, 0o644)
}

// workload uploads one seed's blocks as shippers would: shuffled, some S3
// events duplicated and delayed, late blocks after a while, and now and
// then a block uploaded a second time.
type workload struct {
	w       *testworld.World
	plan    *plan
	rng     *rand.Rand
	tenants []tenantBlocks
	notes   *notifier
	// mark, when set, draws the upload that another tool marks and the
	// state it is marked in (markIn, or any later one): markWhen writes
	// the mark (markFile: a no-compact or a deletion mark), then ends
	// marking. When the settle loop finds nothing else left to do, the
	// mark is written then, whatever its upload's state.
	mark     *rand.Rand
	markIn   protocol.BlockState
	markFile string
	marking  *cue
	// repair, when set, has an operator repair each quarantined upload
	// and run `sluice retry` on it (repairWhen), through retry, cued as
	// the mark is.
	repair    *rand.Rand
	retry     messages.Sender
	repairing *cue
}

// cue is an action of the workload that waits for the pipeline to reach
// a state, or at the latest for the settle loop to find nothing else left
// to do: the loop then calls pending, which closes now. The action closes
// done when it has been taken (or given up). A nil cue is no action.
type cue struct {
	now, done chan struct{}
	once      sync.Once
}

func newCue() *cue { return &cue{now: make(chan struct{}), done: make(chan struct{})} }

// taken reports whether the action is done.
func (c *cue) taken() bool {
	if c == nil {
		return false
	}
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// pending tells the action to be taken now, and reports whether it is
// still to come.
func (c *cue) pending() bool {
	if c == nil || c.taken() {
		return false
	}
	c.once.Do(func() { close(c.now) })
	return true
}

// wait waits for the action to end (a seed that did not settle may stop
// it before it is taken).
func (c *cue) wait() {
	if c != nil {
		<-c.done
	}
}

func (wl *workload) run(ctx context.Context) error {
	type up struct {
		tenant  string
		b       blockgen.Block
		damaged bool
	}
	var ups []up
	for _, t := range wl.tenants {
		if t.fault != "" {
			wl.plan.count(t.fault)
		}
		for _, b := range t.blocks {
			ups = append(ups, up{tenant: t.tenant, b: b})
		}
		for _, b := range t.damaged {
			ups = append(ups, up{tenant: t.tenant, b: b, damaged: true})
		}
	}
	wl.rng.Shuffle(len(ups), func(i, j int) { ups[i], ups[j] = ups[j], ups[i] })
	wl.plan.count(fShuffledUploads)
	for _, u := range ups {
		if u.damaged {
			wl.w.UploadDamaged(ctx, u.tenant, u.b.Dir)
			k, err := testworld.BlockKeyOf(wl.w.Config.Layout, u.tenant, u.b.Dir)
			if err != nil {
				return err
			}
			if err := wl.notes.created(ctx, k.Object(blockkey.MetaFile), ""); err != nil {
				return err
			}
		} else if err := wl.upload(ctx, u.tenant, u.b.Dir, true); err != nil {
			return err
		}
		sleep(ctx, time.Duration(wl.rng.IntN(200))*time.Millisecond)
	}
	// Late blocks arrive while (or after) the first versions run.
	sleep(ctx, time.Duration(500+wl.rng.IntN(4000))*time.Millisecond)
	for _, t := range wl.tenants {
		for _, b := range t.late {
			if wl.rng.Float64() < 0.6 {
				wl.plan.count(fLateBlock)
				if err := wl.upload(ctx, t.tenant, b.Dir, true); err != nil {
					return err
				}
				sleep(ctx, time.Duration(wl.rng.IntN(1000))*time.Millisecond)
			}
		}
	}
	// A shipper that retries uploads a block it already shipped.
	if wl.rng.Float64() < 0.5 {
		u := ups[wl.rng.IntN(len(ups))]
		if u.damaged {
			return nil
		}
		sleep(ctx, time.Duration(wl.rng.IntN(3000))*time.Millisecond)
		wl.plan.count(fReupload)
		wl.w.T.Logf("shipper uploads %s/%s again", u.tenant, filepath.Base(u.b.Dir))
		return wl.upload(ctx, u.tenant, u.b.Dir, false)
	}
	return nil
}

// repairWhen waits for the seed's uploads to be made (loaded), then for
// each damaged upload to be quarantined — or for the settle loop to find
// nothing else left to do (its cue) — and has an operator repair it:
// re-upload its files sound (now and then its meta.json too, as a
// shipper's whole upload, with its event) and run `sluice retry`, whose
// request the bus may duplicate, delay and redeliver. The block is then
// an input of I1 like any upload: the retry makes it LIVE in a range
// compacted without it, and a version merges it into the output. Half
// the time the operator first retries the block as it is, unrepaired: it
// is released, fails its jobs again and is quarantined again (its
// no-compact mark removed and written anew) before the repair. It
// ends its cue when done.
func (wl *workload) repairWhen(ctx context.Context, loaded <-chan struct{}) {
	defer close(wl.repairing.done)
	select {
	case <-loaded:
	case <-ctx.Done():
		return
	}
	type damaged struct {
		tenant string
		sound  blockgen.Block
		// unrepairedFirst: the operator retries the block unrepaired
		// first. Drawn before anything else, so a seed's draw does not
		// depend on when its quarantine is seen.
		unrepairedFirst bool
		// retriedAt is the gen the block was quarantined at when it was
		// retried unrepaired (0: not retried yet).
		retriedAt int64
	}
	var todo []damaged
	for _, t := range wl.tenants {
		for _, b := range t.sound {
			todo = append(todo, damaged{tenant: t.tenant, sound: b, unrepairedFirst: wl.repair.IntN(2) == 0})
		}
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for len(todo) > 0 {
		now := false
		select {
		case <-ctx.Done():
			return
		case <-wl.repairing.now:
			now = true
		case <-tick.C:
		}
		var left []damaged
		for _, d := range todo {
			id := filepath.Base(d.sound.Dir)
			b, _, err := wl.w.Store.GetBlock(ctx, d.tenant, id)
			if err != nil {
				if ctx.Err() == nil {
					wl.w.T.Errorf("repair of %s/%s: %v", d.tenant, id, err)
				}
				return
			}
			if b.State != protocol.BlockQuarantined || b.Gen <= d.retriedAt {
				if now {
					wl.w.T.Logf("repair of %s/%s: it is %s at gen %d, not quarantined (again); not repaired", d.tenant, id, b.State, b.Gen)
				} else {
					left = append(left, d)
				}
				continue
			}
			if !now {
				sleep(ctx, time.Duration(wl.repair.IntN(1500))*time.Millisecond)
			}
			if d.unrepairedFirst && d.retriedAt == 0 {
				if err := wl.retryBlock(ctx, d.tenant, id); err != nil {
					if ctx.Err() == nil {
						wl.w.T.Errorf("retry of %s/%s: %v", d.tenant, id, err)
					}
					continue
				}
				wl.plan.count(fRetryUnrepaired)
				wl.w.T.Logf("an operator retries %s/%s without repairing it", d.tenant, id)
				d.retriedAt = b.Gen
				left = append(left, d)
				continue
			}
			if err := wl.repairOne(ctx, d.tenant, d.sound.Dir); err != nil && ctx.Err() == nil {
				wl.w.T.Errorf("repair of %s/%s: %v", d.tenant, id, err)
			}
		}
		todo = left
	}
}

// retryBlock runs `sluice retry` on block id of tenant.
func (wl *workload) retryBlock(ctx context.Context, tenant, id string) error {
	_, err := cli.Retry(ctx, wl.w.Store, wl.retry, messages.RetryRequest{Tenant: tenant, Block: id, Nonce: fmt.Sprintf("chaos-%d", wl.repair.Uint32())})
	return err
}

// repairOne uploads the sound files of quarantined block dir of tenant
// (with its meta.json, half the time) and retries the block as `sluice
// retry` does.
func (wl *workload) repairOne(ctx context.Context, tenant, dir string) error {
	whole := wl.repair.IntN(2) == 0
	if whole {
		// As a shipper's upload, with its event; the repair's samples
		// become an input of I1 below.
		if err := wl.upload(ctx, tenant, dir, false); err != nil {
			return err
		}
	} else if err := testworld.UploadFiles(ctx, wl.w.Env.Clients.S3, wl.w.Config.Bucket, wl.w.Config.Layout, tenant, dir); err != nil {
		return err
	}
	wl.w.Repaired(tenant, dir)
	id := filepath.Base(dir)
	if err := wl.retryBlock(ctx, tenant, id); err != nil {
		return err
	}
	wl.plan.count(fRepairRetry)
	wl.w.T.Logf("an operator repairs %s/%s (meta.json re-uploaded too: %v) and retries it", tenant, id, whole)
	return nil
}

// markRank orders the states an upload goes through: one is marked in
// the state drawn for it or, if it went past that unseen, a later one.
var markRank = map[protocol.BlockState]int{
	protocol.BlockLive: 0, protocol.BlockClaimed: 1, protocol.BlockRetiring: 2, protocol.BlockDeleted: 3,
}

// markWhen writes a no-compact or deletion mark as `thanos tools bucket
// mark` does on one upload of a tenant drawn at random, once it is in the
// state drawn (markIn) or a later one — or when the settle loop finds
// nothing else left to do (its cue) — and lets S3 notify; it ends its
// cue when done. Sluice notes the mark on a LIVE upload, takes down
// the version that claimed it (or retires it with the version, if that
// completed), deletes a LIVE upload marked for deletion once the delay
// from its mark ends, and deletes the mark from an upload it is done
// with. Uploads only: a mark on a
// downsampled partition would leave its 5m range waiting for ever
// (docs/protocol.md, "A downsampled range merges only whole sources").
func (wl *workload) markWhen(ctx context.Context) {
	defer close(wl.marking.done)
	t := wl.tenants[wl.mark.IntN(len(wl.tenants))]
	chosen := ""
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		now := false
		select {
		case <-ctx.Done():
			return
		case <-wl.marking.now:
			now = true
		case <-tick.C:
		}
		bs, err := wl.w.Store.TenantBlocks(ctx, t.tenant)
		if err != nil {
			if ctx.Err() == nil {
				wl.w.T.Errorf("another tool's no-compact mark: %v", err)
			}
			return
		}
		var uploads []records.Block
		for _, b := range bs {
			if _, ok := markRank[b.State]; ok && b.ProducedBy == "" && b.Level == 0 && !wl.w.IsDamaged(t.tenant, b.ID) {
				uploads = append(uploads, b)
			}
		}
		if chosen == "" && len(uploads) > 0 {
			chosen = uploads[wl.mark.IntN(len(uploads))].ID
		}
		for _, b := range uploads {
			if b.ID == chosen && (now || markRank[b.State] >= markRank[wl.markIn]) {
				if err := wl.writeMark(ctx, b); err != nil && ctx.Err() == nil {
					wl.w.T.Errorf("another tool's no-compact mark: %v", err)
				}
				return
			}
		}
		if now {
			wl.w.T.Logf("another tool's no-compact mark: no upload of %s to mark; none written", t.tenant)
			return
		}
	}
}

// writeMark writes the drawn mark on upload b and notifies it. An upload
// marked for deletion is withdrawn from what I1 expects: its samples may
// be gone, or kept by a version that took it before the mark came.
func (wl *workload) writeMark(ctx context.Context, b records.Block) error {
	id, err := ulid.ParseStrict(b.ID)
	if err != nil {
		return err
	}
	k, err := wl.w.Config.Layout.Block(b.Tenant, id)
	if err != nil {
		return err
	}
	key := k.Object(wl.markFile)
	body := fmt.Sprintf(`{"id":%q,"version":1,"details":"chaos: an operator's mark","no_compact_time":%d,"reason":"manual"}`, b.ID, time.Now().Unix())
	if wl.markFile == blockkey.DeletionMarkFile {
		body = fmt.Sprintf(`{"id":%q,"version":1,"details":"chaos: an operator's mark","deletion_time":%d}`, b.ID, time.Now().Unix())
		wl.w.Withdraw(b.Tenant, b.ID)
	}
	res, err := wl.w.Env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(wl.w.Config.Bucket), Key: aws.String(key),
		Body: strings.NewReader(body)})
	if err != nil {
		return err
	}
	wl.plan.count(fForeignMark)
	wl.w.T.Logf("another tool writes %s for %s/%s (drawn: %s; its record: %s)", wl.markFile, b.Tenant, b.ID, wl.markIn, b.State)
	// AWS's event names the version: without it a RETIRING block's
	// second deletion mark is left alone (docs/protocol.md, "Marks
	// written by other tools"), a gap of the emulator's events only.
	return wl.notes.notify(ctx, key, aws.ToString(res.VersionId), wl.markFile == blockkey.DeletionMarkFile)
}

// upload ships one block — every file, then meta.json — and lets S3 notify
// (the notification may be duplicated and delayed). record adds it to the
// inputs I1 compares with (a re-upload adds nothing new).
func (wl *workload) upload(ctx context.Context, tenant, dir string, record bool) error {
	if record {
		wl.w.Upload(ctx, tenant, dir)
	} else if err := testworld.UploadBlock(ctx, wl.w.Env.Clients.S3, wl.w.Config.Bucket, wl.w.Config.Layout, tenant, dir); err != nil {
		return err
	}
	k, err := testworld.BlockKeyOf(wl.w.Config.Layout, tenant, dir)
	if err != nil {
		return err
	}
	return wl.notes.created(ctx, k.Object(blockkey.MetaFile), "")
}

// notifier sends S3 ObjectCreated notifications to the planner's queue, as
// the bucket does: at least once — some duplicated, some delayed (and so
// reordered). Half are shaped as AWS sends them (URL-encoded key, zoned
// time, sequencer, versionId when known), half as the emulator does (no
// sequencer or versionId, a time without zone).
type notifier struct {
	bucket string
	queue  string
	send   messages.SQS
	plan   *plan
	mu     sync.Mutex
	rng    *rand.Rand
}

func (e *notifier) created(ctx context.Context, key, versionID string) error {
	return e.notify(ctx, key, versionID, false)
}

// notify notifies key; asAWS sends the first notification in AWS's shape.
func (e *notifier) notify(ctx context.Context, key, versionID string, asAWS bool) error {
	e.mu.Lock()
	awsShape := e.rng.IntN(2) == 0 || asAWS
	delay := 0
	if e.rng.Float64() < 0.15 {
		delay = 1 + e.rng.IntN(4)
	}
	dup := e.rng.Float64() < 0.25
	dupDelay := e.rng.IntN(5)
	e.mu.Unlock()
	if delay > 0 || dup {
		e.plan.count(fDupEvent)
	}
	if err := e.send1(ctx, key, versionID, awsShape, delay); err != nil {
		return err
	}
	if dup {
		return e.send1(ctx, key, versionID, !awsShape, dupDelay)
	}
	return nil
}

func (e *notifier) send1(ctx context.Context, key, versionID string, awsShape bool, delay int) error {
	body := testworld.ObjectCreatedBody(e.bucket, key, versionID, awsShape, time.Now())
	_, err := e.send.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(e.queue), MessageBody: aws.String(body),
		DelaySeconds: int32(delay)})
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
