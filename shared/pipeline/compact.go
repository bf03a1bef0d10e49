package pipeline

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/blockstore"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/metrics"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
)

// Compact runs compaction jobs (docs/design.md §4.2): lease, read sources by
// their recorded VersionIds, compact one partition, upload with
// If-None-Match, commit fenced on the group version and the lease.
type Compact struct{ *Deps }

// records is the store as this handler uses it.
func (c Compact) records() jobRecords { return c.Store }

// jobRecords is what a compaction job reads and writes of the records:
// its version, sources and stream, and the lease, commit and failure of
// its partitions. Nothing else — a job never touches blocks' states.
type jobRecords interface {
	GetBlocks(ctx context.Context, tenant string, ids []string) ([]records.Block, error)
	GetStream(ctx context.Context, tenant, id string) (records.StreamRecord, bool, error)
	Partitions(ctx context.Context, tenant string, g planning.GroupKey, v int64) ([]records.Partition, error)
	Lease(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int, owner string, now, leaseUntil time.Time, maxFailures int) (records.JobView, error)
	LeaseAll(ctx context.Context, tenant string, g planning.GroupKey, v int64, parts []records.Partition, owner string, now, leaseUntil time.Time, maxFailures int) ([]int, error)
	ReadJob(ctx context.Context, tenant string, g planning.GroupKey, v int64, p int) (records.JobView, error)
	CommitAll(ctx context.Context, tenant string, g planning.GroupKey, v int64, owner string, parts []records.Committed, now time.Time) error
	RecordFailureAll(ctx context.Context, tenant string, g planning.GroupKey, v int64, ps []int, owner string, f records.Failure, now time.Time) error
}

// JobGCPercent is the garbage collector's target (Go's GOGC) in a process
// that runs compaction jobs (SetJobGCTarget), unless GOGC is set in its
// environment: the
// heap may grow to 1.5 × what is live between collections, where Go's
// default lets it double. Most of a job's live heap is its outputs' part
// buffers, which hold no pointers, so a collection costs little marking;
// what a bigger target buys is garbage — every chunk read, series entry
// and label set — taking fresh memory, whose first-touch page faults were
// a third of a job's CPU. Measured by make bench-scale (500k series,
// 2026-12-05, this change against f435f9b): direct jobs 81 → 67 CPU-seconds,
// split mode 121 → 101, peak RSS 799 → 723 MiB; 25 was no cheaper than
// 50 (docs/block-engine.md, "Fresh memory").
const JobGCPercent = 50

// SetJobGCTarget sets the process's collector target to JobGCPercent unless
// the environment sets GOGC. The compact function calls it at start, not
// its handler: the setting is the whole process's, and a process that runs
// other work beside jobs (a test harness, a local pipeline) keeps its own.
func SetJobGCTarget() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(JobGCPercent)
	}
}

// Handle processes a batch from the compaction-jobs queue.
func (c Compact) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, emit := c.measured(ctx)
	defer emit()
	return eachMessage(ctx, c.Logger, "compact", ev, func(ctx context.Context, m events.SQSMessage) error {
		msg, err := messages.Decode(m.Body)
		if err != nil {
			return fmt.Errorf("compact: message %s: %w", m.MessageId, err)
		}
		job, ok := msg.(messages.Job)
		if !ok {
			return fmt.Errorf("compact: unexpected %T on the compaction-jobs queue", msg)
		}
		return c.Run(ctx, job)
	}), nil
}

// Run executes one job: its partition, or — for a split version — every
// partition of the version it can lease, written in one pass over the
// split block (so the block is read once). A job that finds its
// partitions done, leased by a live worker, or its version no longer
// current acknowledges and stops.
//
// A job whose own work fails — a source it cannot read, a compaction
// error, an output that is not deterministic, running out of its
// function's time — records the failed attempt (fenced on its leases),
// tells the cleaner and acknowledges: the cleaner retries it or, after
// MaxJobAttempts failures, quarantines. A failure to reach AWS is
// returned, and SQS redelivers the job.
func (c Compact) Run(ctx context.Context, job messages.Job) error {
	g, err := planning.ParseGroupKey(job.Group)
	if err != nil {
		return err
	}
	ref := protocol.PartitionRef{VersionRef: protocol.VersionRef{Tenant: job.Tenant, Group: g, Version: job.Version}, Partition: job.Partition}.String()
	log := c.Logger.With(logattr.Partition(job.Tenant, g, job.Version, job.Partition))
	owner := c.owner()
	now := c.now()
	if err := c.step(ctx, "compact.before-lease", ref); err != nil {
		return err
	}
	parts, view, err := c.lease(ctx, job, g, owner, now)
	if err != nil {
		if errors.Is(err, records.ErrAttemptsExhausted) {
			log.WarnContext(ctx, "the version's jobs failed too often; not running again, the cleaner quarantines", "err", err)
			return c.Send.Cleaner(ctx, messages.CleanerNote{Tenant: job.Tenant, Group: job.Group, Version: job.Version, Why: "attempts-exhausted", Nonce: owner})
		}
		if records.IsConditionLost(err) {
			log.InfoContext(ctx, "job not taken: partition done, leased by a live worker, or version no longer current", "lost", err)
			return nil
		}
		return err
	}
	if len(parts) == 0 {
		log.InfoContext(ctx, "job not taken: every partition of the split is done or leased by a live worker")
		return nil
	}
	log = log.With("attempt", view.attempt, "owner", owner)
	if len(parts) > 1 {
		log = log.With("partitions", parts)
	}
	log.InfoContext(ctx, "lease taken")
	head := view.Head
	if !view.HeadFound || head.Version != job.Version {
		log.InfoContext(ctx, "version moved on after the lease; stopping")
		return nil
	}
	srcs, err := c.records().GetBlocks(ctx, job.Tenant, head.Sources)
	if err != nil {
		return err
	}
	if len(srcs) != len(head.Sources) {
		return fmt.Errorf("compact %s: %d of %d source records missing", ref, len(head.Sources)-len(srcs), len(head.Sources))
	}
	if err := c.step(ctx, "compact.after-read", ref); err != nil {
		return err
	}
	if f, ok := c.fits(ctx, head, job.Partition, srcs); !ok {
		return c.fail(ctx, job, g, parts, owner, f, log)
	}
	work, stop := c.workContext(ctx)
	started := time.Now()
	var outs []records.Committed
	if g.IsDownsample() {
		outs, err = c.downsample(work, head, parts, srcs, log)
	} else {
		outs, err = c.compact(work, head, view.Stream, parts, srcs, log)
	}
	f, counted := c.classify(ctx, work, err)
	stop()
	if err != nil {
		if !counted {
			return fmt.Errorf("compact %s: %w", ref, err)
		}
		return c.fail(ctx, job, g, parts, owner, f, log)
	}
	if left, ok := c.timeLeft(ctx); ok && left < c.Config.DeadlineMargin {
		return c.fail(ctx, job, g, parts, owner, records.Failure{Kind: records.FailureDeadline,
			Message: fmt.Sprintf("finished %v before the function's deadline, inside the %v margin: not committing", left.Round(time.Second), c.Config.DeadlineMargin)}, log)
	}
	if err := c.step(ctx, "compact.before-commit", ref); err != nil {
		return err
	}
	for i := range outs {
		if out := outs[i].Output; out != nil {
			outs[i].Ranges = c.Config.Policy.MemberRanges(out.Stream, out.Level, out.MinT, out.MaxT)
		}
	}
	if err := c.records().CommitAll(ctx, job.Tenant, g, job.Version, owner, outs, c.now()); err != nil {
		if !records.IsConditionLost(err) {
			return err
		}
		// A loser deletes nothing itself: a winner may have adopted its
		// objects. The cleaner sweeps orphans once the version is final.
		log.WarnContext(ctx, "commit lost: version superseded or lease taken over", "lost", err)
		return c.Send.Cleaner(ctx, messages.CleanerNote{Tenant: job.Tenant, Group: job.Group, Version: job.Version, Why: "lost-commit", Nonce: owner})
	}
	m := metrics.From(ctx)
	for _, o := range outs {
		log.InfoContext(ctx, "partition committed", "outputPartition", o.Partition, "output", outputULID(head, o.Partition).String(), "empty", o.Output == nil)
		m.Add(metrics.Compactions, 1, job.Tenant)
		if o.Output != nil {
			m.Add(metrics.SeriesCompacted, float64(o.Output.Series), job.Tenant)
			m.Add(metrics.SamplesCompacted, float64(o.Output.Samples), job.Tenant)
		}
	}
	m.Add(metrics.JobDuration, time.Since(started).Seconds(), job.Tenant)
	return c.Send.Cleaner(ctx, messages.CleanerNote{Tenant: job.Tenant, Group: job.Group, Version: job.Version, Why: "commit", Nonce: fmt.Sprint(job.Partition)})
}

// lease takes the job's partition, or for a split every partition it can
// (one job writes them all), and returns them with what the job reads
// once it holds them: its head and stream (records.ReadJob), and the
// attempt it runs.
func (c Compact) lease(ctx context.Context, job messages.Job, g planning.GroupKey, owner string, now time.Time) ([]int, leasedJob, error) {
	until := now.Add(c.Config.LeaseDuration)
	if !g.IsSplit() {
		jv, err := c.records().Lease(ctx, job.Tenant, g, job.Version, job.Partition, owner, now, until, c.Config.MaxJobAttempts)
		if err != nil {
			return nil, leasedJob{}, err
		}
		return []int{job.Partition}, leasedJob{JobView: jv, attempt: jv.Partition.Attempt}, nil
	}
	parts, err := c.records().Partitions(ctx, job.Tenant, g, job.Version)
	if err != nil {
		return nil, leasedJob{}, err
	}
	leased, err := c.records().LeaseAll(ctx, job.Tenant, g, job.Version, parts, owner, now, until, c.Config.MaxJobAttempts)
	if err != nil || len(leased) == 0 {
		return nil, leasedJob{}, err
	}
	lj := leasedJob{}
	for _, p := range parts {
		if slices.Contains(leased, p.Index) {
			lj.attempt = max(lj.attempt, p.Attempt+1)
		}
	}
	if lj.JobView, err = c.records().ReadJob(ctx, job.Tenant, g, job.Version, -1); err != nil {
		return nil, leasedJob{}, err
	}
	return leased, lj, nil
}

// leasedJob is what a job read once it held its lease, and the attempt it
// runs.
type leasedJob struct {
	records.JobView
	attempt int
}

// fits sizes the job before it reads anything (planning.Estimate over the
// sources' records, against this function's scratch budget and the time
// it has left). A job that does not fit refuses: FailureDoesNotFit when
// twice as many partitions would fit (the cleaner supersedes the version
// and the planner doubles N), FailureTooBig when no partition count would
// (the cleaner quarantines the group). The time a job may take is the
// smaller of the policy's JobTimeout and what its function has left before
// the deadline margin. Planner and job size with the same
// function; a job refuses only when its own limits are tighter than the
// planner's were.
func (c Compact) fits(ctx context.Context, head records.Group, p int, srcs []records.Block) (records.Failure, bool) {
	pol := c.Config.Policy.Defaults()
	if left, ok := c.timeLeft(ctx); ok && left > c.Config.DeadlineMargin {
		// With less than the margin left the work context is already over
		// and the attempt fails as a deadline one, which is what it is.
		pol.JobTimeout = min(pol.JobTimeout, left-c.Config.DeadlineMargin)
	}
	if head.Key.IsDownsample() {
		// The job reads its member, not the blocks it replaces.
		job, err := downsampleJobOf(head, srcs, p)
		if err != nil {
			return records.Failure{Kind: records.FailureTooBig, Message: err.Error()}, false
		}
		member := candidate(job.src)
		ok, why := pol.Fits(pol.EstimateDownsample(member, job.m))
		if ok {
			return records.Failure{}, true
		}
		if m, more, _ := pol.SizeDownsample(member); more && m > job.m {
			return records.Failure{Kind: records.FailureDoesNotFit, Message: "the downsample of " + job.src.ID + ": " + why + fmt.Sprintf("; %d partitions would fit", m)}, false
		}
		return records.Failure{Kind: records.FailureTooBig, Message: "the downsample of " + job.src.ID + ": " + why}, false
	}
	cands := make([]planning.Candidate, len(srcs))
	for i, b := range srcs {
		cands[i] = candidate(b)
	}
	if head.Key.IsSplit() && len(cands) == 1 {
		// One job reads the block once and writes every partition: more
		// partitions would not make it smaller.
		if ok, why := pol.Fits(pol.EstimateSplit(cands[0], head.Partitions)); !ok {
			return records.Failure{Kind: records.FailureTooBig, Message: "the split of " + cands[0].ID + ": " + why}, false
		}
		return records.Failure{}, true
	}
	ok, why := pol.Fits(pol.Estimate(cands, p, head.Partitions))
	if ok {
		return records.Failure{}, true
	}
	for n := 2 * head.Partitions; n <= pol.MaxPartitions; n *= 2 {
		if more, _ := pol.JobsFit(cands, n); more {
			return records.Failure{Kind: records.FailureDoesNotFit, Message: why + fmt.Sprintf("; %d partitions would fit", n)}, false
		}
	}
	return records.Failure{Kind: records.FailureTooBig, Message: why + fmt.Sprintf("; no partition count up to %d fits (each job reads all of its unpartitioned sources)", pol.MaxPartitions)}, false
}

// timeLeft is how long the function may still run (false: no deadline).
func (c Compact) timeLeft(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(d), true
}

// workContext is the context the job's work runs under: it ends
// DeadlineMargin before the function's deadline, leaving the job the time
// to record its failed attempt.
func (c Compact) workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if left, ok := c.timeLeft(ctx); ok {
		return context.WithTimeout(ctx, left-c.Config.DeadlineMargin)
	}
	return context.WithCancel(ctx)
}

// jobError marks a failure of the job's own work (as opposed to a failure
// to reach AWS): it counts as a failed attempt.
type jobError struct{ err error }

func (e jobError) Error() string { return e.err.Error() }
func (e jobError) Unwrap() error { return e.err }

// classify tells a failed attempt (counted, with its kind and the blamed
// source) from a transient failure to reach AWS (not counted: SQS
// redelivers the job).
func (c Compact) classify(ctx, work context.Context, err error) (records.Failure, bool) {
	if err == nil {
		return records.Failure{}, false
	}
	f := records.Failure{Message: err.Error()}
	var je jobError
	switch {
	case ctx.Err() != nil:
		return f, false // the function itself is stopping
	case errors.Is(work.Err(), context.DeadlineExceeded):
		f.Kind = records.FailureDeadline
		f.Message = fmt.Sprintf("ran out of time %v before the function's deadline: %v", c.Config.DeadlineMargin, err)
	case errors.Is(err, blockstore.ErrNotDeterministic):
		f.Kind = records.FailureNotDeterministic
	default:
		if id, ok := compaction.BlamedSource(err); ok {
			f.Kind, f.Block = records.FailureSource, id.String()
		} else if errors.As(err, new(awsError)) {
			return f, false
		} else if errors.As(err, &je) || errors.Is(err, syscall.ENOSPC) {
			f.Kind = records.FailureOther
		} else {
			return f, false
		}
	}
	return f, true
}

// fail records a failed attempt of the job that leased parts and tells
// the cleaner, which retries them or quarantines; the job message is then
// acknowledged.
func (c Compact) fail(ctx context.Context, job messages.Job, g planning.GroupKey, parts []int, owner string, f records.Failure, log *slog.Logger) error {
	log.ErrorContext(ctx, "job attempt failed", "kind", f.Kind, "blames", f.Block, "err", f.Message)
	metrics.From(ctx).Add(metrics.CompactionFailures, 1, job.Tenant)
	if err := c.records().RecordFailureAll(ctx, job.Tenant, g, job.Version, parts, owner, f, c.now()); err != nil {
		if records.IsConditionLost(err) {
			log.InfoContext(ctx, "the failure was not recorded: the version or the lease moved on", "lost", err)
			return nil
		}
		return err
	}
	return c.Send.Cleaner(ctx, messages.CleanerNote{Tenant: job.Tenant, Group: job.Group, Version: job.Version, Why: "failed", Nonce: owner})
}

func (c Compact) owner() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return c.Owner + "#" + hex.EncodeToString(b[:])
}

// compact downloads the indexes of the sources partitions parts need into
// a scratch directory, compacts them in one pass (CompactMany) with their
// chunks streamed from S3 and each output's chunks streamed to S3, uploads
// each output's index and returns the partitions' commits: each output's
// PENDING record, nil for an empty partition. No chunk touches the disk.
// The scratch directory is removed on every path.
func (c Compact) compact(ctx context.Context, head records.Group, sr *records.StreamRecord, parts []int, srcs []records.Block, log jobLog) ([]records.Committed, error) {
	st, err := c.stream(head, sr, srcs)
	if err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp(c.Config.ScratchDir, "sluice-job-")
	if err != nil {
		return nil, fmt.Errorf("scratch dir: %w", err)
	}
	defer os.RemoveAll(scratch)
	started := time.Now()
	dirs, indexRead, err := c.download(ctx, head, parts, srcs, scratch, log)
	if err != nil {
		return nil, err
	}
	sources, err := newSourceChunks(c.S3, c.Config.Bucket, c.Config.Layout, srcs)
	if err != nil {
		return nil, err
	}
	jobs := make([]compaction.Job, len(parts))
	keys := make([]blockkey.Key, len(parts))
	sinks := make([]*segmentSink, len(parts))
	streamOpts := c.streamOptions(head)
	for i, p := range parts {
		outID := outputULID(head, p)
		if keys[i], err = c.Config.Layout.Block(head.Tenant, outID); err != nil {
			return nil, err
		}
		sinks[i] = &segmentSink{api: c.S3, bucket: c.Config.Bucket, prefix: keys[i].BlockPrefix(), opts: streamOpts}
		jobs[i] = compaction.Job{
			SourceDirs: dirs, Partition: p, PartitionCount: head.Partitions, ULID: outID,
			OutDir: filepath.Join(scratch, "out"), ThanosLabels: st.Labels, Resolution: st.Resolution,
			PartitionInfo: &blockmeta.PartitionInfo{
				PartitionedGroupID: groupID(head), PartitionCount: head.Partitions, PartitionID: p,
				PartitionedGroupCreationTime: head.CreatedAt,
			},
			SourceChunks: sources.open,
			Chunks:       sinks[i],
		}
	}
	results, err := compaction.CompactMany(ctx, c.Logger, jobs)
	if err != nil {
		return nil, jobError{err}
	}
	streamed := sources.stats()
	read := indexRead + uint64(streamed.Bytes)
	outs := make([]records.Committed, len(parts))
	var written, outIndex uint64
	files := 0
	for i, res := range results {
		outs[i].Partition = parts[i]
		if res.Empty {
			log.InfoContext(ctx, "partition holds no series", "outputPartition", parts[i])
			continue
		}
		out, err := c.upload(ctx, head, parts[i], keys[i], res, sinks[i].uploaded)
		if err != nil {
			return nil, err
		}
		if head.Key.IsSplit() {
			// A split's partitions are its block, re-cut: they arrived
			// when it did (a range's readiness counts arrivals).
			out.Arrived = srcs[0].Arrived
		}
		for _, f := range out.Files {
			written += uint64(max(f.Size, 0))
		}
		files += len(out.Files)
		outIndex += out.IndexBytes
		outs[i].Output = out
	}
	took := time.Since(started)
	m := metrics.From(ctx)
	m.Add(metrics.BytesRead, float64(read), head.Tenant)
	m.Add(metrics.BytesWritten, float64(written), head.Tenant)
	// bytesPerSecond is the figure SLUICE_JOB_THROUGHPUT sizes jobs by
	// (planning.Estimate): bytes read and written over the job's wall time.
	log.InfoContext(ctx, "partitions compacted and uploaded", "partitions", len(parts), "files", files,
		"readBytes", read, "indexBytesRead", indexRead, "chunkStreams", streamed.Opens, "streamsResumed", streamed.Resumed,
		"writtenBytes", written, "outputIndexBytes", outIndex, "peakChunkBufferBytes", streamOpts.Buffers.Peak(), "bytesPerSecond", uint64(float64(read+written)/max(took.Seconds(), 1e-3)), "took", took.String())
	return outs, nil
}

func (c Compact) uploadOptions() blockstore.UploadOptions {
	return blockstore.UploadOptions{Parallelism: c.Config.UploadParallelism}
}

// streamOptions are how a job of version head streams its outputs' chunk
// segments: sized by planning.OutputBuffers for the most outputs any job
// of the version writes at once (a split's N, else 1), so its outputs
// together hold a bounded number of bytes however many there are, and
// every attempt writes the same objects. Their parts share one job's
// upload slots.
func (c Compact) streamOptions(head records.Group) blockstore.UploadOptions {
	outputs := 1
	if head.Key.IsSplit() {
		outputs = head.Partitions
	}
	threshold, part := planning.OutputBuffers(outputs)
	return blockstore.UploadOptions{MultipartThreshold: threshold, PartSize: part,
		Buffers: blockstore.NewBuffers(cmp.Or(c.Config.UploadParallelism, planning.UploadSlots))}
}

// jobLog is where a job's progress goes.
type jobLog interface {
	InfoContext(context.Context, string, ...any)
}

// stream is the stream the version's output carries: its labels (without
// the replica labels) and resolution, as recorded when the stream's first
// block came (sr, read with the job; nil: no record). Sources of another
// stream are refused.
func (c Compact) stream(head records.Group, sr *records.StreamRecord, srcs []records.Block) (stream.Stream, error) {
	if len(srcs) == 0 {
		return stream.Stream{}, fmt.Errorf("version %s has no sources", head.Ref())
	}
	for _, b := range srcs {
		if b.Stream != head.Key.Stream {
			return stream.Stream{}, jobError{fmt.Errorf("version %s: source %s is of stream %s, not the group's: refusing to mix streams", head.Ref(), b.Key(), b.Stream)}
		}
	}
	if sr == nil {
		return stream.Stream{}, fmt.Errorf("version %s: stream %s has no record", head.Ref(), head.Key.Stream)
	}
	return sr.Stream(), nil
}

// download gives every source a directory under scratch with its
// meta.json, so all partitions of a version describe the same sources and
// time range; only those that can hold series of one of parts get their index (and
// tombstones, if any): their chunks are streamed, and compaction never
// opens the others. It returns the bytes it downloaded.
func (c Compact) download(ctx context.Context, head records.Group, parts []int, srcs []records.Block, scratch string, log jobLog) (dirs []string, read uint64, err error) {
	skipped := 0
	started := time.Now()
	for _, b := range srcs {
		meta, err := blockmeta.Parse([]byte(b.Meta), b.Key())
		if err != nil {
			return nil, 0, err
		}
		dir := filepath.Join(scratch, "src", b.ID)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, 0, fmt.Errorf("source %s: %w", b.Key(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, blockkey.MetaFile), []byte(b.Meta), 0o644); err != nil {
			return nil, 0, fmt.Errorf("source %s: %w", b.Key(), err)
		}
		dirs = append(dirs, dir)
		if !slices.ContainsFunc(parts, func(p int) bool { return compaction.SourceHoldsPartition(meta, p, head.Partitions) }) {
			skipped++
			continue
		}
		n, err := c.downloadIndex(ctx, b, dir)
		if err != nil {
			return nil, 0, err
		}
		read += n
	}
	log.InfoContext(ctx, "source indexes downloaded", "read", len(dirs)-skipped, "skippedByPartitionInfo", skipped, "bytes", read, "took", time.Since(started).String())
	return dirs, read, nil
}

// downloadIndex fetches a source's index and tombstones by their
// VersionIds and returns their bytes.
func (c Compact) downloadIndex(ctx context.Context, b records.Block, dir string) (uint64, error) {
	id, err := ulid.ParseStrict(b.ID)
	if err != nil {
		return 0, fmt.Errorf("source %s: %w", b.Key(), err)
	}
	k, err := c.Config.Layout.Block(b.Tenant, id)
	if err != nil {
		return 0, err
	}
	var (
		objs []blockstore.Object
		n    uint64
	)
	for _, f := range b.Files {
		if f.RelPath != blockkey.IndexFile && f.RelPath != blockkey.TombstonesFile {
			continue // chunks are streamed; another writer's file (e.g. index.cache.json) is not block data
		}
		objs = append(objs, blockstore.Object{Key: k.Object(f.RelPath), VersionID: f.VersionID, Size: f.Size, RelPath: f.RelPath})
		n += uint64(max(f.Size, 0))
	}
	if err := blockstore.Download(ctx, c.S3, c.Config.Bucket, objs, dir, c.Config.DownloadParallelism); err != nil {
		if errors.Is(err, blockstore.ErrNotFound) || (errors.Is(err, blockstore.ErrSizeMismatch) && !errors.Is(err, io.ErrUnexpectedEOF)) {
			// Deleted or changed behind Sluice's back: the source is to
			// blame, not the network.
			return 0, &compaction.SourceError{Block: id, Err: fmt.Errorf("download: %w", err)}
		}
		return 0, fmt.Errorf("download source %s: %w", b.Key(), err)
	}
	return n, nil
}

// upload puts the output's index (its chunks were uploaded as they were
// written; its meta.json the uploader publishes once the version
// completes) and returns its record.
func (c Compact) upload(ctx context.Context, head records.Group, p int, k blockkey.Key, res *compaction.Result, segments []blockstore.Uploaded) (*records.Block, error) {
	up, err := blockstore.Upload(ctx, c.S3, c.Config.Bucket, k.BlockPrefix(), res.Dir, []string{blockkey.IndexFile}, c.uploadOptions())
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", k.BlockKey(), err)
	}
	out, err := c.outputRecord(head, p, head.Key.Stream, head.Key.Level, k, res.Meta, append(slices.Clone(segments), up...))
	if err != nil {
		return nil, err
	}
	if head.Partitions > 1 {
		out.PartitionCount, out.PartitionID = head.Partitions, p
	}
	return out, nil
}

// outputRecord is the PENDING record of partition p's output of head, of
// stream st at level: its meta.json (held to DynamoDB's item size), its
// stats and its uploaded files. The caller sets its partition.
func (c Compact) outputRecord(head records.Group, p int, st string, level int, k blockkey.Key, meta *blockmeta.Meta, files []blockstore.Uploaded) (*records.Block, error) {
	body, err := meta.Marshal()
	if err != nil {
		return nil, err
	}
	if err := records.CheckMetaSize(body); err != nil {
		return nil, jobError{fmt.Errorf("output %s: meta.json of %w", k.BlockKey(), err)}
	}
	now := c.now().UnixMilli()
	out := &records.Block{
		Tenant: head.Tenant, ID: meta.ULID.String(), Stream: st, MinT: meta.MinTime, MaxT: meta.MaxTime, Level: level,
		State: protocol.BlockPending, Gen: 1, ProducedBy: protocol.PartitionRef{VersionRef: protocol.VersionRef{Tenant: head.Tenant, Group: head.Key, Version: head.Version}, Partition: p}.String(),
		Meta: string(body), Series: meta.Stats.NumSeries, Samples: meta.Stats.NumSamples, UpdatedAt: now, Arrived: now,
	}
	for _, u := range files {
		out.Files = append(out.Files, records.ObjectVersion{RelPath: u.RelPath, VersionID: u.VersionID, Size: u.Size, ETag: u.ETag, Checksum: u.Checksum})
		if u.RelPath == blockkey.IndexFile {
			out.IndexBytes = uint64(u.Size)
		}
	}
	return out, nil
}

// groupID is Cortex's partitioned_group_id: a stable 32-bit id of the
// group version.
func groupID(g records.Group) uint32 {
	id := outputULID(g, 0)
	return uint32(id[10])<<24 | uint32(id[11])<<16 | uint32(id[12])<<8 | uint32(id[13])
}
