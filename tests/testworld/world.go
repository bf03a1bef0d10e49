// Package testworld builds the worlds that Sluice's end-to-end tests, race
// replays and chaos runs start from — a provisioned deployment, the local
// pipeline, synthetic tenants and their blocks uploaded the way a shipper
// uploads them — and checks the invariants of docs/design.md §5 against the
// real bucket and table.
package testworld

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/localstack/envtest"
	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
)

// World is one test's deployment, pipeline and uploaded blocks.
type World struct {
	T        testing.TB
	Env      *envtest.Env
	Pipeline *localrun.Pipeline
	Config   config.Config
	Store    *records.Store
	// Requests counts the pipeline's own AWS requests (not the test's).
	Requests *awsenv.RequestCounter
	// Uploaded lists every block directory uploaded, per tenant: the
	// inputs that I1 compares the live outputs with.
	Uploaded map[string][]string
	// Damaged lists, per tenant, the blocks a test corrupted on purpose
	// (UploadDamaged): they are expected to be quarantined, and I1 leaves
	// them out on both sides (their samples cannot be read). A test that
	// writes to it while handlers run does so with Repaired, and reads it
	// with IsDamaged.
	Damaged map[string]map[string]bool
	// withdrawn lists, per tenant, the uploads another tool marked for
	// deletion (Withdraw). mu guards it, and Damaged and Uploaded when
	// Repaired changes them while the pipeline runs.
	withdrawn map[string]map[string]bool
	mu        sync.Mutex
	// QuarantinedGroupsExpected lets CheckQuiescent accept quarantined
	// groups (a test of them); otherwise one is a violation.
	QuarantinedGroupsExpected bool
	scratch                   string

	checksMu sync.Mutex
	checks   map[string]int // CheckQuiescent's checks made, by name
}

// Options tune a world.
type Options struct {
	// Env options for the deployment.
	Env []envtest.Option
	// Pipeline options (Hook, Now, Wrap, S3...); Logger and Configure are
	// filled in when unset.
	Pipeline localrun.Options
	// Configure changes the pipeline's configuration after the test-sized
	// defaults (deletion delay 2s, orphan delay 2s, sweep every 1s).
	Configure func(*config.Config)
}

// New provisions a deployment and wires the pipeline; it does not start
// it (tests run Pipeline.Settle or drive handlers one by one).
func New(t testing.TB, o Options) *World {
	t.Helper()
	env := envtest.New(t, o.Env...)
	po := o.Pipeline
	if po.Logger == nil {
		po.Logger = env.Logger
	}
	if po.SweepInterval == 0 {
		po.SweepInterval = time.Second
	}
	if po.RetryAfter == 0 {
		// The queues' visibility timeout (envtest's) is long enough that a
		// slow handler on a loaded machine is never redelivered; failures
		// come back after a second.
		po.RetryAfter = time.Second
	}
	po.Configure = func(c *config.Config) {
		c.DeletionDelay = 2 * time.Second
		c.OrphanDelay = 2 * time.Second
		c.RedriveAfter = 10 * time.Second
		c.LeaseDuration = time.Minute
		c.StuckAfter = 5 * time.Minute
		// A covered range is planned at once, as the tests' timelines
		// expect; TestUploadWaitGathersLateReplicas turns the wait on.
		c.Policy.UploadWait = planning.NoUploadWait
		c.ScratchDir = t.TempDir()
		if o.Configure != nil {
			o.Configure(c)
		}
	}
	requests := awsenv.NewRequestCounter()
	clients, err := env.NewClients(context.Background(), awsenv.Options{Counter: requests})
	if err != nil {
		t.Fatalf("testworld: %v", err)
	}
	p, err := localrun.New(clients, env.Deployment, po)
	if err != nil {
		t.Fatalf("testworld: %v", err)
	}
	return &World{T: t, Env: env, Pipeline: p, Config: p.Deps.Config, Store: p.Deps.Store,
		Requests: requests, Uploaded: map[string][]string{}, Damaged: map[string]map[string]bool{}, scratch: t.TempDir()}
}

// Generate writes synthetic blocks for a tenant into the world's scratch
// directory.
func (w *World) Generate(o blockgen.Options) []blockgen.Block {
	w.T.Helper()
	dir := filepath.Join(w.scratch, "gen", o.Tenant, fmt.Sprint(o.Seed), fmt.Sprint(o.Start.UnixMilli()))
	blocks, err := blockgen.Generate(dir, o)
	if err != nil {
		w.T.Fatalf("testworld: generate %s: %v", o.Tenant, err)
	}
	return blocks
}

// Upload uploads one block directory as a shipper does: every file but
// meta.json first, meta.json last (its arrival means "block complete").
func (w *World) Upload(ctx context.Context, tenant, dir string) {
	w.T.Helper()
	if err := UploadBlock(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, tenant, dir); err != nil {
		w.T.Fatalf("testworld: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Uploaded[tenant] = append(w.Uploaded[tenant], dir)
}

// UploadDamaged uploads a block directory the test corrupted: it is
// expected to be quarantined, and is no input of I1.
func (w *World) UploadDamaged(ctx context.Context, tenant, dir string) {
	w.T.Helper()
	if err := UploadBlock(ctx, w.Env.Clients.S3, w.Config.Bucket, w.Config.Layout, tenant, dir); err != nil {
		w.T.Fatalf("testworld: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.Damaged[tenant] == nil {
		w.Damaged[tenant] = map[string]bool{}
	}
	w.Damaged[tenant][filepath.Base(dir)] = true
}

// Repaired records that an operator re-uploaded damaged block dir's files,
// sound, from dir (a copy of the block before it was damaged, under the
// same ULID), before `sluice retry`: the block is no longer expected to be
// quarantined, and I1 expects its samples.
func (w *World) Repaired(tenant, dir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.Damaged[tenant], filepath.Base(dir))
	w.Uploaded[tenant] = append(w.Uploaded[tenant], dir)
}

// IsDamaged tells whether block id of tenant is one the test damaged and
// has not repaired.
func (w *World) IsDamaged(tenant, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Damaged[tenant][id]
}

// Withdraw records that another tool marked upload id of tenant for
// deletion: I1 then expects every other upload's samples and nothing
// else, and this one's in any measure — gone with the block, or kept in
// an output by a version that took the block before the mark came, or
// still held by a replica's.
func (w *World) Withdraw(tenant, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.withdrawn == nil {
		w.withdrawn = map[string]map[string]bool{}
	}
	if w.withdrawn[tenant] == nil {
		w.withdrawn[tenant] = map[string]bool{}
	}
	w.withdrawn[tenant][id] = true
}

// remaining is the tenant's uploads but those withdrawn, and whether any
// was.
func (w *World) remaining(tenant string) ([]string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gone := w.withdrawn[tenant]
	if len(gone) == 0 {
		return w.Uploaded[tenant], false
	}
	var rest []string
	for _, dir := range w.Uploaded[tenant] {
		if !gone[filepath.Base(dir)] {
			rest = append(rest, dir)
		}
	}
	return rest, true
}

// UploadBlock uploads dir as block <tenant>/<ULID of dir>: its files, then
// its meta.json.
func UploadBlock(ctx context.Context, c *s3.Client, bucket string, layout blockkey.Layout, tenant, dir string) error {
	if err := UploadFiles(ctx, c, bucket, layout, tenant, dir); err != nil {
		return err
	}
	return uploadFile(ctx, c, bucket, layout, tenant, dir, blockkey.MetaFile)
}

// UploadFiles uploads every file of dir but meta.json: a partial upload.
func UploadFiles(ctx context.Context, c *s3.Client, bucket string, layout blockkey.Layout, tenant, dir string) error {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel != blockkey.MetaFile {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, rel := range files {
		if err := uploadFile(ctx, c, bucket, layout, tenant, dir, rel); err != nil {
			return err
		}
	}
	return nil
}

func uploadFile(ctx context.Context, c *s3.Client, bucket string, layout blockkey.Layout, tenant, dir, rel string) error {
	k, err := BlockKeyOf(layout, tenant, dir)
	if err != nil {
		return err
	}
	body, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return err
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k.Object(rel)),
		Body: bytes.NewReader(body)}); err != nil {
		return fmt.Errorf("upload %s: %w", k.Object(rel), err)
	}
	return nil
}

// CopyDir copies the tree at from to to: a block directory kept sound
// before a test damages it, for the repair an operator uploads.
func CopyDir(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// BlockKeyOf is the key of the block in dir (named by its ULID).
func BlockKeyOf(layout blockkey.Layout, tenant, dir string) (blockkey.Key, error) {
	return blockkey.Parse(layoutPath(layout, tenant, filepath.Base(dir))+"/"+blockkey.MetaFile, layout)
}

func layoutPath(l blockkey.Layout, tenant, id string) string {
	p := strings.Trim(l.Prefix, "/")
	if p != "" {
		p += "/"
	}
	if l.SingleTenant != "" {
		return p + id
	}
	return p + tenant + "/" + id
}

// DuplicateEvent sends another S3 ObjectCreated notification for the
// block's meta.json, shaped as the emulator sends it: what S3's
// at-least-once delivery does.
func (w *World) DuplicateEvent(ctx context.Context, tenant, dir string) {
	w.T.Helper()
	k, err := BlockKeyOf(w.Config.Layout, tenant, dir)
	if err != nil {
		w.T.Fatal(err)
	}
	w.sendEvent(ctx, ObjectCreatedBody(w.Config.Bucket, k.Object(blockkey.MetaFile), "", false, time.Now()))
}

// NotifyVersion sends an S3 ObjectCreated notification for one version of
// an object, shaped as AWS sends it in a versioned bucket: the emulator's
// own notifications carry no versionId.
func (w *World) NotifyVersion(ctx context.Context, key, versionID string) {
	w.T.Helper()
	w.sendEvent(ctx, ObjectCreatedBody(w.Config.Bucket, key, versionID, true, time.Now()))
}

// sendEvent puts a notification on the block-events queue.
func (w *World) sendEvent(ctx context.Context, body string) {
	w.T.Helper()
	if _, err := w.Env.Clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(w.Env.Deployment.QueueURLs[spec.BlockEvents]), MessageBody: aws.String(body),
	}); err != nil {
		w.T.Fatalf("testworld: send an S3 event: %v", err)
	}
}

// Blocks reads every block record of a tenant.
func (w *World) Blocks(ctx context.Context, tenant string) []records.Block {
	w.T.Helper()
	bs, err := w.Store.TenantBlocks(ctx, tenant)
	if err != nil {
		w.T.Fatalf("testworld: %v", err)
	}
	return bs
}

// Quiescent reports whether a tenant's pipeline has nothing left to do:
// no message queued or in flight, no unfinished version, no block between
// states, nothing waiting for its deletion delay.
func (w *World) Quiescent(ctx context.Context, tenants ...string) (bool, error) {
	for _, url := range w.Env.Deployment.QueueURLs {
		n, err := eventsource.Pending(ctx, w.Env.Clients.SQS, url)
		if err != nil || n > 0 {
			return false, err
		}
	}
	// A DELETED block's DELETE op is sent after the transition, and its
	// DEL entry stays on the agenda until it is: a sweep cut off in
	// between (RunUntilIdle cancels a timer run still going when the
	// queues go idle) leaves the objects to the next sweep.
	dels, err := w.Store.Due(ctx, records.AgendaDelete, time.Now().Add(100*365*24*time.Hour))
	if err != nil {
		return false, err
	}
	deleting := map[string]bool{}
	for _, e := range dels {
		deleting[e.Tenant+"/"+e.Subject] = true
	}
	for _, tenant := range tenants {
		groups, err := w.Store.TenantGroups(ctx, tenant)
		if err != nil {
			return false, err
		}
		quarantined := map[string]bool{}
		for _, g := range groups {
			if g.State.Unfinished() {
				return false, nil
			}
			if g.State == protocol.GroupQuarantined {
				quarantined[g.Ref()] = true
			}
		}
		blocks, err := w.Store.TenantBlocks(ctx, tenant)
		if err != nil {
			return false, err
		}
		for _, b := range blocks {
			switch {
			case b.State == protocol.BlockDeleted && deleting[tenant+"/"+b.ID]:
				return false, nil
			case b.State == protocol.BlockClaimed && quarantined[b.ClaimedBy]:
				// A quarantined group's sources stay claimed.
			case b.State == protocol.BlockLive && !b.Published,
				b.State == protocol.BlockClaimed, b.State == protocol.BlockPending, b.State == protocol.BlockRetiring,
				b.State == protocol.BlockQuarantined && b.NoCompactMarkVersionID == "":
				return false, nil
			}
		}
	}
	return true, nil
}

// HeadHistory is how each version of a group ended, as its head's history
// tells it, and the current version as the head holds it.
func (w *World) HeadHistory(tenant string, g planning.GroupKey) map[int64]records.Group {
	w.T.Helper()
	head, ok, err := w.Store.GetGroup(context.Background(), tenant, g)
	if err != nil || !ok {
		w.T.Fatalf("testworld: group %s/%s: %v (found %v)", tenant, g, err, ok)
	}
	out := map[int64]records.Group{head.Version: head}
	for _, h := range head.History {
		out[h.Version] = records.Group{Tenant: tenant, Key: g, Version: h.Version, State: h.State, Partitions: h.Partitions, Failures: h.Failures,
			LastErrorKind: h.LastErrorKind, LastErrorBlock: h.LastErrorBlock, Reason: h.Reason}
	}
	return out
}
