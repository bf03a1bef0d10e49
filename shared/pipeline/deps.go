// Package pipeline holds Sluice's four handlers — planner, compact, cleaner
// and uploader — each a plain function of (context, events.SQSEvent) that
// returns per-message failures, as Lambda's SQS event source expects.
//
// Handlers execute the protocol of docs/design.md §4: they read records, ask the
// planning policy what to do, and make every state change through
// shared/records, where each is one conditional write or transaction. A
// lost condition is a normal outcome: logged with what it lost to, and the
// message is acknowledged. Only real failures (AWS errors, a malformed
// message) fail the message, so SQS redelivers it and finally moves it to
// the DLQ.
package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/overrides"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/s3errors"
)

// S3 is the part of the S3 client the handlers use.
type S3 interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, opts ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error)
	ListObjectVersions(ctx context.Context, in *s3.ListObjectVersionsInput, opts ...func(*s3.Options)) (*s3.ListObjectVersionsOutput, error)
	CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(ctx context.Context, in *s3.UploadPartInput, opts ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

// Step names a protocol boundary at which a Hook is called: after a read,
// before a conditional write, around an S3 call. Tests pause, order and
// crash handlers there (tests/races, tests/chaos).
type Step string

// Hook is called at every Step with the handler's subject (tenant, group,
// version, partition, block). It may block to order handlers; a non-nil
// error aborts the handler there, as a crash would (the message is not
// acknowledged). A nil Hook costs one comparison.
type Hook func(ctx context.Context, step Step, subject string) error

// Deps are what every handler needs. Build them once per process.
//
// Store is the wiring's one store; a handler reaches it only through its
// records() method, typed as the interface the handler declares beside
// itself (jobRecords, opRecords, plannerRecords, cleanerRecords, and
// versionRecords for the work on a version both planner and cleaner do),
// so each handler's reach into the records is written down and checked by
// the compiler. It is read at every call, not copied at construction:
// tests swap it for a watched store after the handlers are wired.
type Deps struct {
	Config config.Config
	Store  *records.Store
	Send   messages.Sender
	S3     S3
	Logger *slog.Logger
	// Now is the clock (tests skew it); nil means time.Now.
	Now func() time.Time
	// Hook observes protocol steps; nil means none.
	Hook Hook
	// Owner names this process in leases (a Lambda's log stream, a test's
	// worker name); a random suffix is added per job.
	Owner string
	// Overrides caches the per-tenant runtime configuration
	// (shared/overrides); nil means none.
	Overrides *overrides.Cache
	// OpContext, when set, gives each block op of an uploader batch the
	// context it runs under (a test's monitor names the op there); nil
	// means the batch's.
	OpContext func(context.Context, messages.BlockOp) context.Context
}

// overrides is the per-tenant runtime configuration now in force. A bad
// object is logged with the line it fails on, and the last good one stays.
func (d *Deps) overrides(ctx context.Context) overrides.Overrides {
	if d.Overrides == nil {
		return overrides.Overrides{}
	}
	o, err := d.Overrides.Get(ctx, d.now(), d.loadOverrides)
	if err != nil {
		d.Logger.ErrorContext(ctx, "runtime overrides not applied; the last good ones stay in force",
			"key", overrides.Key(d.Config.Layout), "err", err)
	}
	return o
}

// loadOverrides reads the overrides object (ok false when there is none).
func (d *Deps) loadOverrides(ctx context.Context) ([]byte, bool, error) {
	res, err := d.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(d.Config.Bucket), Key: aws.String(overrides.Key(d.Config.Layout))})
	if s3errors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, overrides.MaxBytes+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > overrides.MaxBytes {
		return nil, false, fmt.Errorf("over %d bytes", overrides.MaxBytes)
	}
	return data, true, nil
}

func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// measured returns ctx carrying a metrics batch for one invocation and
// the function that emits it (as EMF log lines, shared/metrics) when the
// invocation ends. Under a context that already carries one (a schedule's
// pass inside an invocation) it adds to that batch and emits nothing.
func (d *Deps) measured(ctx context.Context) (context.Context, func()) {
	if metrics.From(ctx) != nil {
		return ctx, func() {}
	}
	b := metrics.NewBatch(d.Config.Table)
	return metrics.With(ctx, b), func() { b.Emit(context.WithoutCancel(ctx), d.Logger, d.now()) }
}

func (d *Deps) step(ctx context.Context, s Step, subject string) error {
	if d.Hook == nil {
		return nil
	}
	if err := d.Hook(ctx, s, subject); err != nil {
		return fmt.Errorf("step %s (%s): %w", s, subject, err)
	}
	return nil
}

// eachMessage runs fn for every message of a batch and reports the ones
// that failed, so SQS redelivers only those (ReportBatchItemFailures). A
// panic fails its message, not the process. For FIFO queues Lambda's
// contract is that messages after a failed one in the same group are
// returned too; the event source handles that.
func eachMessage(ctx context.Context, logger *slog.Logger, fn string, ev events.SQSEvent, handle func(context.Context, events.SQSMessage) error) events.SQSEventResponse {
	var resp events.SQSEventResponse
	failedGroups := map[string]bool{}
	for _, m := range ev.Records {
		group := m.Attributes["MessageGroupId"]
		if group != "" && failedGroups[group] {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			continue
		}
		if err := safely(ctx, m, handle); err != nil {
			logger.ErrorContext(ctx, "message failed; SQS will redeliver it, then move it to the DLQ",
				"function", fn, "message", m.MessageId, "receive", m.Attributes["ApproximateReceiveCount"], "err", err)
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			if group != "" {
				failedGroups[group] = true
			}
		}
	}
	return resp
}

func safely(ctx context.Context, m events.SQSMessage, handle func(context.Context, events.SQSMessage) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return handle(ctx, m)
}
