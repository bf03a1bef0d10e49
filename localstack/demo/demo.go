// Package demo is `make demo`: it provisions a Sluice deployment in the
// local emulator, generates two tenants' 2h blocks (one replicated twice),
// uploads them in shuffled order the way `sluice upload` does, duplicates
// some S3 notifications, runs the whole pipeline locally until nothing is
// left to do, and then shows per tenant what happened and checks it: the
// blocks before and after, the groups and partitions run, the AWS requests
// made, `sluice verify` (I2–I4) and a sample-level equivalence check of the
// live blocks against the generated ones.
//
// Run returns a Summary; OK is true only if everything held.
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/bucketindex"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/equiv"
	"github.com/sluice-dev/sluice/shared/overrides"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/s3errors"
	"github.com/sluice-dev/sluice/shared/spec"
)

// Tenant is one demo tenant.
type Tenant struct {
	Name string
	// ReplicationFactor: copies of every 2h block, as replicated ingesters
	// ship them.
	ReplicationFactor int
}

// Options describe the scenario. Zero values mean the documented default.
type Options struct {
	// Endpoint of the emulator; default AWS_ENDPOINT_URL, else
	// http://127.0.0.1:4566. The demo never talks to AWS itself.
	Endpoint string
	// Prefix of the demo's resources; default "sluice-demo". Resources
	// left by an earlier run under it are removed first.
	Prefix string
	// Tenants; default team-a (RF 1) and team-b (RF 2).
	Tenants []Tenant
	// Hours of 2h blocks per tenant; default 24 (a multiple of 2).
	Hours int
	// Series per block; default 200. SamplesPerSeries; default 120.
	Series, SamplesPerSeries int
	// MaxSeriesPerPartition sets the policy's limit low enough that the
	// groups are split into partitions; default the series per block. A
	// 12h group is then estimated at 2 × that (planning.EstimateSeries:
	// replicas once, each later 2h block adding a fifth as churn) and
	// gets 2 partitions, a 24h group 1.2 × that and 2 too.
	MaxSeriesPerPartition uint64
	// DeletionDelay before retired sources are deleted; default 5s.
	DeletionDelay time.Duration
	// UploadWait is the policy's upload wait (SLUICE_UPLOAD_WAIT): a range
	// holding uploads is compacted that long after the newest of them
	// arrived; default 3s, the demo's scale of the 10 minutes in AWS.
	// Negative: none.
	UploadWait time.Duration
	// Duplicates is how many S3 notifications are sent twice; default 4.
	Duplicates int
	// Seed of the upload order; 0 picks one from the clock.
	Seed uint64
	// WorkDir holds generated and downloaded blocks; default
	// .sluice/demo (emptied first).
	WorkDir string
	// EnvFile is where the deployment's settings are written for `sluice`;
	// default .sluice/demo.env. LogFile receives the handlers' logs;
	// default .sluice/demo.log.
	EnvFile, LogFile string
	// Timeout for the pipeline to settle; default 5m (the demo runs two
	// deployments side by side on one emulator: about 2.5 min on two cores).
	Timeout time.Duration
	// Out receives the report (default os.Stdout); Progress the progress
	// bars (nil: none).
	Out, Progress io.Writer
	// Keep leaves the deployment in place (make demo); Run otherwise
	// removes it at the end (tests).
	Keep bool
	// SkipThanos leaves out the Thanos-layout deployment (thanos.go).
	SkipThanos bool
	// ThanosBinary runs Thanos' own verifier over that deployment's
	// bucket; default $THANOS, else thanos on the PATH; none found: the
	// verdict says it was not run.
	ThanosBinary string
}

func (o *Options) defaults() {
	if o.Endpoint == "" {
		o.Endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	if o.Endpoint == "" {
		o.Endpoint = "http://127.0.0.1:4566"
	}
	if o.Prefix == "" {
		o.Prefix = "sluice-demo"
	}
	if len(o.Tenants) == 0 {
		o.Tenants = []Tenant{{Name: "team-a", ReplicationFactor: 1}, {Name: "team-b", ReplicationFactor: 2}}
	}
	if o.Hours == 0 {
		o.Hours = 24
	}
	if o.Series == 0 {
		o.Series = 200
	}
	if o.SamplesPerSeries == 0 {
		o.SamplesPerSeries = 120
	}
	if o.MaxSeriesPerPartition == 0 {
		o.MaxSeriesPerPartition = uint64(o.Series)
	}
	if o.DeletionDelay == 0 {
		o.DeletionDelay = 5 * time.Second
	}
	if o.UploadWait == 0 {
		o.UploadWait = 3 * time.Second
	}
	if o.Duplicates == 0 {
		o.Duplicates = 4
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(".sluice", "demo")
	}
	if o.EnvFile == "" {
		o.EnvFile = filepath.Join(".sluice", "demo.env")
	}
	if o.LogFile == "" {
		o.LogFile = filepath.Join(".sluice", "demo.log")
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
}

// Summary is what the demo showed and checked.
type Summary struct {
	Prefix   string          `json:"prefix"`
	Endpoint string          `json:"endpoint"`
	Tenants  []TenantSummary `json:"tenants"`
	// Requests are the AWS requests of each phase.
	Requests []Request `json:"requests"`
	// ByCaller are the pipeline's requests per function and schedule
	// ("event source": the runner's polling).
	ByCaller []CallerRequests `json:"byCaller"`
	// Uploaded is the number of blocks uploaded; Duplicated the S3
	// notifications sent twice.
	Uploaded   int `json:"uploaded"`
	Duplicated int `json:"duplicated"`
	// Settled: the pipeline finished within the timeout.
	Settled bool `json:"settled"`
	// Retention is what retention did to the archive tenant, whose old
	// blocks a per-tenant override expires (nil in the Thanos deployment).
	Retention *RetentionRun `json:"retention,omitempty"`
	// Invocations per function (and sweeps) of the local runner.
	Invocations map[string]int64  `json:"invocations"`
	Verify      *cli.VerifyReport `json:"verify"`
	// Thanos is the Thanos-layout deployment's own summary (nil when
	// skipped); its failures are in Failures too, prefixed "thanos: ".
	Thanos *Summary `json:"thanos,omitempty"`
	// StatusPage is the status page written at the end (as `sluice
	// status --html` writes it); empty when it could not be written.
	StatusPage string `json:"statusPage,omitempty"`
	// ThanosVerdict is what Thanos' verifier said of that bucket (set on
	// the Thanos summary), or why it was not run.
	ThanosVerdict string `json:"thanosVerdict,omitempty"`
	// Failures lists every check that did not hold; empty when OK.
	Failures []string      `json:"failures"`
	Elapsed  time.Duration `json:"elapsed"`
}

// OK reports whether every check held.
func (s *Summary) OK() bool { return len(s.Failures) == 0 }

// TenantSummary is one tenant's story.
type TenantSummary struct {
	Tenant            string `json:"tenant"`
	ReplicationFactor int    `json:"replicationFactor"`
	// Uploaded counts the generated blocks, all 2h (level 0).
	Uploaded int `json:"uploaded"`
	// After counts blocks by level and state at the end.
	After map[int]map[protocol.BlockState]int `json:"after"`
	// Live lists the live blocks at the end.
	Live []LiveBlock `json:"live"`
	// Groups run, with every version's partitions.
	Groups     []GroupRun `json:"groups"`
	Versions   int        `json:"versions"`
	Partitions int        `json:"partitions"`
	// Violations of I2–I4 for this tenant.
	Violations  int          `json:"violations"`
	Equivalence equiv.Report `json:"equivalence"`
	// Metrics are what the tenant's metrics said at the end.
	Metrics TenantMetrics `json:"metrics"`
}

// RetentionRun is the archive tenant's story: blocks that ended long
// ago, uploaded, expired by the retention its override sets, deleted.
type RetentionRun struct {
	Tenant    string        `json:"tenant"`
	Retention time.Duration `json:"retention"`
	Uploaded  int           `json:"uploaded"`
	Deleted   int           `json:"deleted"`
	// Marked counts those deleted after a deletion mark, as every
	// retired block is.
	Marked int `json:"marked"`
}

// archiveTenant's blocks end archiveAge before the demo's; its override
// keeps them archiveRetention.
const (
	archiveTenant    = "archive"
	archiveAge       = 40 * 24 * time.Hour
	archiveRetention = 30 * 24 * time.Hour
	archiveBlocks    = 2
)

// LiveBlock is a block live at the end.
type LiveBlock struct {
	ID         string `json:"id"`
	Level      int    `json:"level"`
	MinT, MaxT int64
	Series     uint64 `json:"series"`
	Samples    uint64 `json:"samples"`
	ProducedBy string `json:"producedBy"`
}

// GroupRun is one group and the versions it ran.
type GroupRun struct {
	Group      string `json:"group"`
	Level      int    `json:"level"`
	RangeStart int64  `json:"rangeStart"`
	RangeEnd   int64  `json:"rangeEnd"`
	Versions   int64  `json:"versions"`
	// Partitions per version, in version order.
	Partitions []int  `json:"partitions"`
	Sources    int    `json:"sources"`
	State      string `json:"state"`
}

// CallerRequests is what one function or schedule asked of AWS.
type CallerRequests struct {
	Caller   string `json:"caller"`
	Requests int    `json:"requests"`
	// Operations counts them by "service operation".
	Operations map[string]int `json:"operations,omitempty"`
}

// Request is one AWS operation's count per phase.
type Request struct {
	Operation string `json:"operation"`
	Upload    int    `json:"upload"`
	Pipeline  int    `json:"pipeline"`
	Checks    int    `json:"checks"`
}

// Total is the operation's count over every phase.
func (r Request) Total() int { return r.Upload + r.Pipeline + r.Checks }

// run is one demo run's state.
type run struct {
	opts    Options
	out     io.Writer
	counter *awsenv.RequestCounter
	clients *awsenv.Clients // counted
	quiet   *awsenv.Clients // not counted: progress and housekeeping
	dep     provision.Deployment
	cfg     config.Config
	inputs  map[string][]string // tenant → generated block dirs
	sum     *Summary
	snaps   [][]awsenv.Count
	step    int
	start   time.Time
	// thanos: this is the Thanos-layout deployment (thanos.go).
	thanos bool
}

const steps = 6

// Run runs the scenario. An error means the demo could not run at all
// (the emulator is down); a scenario that ran but failed a check returns
// a Summary whose OK is false.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	opts.defaults()
	if err := provision.ValidatePrefix(opts.Prefix); err != nil {
		return nil, cli.Usagef("%v", err)
	}
	if err := provision.ValidatePrefix(thanosOptions(opts).Prefix); !opts.SkipThanos && err != nil {
		return nil, cli.Usagef("the Thanos deployment's %v", err)
	}
	if opts.Hours < 2 || opts.Hours%2 != 0 {
		return nil, cli.Usagef("hours %d: want a positive multiple of 2", opts.Hours)
	}
	if err := cli.ProbeEndpoint(ctx, opts.Endpoint); err != nil {
		return nil, err
	}
	r, err := newRun(ctx, opts)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(r.out, "Sluice demo: %d tenants × %dh of 2h blocks, compacted race-free against the emulator at %s\n\n",
		len(opts.Tenants), opts.Hours, opts.Endpoint)
	// The Thanos deployment runs beside the main one (each its own bucket,
	// table, queues and pipeline; the two mostly wait on delays), its
	// report held back and printed after the main one's.
	var thanos *run
	var thanosOut bytes.Buffer
	thanosDone := make(chan error, 1)
	if !opts.SkipThanos {
		to := thanosOptions(opts)
		to.Out, to.Progress = &thanosOut, nil
		if thanos, err = newRun(ctx, to); err != nil {
			return nil, err
		}
		thanos.thanos = true
		go func() { thanosDone <- thanos.scenario(ctx) }()
	}
	err = r.scenario(ctx)
	if thanos != nil {
		terr := <-thanosDone
		if err == nil && terr != nil {
			err = fmt.Errorf("the Thanos deployment: %w", terr)
		}
	}
	if err != nil {
		return nil, err
	}
	if thanos != nil {
		fmt.Fprintf(r.out, "\nA THANOS BUCKET: the same pipeline over a single-tenant (Thanos) layout, run beside the first\n\n")
		_, _ = io.Copy(r.out, &thanosOut)
		r.sum.Thanos = thanos.sum
		for _, f := range thanos.sum.Failures {
			r.sum.Failures = append(r.sum.Failures, "thanos: "+f)
		}
	}
	r.sum.Elapsed = time.Since(r.start)
	r.result()
	return r.sum, nil
}

func newRun(ctx context.Context, opts Options) (*run, error) {
	r := &run{opts: opts, out: opts.Out, counter: awsenv.NewRequestCounter(), inputs: map[string][]string{},
		sum: &Summary{Prefix: opts.Prefix, Endpoint: opts.Endpoint, Failures: []string{}}, start: time.Now()}
	var err error
	if r.clients, err = awsenv.Load(ctx, awsenv.Options{Endpoint: opts.Endpoint, Counter: r.counter}); err != nil {
		return nil, err
	}
	if r.quiet, err = awsenv.Load(ctx, awsenv.Options{Endpoint: opts.Endpoint}); err != nil {
		return nil, err
	}
	return r, nil
}

// scenario is one deployment's run: provision, generate, upload,
// compact, check, report.
func (r *run) scenario(ctx context.Context) error {
	if err := r.provision(ctx); err != nil {
		return err
	}
	if !r.opts.Keep {
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = remove(ctx, r.quiet, spec.Default(r.opts.Prefix))
		}()
	}
	if err := r.generate(); err != nil {
		return err
	}
	r.snapshot() // nothing counted before the upload belongs to a phase
	if err := r.upload(ctx); err != nil {
		return err
	}
	r.snapshot()
	if err := r.compact(ctx); err != nil {
		return err
	}
	r.snapshot()
	if err := r.check(ctx); err != nil {
		return err
	}
	r.snapshot()
	if r.thanos {
		r.thanosVerdict(ctx)
	}
	r.statusPage(ctx)
	r.requests()
	r.sum.Elapsed = time.Since(r.start)
	r.report()
	return nil
}

func (r *run) stepf(name, format string, args ...any) {
	r.step++
	fmt.Fprintf(r.out, "[%d/%d] %-10s %s\n", r.step, steps, name, fmt.Sprintf(format, args...))
}

func (r *run) detailf(format string, args ...any) {
	fmt.Fprintf(r.out, "%17s %s\n", "", fmt.Sprintf(format, args...))
}

func (r *run) fail(format string, args ...any) {
	r.sum.Failures = append(r.sum.Failures, fmt.Sprintf(format, args...))
}

func (r *run) snapshot() { r.snaps = append(r.snaps, r.counter.Snapshot()) }

// provision removes what an earlier demo left under the prefix, then
// provisions the deployment from the resource spec, with queue visibility
// timeouts sized for a laptop, and writes the env file.
func (r *run) provision(ctx context.Context) error {
	start := time.Now()
	res := spec.Default(r.opts.Prefix)
	if err := remove(ctx, r.quiet, res); err != nil {
		return fmt.Errorf("remove the previous demo's resources: %w", err)
	}
	for i := range res.Queues {
		res.Queues[i].VisibilityTimeout = 60 * time.Second
	}
	d, err := provision.Provision(ctx, r.quiet, res)
	if err != nil {
		return err
	}
	r.dep = d
	if r.cfg, err = localrun.Config(d); err != nil {
		return err
	}
	r.configure(&r.cfg)
	vars := d.Env()
	vars["AWS_ENDPOINT_URL"] = r.opts.Endpoint
	if r.thanos {
		maps.Copy(vars, thanosEnv())
	}
	if err := os.MkdirAll(filepath.Dir(r.opts.EnvFile), 0o755); err != nil {
		return err
	}
	if err := cli.WriteEnvFile(r.opts.EnvFile, vars, "Settings of the Sluice demo deployment, written by 'make demo'.\n"+
		"Use them with: source "+r.opts.EnvFile+" && sluice status\n(or: sluice --env-file "+r.opts.EnvFile+" status)"); err != nil {
		return err
	}
	if !r.thanos {
		// The archive tenant's retention, as an operator sets it: one
		// line of the runtime overrides, no redeploy.
		body := fmt.Sprintf("overrides:\n  %s:\n    retention: %dd\n", archiveTenant, int(archiveRetention.Hours()/24))
		if _, err := r.quiet.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(r.cfg.Bucket),
			Key: aws.String(overrides.Key(r.cfg.Layout)), Body: strings.NewReader(body)}); err != nil {
			return fmt.Errorf("write the runtime overrides: %w", err)
		}
	}
	r.stepf("provision", "%s: versioned bucket, state table, 4 queues with dead-letter queues (%s)", r.opts.Prefix, since(start))
	if r.cfg.Policy.UploadWait > 0 {
		r.detailf("a range holding uploads is compacted %s after its newest upload, so that late replicas join its first version (SLUICE_UPLOAD_WAIT, 10m in AWS)", r.cfg.Policy.UploadWait)
	}
	if !r.thanos {
		r.detailf("runtime overrides in %s: tenant %s keeps blocks %d days", overrides.Key(r.cfg.Layout), archiveTenant, int(archiveRetention.Hours()/24))
	}
	if r.thanos {
		r.detailf("single-tenant layout (blocks at <ULID>/, as Thanos writes them), replica label %q, settings in %s", thanosReplicaLabel, r.opts.EnvFile)
	}
	return nil
}

// configure is the pipeline's configuration on top of the deployment's:
// a short deletion delay, and a partition limit that splits 12h groups.
func (r *run) configure(c *config.Config) {
	c.DeletionDelay = r.opts.DeletionDelay
	c.OrphanDelay = 10 * time.Second
	c.Policy.UploadWait = r.opts.UploadWait
	if c.Policy.UploadWait < 0 {
		c.Policy.UploadWait = planning.NoUploadWait
	}
	if r.thanos {
		thanosConfig(c)
		return
	}
	c.Policy.MaxSeriesPerPartition = r.opts.MaxSeriesPerPartition
	// The multi-tenant deployment keeps each tenant's bucket index, as a
	// Mimir bucket needs, looked at every 5 seconds here (15 minutes in
	// AWS), an unchanged one kept while it will be younger than 13 seconds
	// at the next look (40 minutes, scaled): the demo settles only once
	// every index is current.
	c.BucketIndex = bucketindex.Mimir
	c.BucketIndexInterval = 5 * time.Second
	c.BucketIndexMaxAge = 13 * time.Second
	// The archive tenant's retention (an override) is applied every 5
	// seconds here, hourly in AWS.
	c.RetentionInterval = 5 * time.Second
}

// demoStart is midnight UTC two days ago: every range has closed.
func demoStart() time.Time {
	return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -2)
}

func (r *run) generate() error {
	start := time.Now()
	if err := os.RemoveAll(r.opts.WorkDir); err != nil {
		return err
	}
	from := demoStart()
	if r.thanos {
		return r.generateThanos(from, start)
	}
	var parts []string
	for i, t := range r.opts.Tenants {
		bs, err := blockgen.Generate(filepath.Join(r.opts.WorkDir, "in", t.Name), blockgen.Options{
			Tenant: t.Name, Start: from, Blocks: r.opts.Hours / 2, Series: r.opts.Series, SamplesPerSeries: r.opts.SamplesPerSeries,
			ReplicationFactor: t.ReplicationFactor, Histograms: true, ThanosFiles: true, Seed: int64(i + 1),
			ExternalLabels: map[string]string{"cluster": "demo", "tenant": t.Name},
		})
		if err != nil {
			return err
		}
		for _, b := range bs {
			r.inputs[t.Name] = append(r.inputs[t.Name], b.Dir)
		}
		parts = append(parts, fmt.Sprintf("%s %d blocks (RF %d)", t.Name, len(bs), max(t.ReplicationFactor, 1)))
		r.sum.Tenants = append(r.sum.Tenants, TenantSummary{Tenant: t.Name, ReplicationFactor: max(t.ReplicationFactor, 1), Uploaded: len(bs)})
	}
	old, err := blockgen.Generate(filepath.Join(r.opts.WorkDir, "in", archiveTenant), blockgen.Options{
		Tenant: archiveTenant, Start: from.Add(-archiveAge), Blocks: archiveBlocks, Series: 20, ThanosFiles: true, Seed: 99,
		ExternalLabels: map[string]string{"cluster": "demo", "tenant": archiveTenant},
	})
	if err != nil {
		return err
	}
	for _, b := range old {
		r.inputs[archiveTenant] = append(r.inputs[archiveTenant], b.Dir)
	}
	r.sum.Retention = &RetentionRun{Tenant: archiveTenant, Retention: archiveRetention, Uploaded: len(old)}
	parts = append(parts, fmt.Sprintf("%s %d blocks ending %d days earlier", archiveTenant, len(old), int(archiveAge.Hours()/24)))
	r.stepf("generate", "%s: %d series each (counters, gauges, native histograms), %s → %s (%s)",
		strings.Join(parts, ", "), r.opts.Series, from.Format("2006-01-02 15:04"),
		from.Add(time.Duration(r.opts.Hours)*time.Hour).Format("2006-01-02 15:04"), since(start))
	return nil
}

// upload ships every block, tenants interleaved in shuffled order, as
// `sluice upload` does, then sends some S3 notifications a second time.
func (r *run) upload(ctx context.Context) error {
	var all []string
	owner := map[string]string{}
	for t, dirs := range r.inputs {
		for _, d := range dirs {
			all = append(all, d)
			owner[d] = t
		}
	}
	sort.Strings(all)
	rng := rand.New(rand.NewPCG(r.opts.Seed, 0x5eed))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	blocks, err := cli.CheckBlockDirs(all)
	if err != nil {
		return err
	}
	for i := range blocks {
		blocks[i].Tenant = owner[blocks[i].Dir]
	}
	sum, err := cli.UploadBlocks(ctx, r.clients.S3, blocks, cli.UploadOptions{Bucket: r.cfg.Bucket, Layout: r.cfg.Layout, Progress: r.opts.Progress})
	if err != nil {
		return err
	}
	r.sum.Uploaded = sum.Uploaded
	r.stepf("upload", "%d blocks in shuffled order (seed %d), files first and meta.json last, as 'sluice upload' does:",
		sum.Uploaded, r.opts.Seed)
	r.detailf("%d files, %s in %s", sum.Files, cli.HumanBytes(sum.Bytes), sum.Elapsed.Round(100*time.Millisecond))
	keys, err := r.duplicateNotifications(ctx)
	if err != nil {
		return err
	}
	r.sum.Duplicated = len(keys)
	r.detailf("sent %d S3 notifications twice (the planner must not register or compact those blocks twice):", len(keys))
	for _, k := range keys {
		r.detailf("  %s", k)
	}
	return nil
}

// duplicateNotifications re-sends the bodies of some ObjectCreated
// notifications waiting in block-events, as S3's at-least-once delivery
// may, and puts the originals back.
func (r *run) duplicateNotifications(ctx context.Context) ([]string, error) {
	url := r.dep.QueueURLs[spec.BlockEvents]
	var keys []string
	var handles []*string
	defer func() {
		for _, h := range handles {
			_, _ = r.quiet.SQS.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(url), ReceiptHandle: h, VisibilityTimeout: 0})
		}
	}()
	for tries := 0; len(keys) < r.opts.Duplicates && tries < 5; tries++ {
		out, err := r.quiet.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 30})
		if err != nil {
			return nil, fmt.Errorf("receive notifications: %w", err)
		}
		for _, m := range out.Messages {
			handles = append(handles, m.ReceiptHandle)
			key, ok := metaKeyOf(aws.ToString(m.Body))
			if !ok || len(keys) >= r.opts.Duplicates {
				continue
			}
			if _, err := r.clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: m.Body}); err != nil {
				return nil, fmt.Errorf("re-send a notification: %w", err)
			}
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// The sweep runs every sweepInterval: deletions come at most that long
// after the deletion delay. Settle restarts the runner, and so its timers,
// whenever the queues go quiet for settleQuiet while work is still due
// (blocks waiting out the deletion delay), and runs every timer that is
// due before each restart, so due work is found however the two compare.
const (
	sweepInterval = 2 * time.Second
	settleQuiet   = 3 * time.Second
)

// compact runs the pipeline until it settles, showing progress.
func (r *run) compact(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(r.opts.LogFile), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(r.opts.LogFile)
	if err != nil {
		return err
	}
	defer logf.Close()
	logger := slog.New(slog.NewJSONHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p, err := localrun.New(r.clients, r.dep, localrun.Options{
		Logger: logger, Configure: r.configure, SweepInterval: sweepInterval, Owner: "demo",
	})
	if err != nil {
		return err
	}
	r.stepf("compact", "planner, compact, cleaner and uploader run locally, as Lambda would, until nothing is left to do")
	start := time.Now()
	store := records.NewStore(r.quiet.DynamoDB, r.cfg.Table, slog.New(slog.DiscardHandler))
	prog := newProgress(r.opts.Progress, r.sum.Uploaded)
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if st, err := r.state(ctx, store, false); err == nil {
					prog.update(st)
				}
			}
		}
	}()
	err = p.Settle(ctx, settleQuiet, r.opts.Timeout, func(ctx context.Context) (bool, error) {
		st, err := r.state(ctx, store, true)
		if err != nil {
			return false, err
		}
		return st.settled(), nil
	})
	close(stop)
	<-polled
	prog.finish()
	stats := p.Runner.Stats()
	r.sum.Invocations = map[string]int64{}
	for name, s := range stats {
		r.sum.Invocations[name] = s.Invocations
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		why := "the last look failed"
		if st, serr := r.state(ctx, store, true); serr == nil {
			why = st.String()
		}
		r.fail("the pipeline did not settle: %v (%s)", err, why)
		r.detailf("did NOT settle within %s: %v (%s)", r.opts.Timeout, err, why)
		return nil
	}
	r.sum.Settled = true
	jobs := stats[string(spec.Compact)]
	r.detailf("settled in %s: %d compaction job(s), %d planner, %d cleaner and %d uploader invocation(s), %d sweep(s); logs in %s",
		since(start), jobs.Messages, stats[string(spec.Planner)].Invocations, stats[string(spec.Cleaner)].Invocations,
		stats[string(spec.Uploader)].Invocations, stats["sweep"].Invocations, r.opts.LogFile)
	if r.cfg.BucketIndex != "" {
		if st, err := r.state(ctx, store, true); err == nil {
			var parts []string
			for _, t := range r.opts.Tenants {
				parts = append(parts, fmt.Sprintf("%s/%s lists %d", t.Name, bucketindex.File, st.indexed[t.Name]))
			}
			r.detailf("bucket index (Mimir's format), from the records: %s: exactly the blocks a store-gateway may query", strings.Join(parts, ", "))
		}
	}
	return nil
}

// state is the deployment's progress, read from the table.
type state struct {
	uploads, retired int // level-0 blocks, and those deleted
	transitional     int // CLAIMED, PENDING, RETIRING, or LIVE unpublished
	groups, finished int
	running          int // partitions leased
	live             int
	// staleIndexes counts tenants whose bucket index does not list
	// exactly the blocks a reader may query (when the deployment keeps one).
	staleIndexes int
	indexed      map[string]int // tenant → blocks its bucket index lists
	// unexpired counts the archive tenant's blocks not deleted yet.
	unexpired int
}

// String says what is left, for a deployment that did not settle.
func (s state) String() string {
	return fmt.Sprintf("%d block(s) in transition, %d of %d group(s) finished, %d stale bucket index(es), %d expired block(s) not deleted",
		s.transitional, s.finished, s.groups, s.staleIndexes, s.unexpired)
}

func (s state) settled() bool {
	return s.transitional == 0 && s.groups == s.finished && s.groups > 0 && s.staleIndexes == 0 && s.unexpired == 0
}

// state reads the deployment's progress from one projection of each
// tenant's blocks (no meta.json: it runs every second, against the one
// emulator the pipeline uses too); withIndex also reads every
// tenant's bucket index (what settling waits for, not the progress bar's
// once-a-second poll: the emulator serves both deployments, one request
// at a time).
func (r *run) state(ctx context.Context, st *records.Store, withIndex bool) (state, error) {
	s := state{indexed: map[string]int{}}
	if rr := r.sum.Retention; rr != nil {
		blocks, err := st.BlocksView(ctx, rr.Tenant)
		if err != nil {
			return s, err
		}
		s.unexpired = rr.Uploaded
		for _, b := range blocks {
			if b.State == protocol.BlockDeleted {
				s.unexpired--
			}
		}
	}
	for _, t := range r.opts.Tenants {
		blocks, err := st.BlocksView(ctx, t.Name)
		if err != nil {
			return s, err
		}
		if withIndex && r.cfg.BucketIndex != "" {
			n, current, err := r.indexCurrent(ctx, t.Name, blocks)
			if err != nil {
				return s, err
			}
			s.indexed[t.Name] = n
			if !current {
				s.staleIndexes++
			}
		}
		for _, b := range blocks {
			if b.Level == 0 {
				s.uploads++
				if b.State == protocol.BlockDeleted {
					s.retired++
				}
			}
			switch b.State {
			case protocol.BlockClaimed, protocol.BlockPending, protocol.BlockRetiring:
				s.transitional++
			case protocol.BlockLive:
				s.live++
				if !b.Published {
					s.transitional++
				}
			}
		}
		groups, err := st.TenantGroups(ctx, t.Name)
		if err != nil {
			return s, err
		}
		for _, g := range groups {
			s.groups++
			if !g.State.Unfinished() {
				s.finished++
			}
			if g.State == protocol.GroupPlanned {
				parts, err := st.Partitions(ctx, t.Name, g.Key, g.Version)
				if err != nil {
					return s, err
				}
				for _, p := range parts {
					if p.State == protocol.PartitionRunning {
						s.running++
					}
				}
			}
		}
	}
	return s, nil
}

// indexCurrent reads a tenant's bucket index as a Mimir store-gateway does
// and says whether it lists exactly the blocks a reader may query.
func (r *run) indexCurrent(ctx context.Context, tenant string, blocks []records.Block) (listed int, current bool, err error) {
	key := r.cfg.Layout.TenantPrefix(tenant) + bucketindex.File
	res, err := r.quiet.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(r.cfg.Bucket), Key: aws.String(key)})
	if s3errors.IsNotFound(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", key, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", key, err)
	}
	idx, err := bucketindex.Decode(body)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", key, err)
	}
	want := map[string]bool{}
	for _, b := range blocks {
		if bucketindex.Visible(b) {
			want[b.ID] = true
		}
	}
	for _, b := range idx.Blocks {
		if !want[b.ID.String()] {
			return len(idx.Blocks), false, nil
		}
	}
	return len(idx.Blocks), len(idx.Blocks) == len(want), nil
}

// remove deletes a deployment's queues, table and bucket if they exist.
func remove(ctx context.Context, c *awsenv.Clients, res spec.Resources) error {
	var errs []error
	for _, q := range res.Queues {
		for _, name := range []string{res.QueueName(q), res.DLQName(q)} {
			out, err := c.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
			if err != nil {
				var ne *sqstypes.QueueDoesNotExist
				if !errors.As(err, &ne) && !strings.Contains(err.Error(), "NonExistentQueue") {
					errs = append(errs, err)
				}
				continue
			}
			if _, err := c.SQS.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, removeTable(ctx, c, res.TableName()), removeBucket(ctx, c, res.BucketName()))
	return errors.Join(errs...)
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }
