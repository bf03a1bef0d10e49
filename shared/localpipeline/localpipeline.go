// Package localpipeline runs Sluice's whole pipeline in one process: the
// four handlers of shared/pipeline behind the SQS event source
// (shared/eventsource), fed from a deployment's queues, with the cleaner's
// sweep on a timer — what Lambda, its event source mappings and the
// EventBridge schedule do in AWS.
//
// `sluice run` drives a deployment through it (the emulator's, or AWS's);
// the demo, the CLI's tests, the end-to-end tests, the race replays and
// the chaos run do too (localstack/localrun adapts a provisioned
// deployment). Every DynamoDB write and SQS send goes through
// shared/awslimits, so a request AWS would refuse fails here too.
package localpipeline

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/awslimits"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
)

// Options tune the local pipeline. Zero values mean the documented default.
type Options struct {
	// Logger receives every handler's logs; default slog.Default().
	Logger *slog.Logger
	// Configure changes the configuration loaded from the deployment
	// (test-sized delays, a policy, a layout).
	Configure func(*config.Config)
	// Hook observes and orders protocol steps (tests/races, tests/chaos).
	Hook pipeline.Hook
	// Now is the handlers' clock; default time.Now.
	Now func() time.Time
	// SweepInterval is how often the cleaner's sweep runs; default 2s.
	SweepInterval time.Duration
	// Owner names this process in leases; default "local".
	Owner string
	// S3 replaces the S3 client the handlers use (fault injection).
	S3 pipeline.S3
	// Wrap, when set, wraps each handler (fault injection, counting).
	Wrap func(name string, h eventsource.Handler) eventsource.Handler
	// RetryAfter brings failed messages back after this long instead of
	// after the queue's visibility timeout (eventsource.Source.RetryAfter);
	// zero is Lambda's behaviour.
	RetryAfter time.Duration
}

// Pipeline is the running pipeline's parts.
type Pipeline struct {
	Deps   *pipeline.Deps
	Runner *eventsource.Runner
	// Refused counts the requests refused for breaking an AWS limit the
	// emulator does not enforce (awslimits): the handlers' DynamoDB writes
	// and SQS sends go through its checks, as they would meet AWS's.
	Refused *awslimits.Refusals
	opts    Options
}

// QueueURL is the URL of queue id in cfg.
func QueueURL(cfg config.Config, id spec.QueueID) string {
	switch id {
	case spec.BlockEvents:
		return cfg.Queues.BlockEvents
	case spec.CompactionJobs:
		return cfg.Queues.CompactionJobs
	case spec.CleanerEvents:
		return cfg.Queues.CleanerEvents
	case spec.BlockOps:
		return cfg.Queues.BlockOps
	}
	return ""
}

// New wires the four handlers to the queues of the deployment cfg names;
// res gives each queue's event source settings (batch size, concurrency),
// as the CDK stack does.
func New(clients *awsenv.Clients, cfg config.Config, res spec.Resources, opts Options) (*Pipeline, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 2 * time.Second
	}
	if opts.Owner == "" {
		opts.Owner = "local"
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	deps := pipeline.NewDeps(cfg, clients, opts.Logger, opts.Owner)
	refused := &awslimits.Refusals{}
	deps.Store = records.NewStore(awslimits.DynamoDB{DynamoDBAPI: clients.DynamoDB, Refused: refused}, cfg.Table, opts.Logger)
	// A handler's send wakes the poller of the queue it sent to, as a
	// long poll would see it (r is set below, before anything runs).
	var r *eventsource.Runner
	deps.Send.SQS = wakingSQS{SQS: awslimits.SQS{SQSSender: clients.SQS, Refused: refused}, wake: func(url string) { r.Wake(url) }}
	deps.Hook, deps.Now = opts.Hook, opts.Now
	if opts.S3 != nil {
		deps.S3 = opts.S3
	}
	wrap := opts.Wrap
	if wrap == nil {
		wrap = func(_ string, h eventsource.Handler) eventsource.Handler { return h }
	}
	handlers := map[spec.QueueID]eventsource.Handler{
		spec.BlockEvents:    pipeline.Planner{Deps: deps}.Handle,
		spec.CompactionJobs: pipeline.Compact{Deps: deps}.Handle,
		spec.CleanerEvents:  pipeline.Cleaner{Deps: deps}.Handle,
		spec.BlockOps:       pipeline.Uploader{Deps: deps}.Handle,
	}
	var sources []eventsource.Source
	for _, q := range res.Queues {
		url := QueueURL(cfg, q.ID)
		if url == "" {
			return nil, fmt.Errorf("localpipeline: no URL for queue %s", q.ID)
		}
		sources = append(sources, eventsource.Source{
			Name: string(q.Consumer), QueueURL: url, FIFO: q.FIFO,
			BatchSize: q.BatchSize, MaxConcurrency: min(q.MaxConcurrency, 4), RetryAfter: opts.RetryAfter,
			Timeout: res.Function(q.Consumer).Timeout,
			Handler: wrap(string(q.Consumer), handlers[q.ID]),
		})
	}
	r = eventsource.New(clients.SQS, opts.Logger, sources...)
	cleaner := pipeline.Cleaner{Deps: deps}
	r.Every("sweep", opts.SweepInterval, cleaner.Sweep)
	if cfg.BucketIndex != "" {
		r.Every("bucket-index", cfg.BucketIndexInterval, cleaner.BucketIndexes)
	}
	// Retention has a schedule of its own, as in the stack (a pass with
	// no retention set, here or in the overrides, reads nothing more).
	r.Every("retention", cfg.RetentionInterval, cleaner.Retention)
	r.Every("metrics", cfg.MetricsInterval, cleaner.Metrics)
	return &Pipeline{Deps: deps, Runner: r, Refused: refused, opts: opts}, nil
}

// Settle runs the pipeline until done reports true, checking whenever the
// queues have been quiet for quiet; it fails after timeout. Sweeps keep
// running meanwhile, so due deletions and closing ranges happen.
func (p *Pipeline) Settle(ctx context.Context, quiet, timeout time.Duration, done func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		// The runner's timers restart with each RunUntilIdle, which does
		// not wait for them; run each that is due here (the sweep, the
		// bucket index, retention and metrics passes) so that due work —
		// deletions, closed ranges, stale indexes, expired blocks — is
		// found even when quiet is shorter than their intervals, then let
		// what they sent drain before looking. The runner logs failures.
		_ = p.Runner.RunDue(ctx)
		if err := p.Runner.RunUntilIdle(ctx, quiet); err != nil {
			return fmt.Errorf("localpipeline: pipeline did not settle: %w", err)
		}
		ok, err := done(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("localpipeline: pipeline did not settle within %v", timeout)
		}
	}
}

// wakingSQS sends, then wakes the runner's poller of the queue sent to.
type wakingSQS struct {
	messages.SQS
	wake func(queueURL string)
}

func (w wakingSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := w.SQS.SendMessage(ctx, in, opts...)
	if err == nil {
		w.wake(aws.ToString(in.QueueUrl))
	}
	return out, err
}

func (w wakingSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := awslimits.SendBatch(ctx, w.SQS, in, opts...)
	if err == nil && len(out.Successful) > 0 {
		w.wake(aws.ToString(in.QueueUrl))
	}
	return out, err
}
