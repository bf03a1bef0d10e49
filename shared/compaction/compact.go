// Package compaction is Sluice's data plane: it compacts source Prometheus
// TSDB blocks (local directories) into partition p of N of their union, a
// valid Prometheus block with Thanos and Cortex metadata, byte-identical
// every time the same job runs.
//
// It uses the Prometheus tsdb library for reading, merging and writing
// (index.Writer, chunks.Writer, the compacting chunk series merger) and
// knows nothing about S3 or DynamoDB.
package compaction

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/chunkstream"
	"github.com/sluice-dev/sluice/shared/downsample"
)

// SourceCompactor is the thanos.source Compact writes by default, so Thanos
// and Cortex tooling treat the output like their own compactor's.
const SourceCompactor = "compactor"

// ErrInvalidJob is wrapped by every error about the Job itself.
var ErrInvalidJob = errors.New("invalid compaction job")

// Job is one partition of one compaction.
type Job struct {
	// SourceDirs are local block directories, each with meta.json, index
	// and chunks/. Their order does not matter. A source that
	// SourceHoldsPartition rules out needs only its meta.json: it is
	// skipped without being opened, and still counted in the output's time
	// range, compaction.sources and parents (so every partition of a group
	// agrees on them). No sources at all gives an Empty result.
	SourceDirs []string
	// Partition p of PartitionCount N: the output holds the series with
	// labels.StableHash(lset) % N == p. N must be a power of two in
	// [1, MaxPartitions]; zero means 1.
	Partition, PartitionCount int
	// ULID of the output block (see OutputULID). Required.
	ULID ulid.ULID
	// OutDir receives the block as OutDir/<ULID>. Required.
	OutDir string
	// ThanosLabels are written to thanos.labels (nil means none).
	ThanosLabels map[string]string
	// Resolution is thanos.downsample.resolution in milliseconds (0: raw).
	Resolution int64
	// Source is thanos.source; empty means SourceCompactor.
	Source string
	// PartitionInfo is written to thanos.extensions.partition_info. It is
	// required when PartitionCount > 1 and must then name the same
	// partition; nil with N = 1 writes none.
	PartitionInfo *blockmeta.PartitionInfo
	// KeepAllSymbols copies every source's symbol table into the index, as
	// Prometheus' default populator does. False (the default) writes only
	// the symbols of the partition's series.
	KeepAllSymbols bool
	// SourceChunks, when set, opens the chunks of each source that is
	// read instead of its directory's chunks/ (a chunkstream.Reader over
	// S3): the directory then needs only meta.json, index and, if the
	// block has one, tombstones. Its sizes in thanos.files are not checked
	// here (the reader checks what it opens). Each reader is closed.
	SourceChunks func(ctx context.Context, m *blockmeta.Meta) (tsdb.ChunkReader, error)
	// Chunks, when set, receives the output's chunk segments instead of
	// OutDir/<ULID>/chunks/ (a streaming upload): Result.Dir then holds
	// meta.json and index, and thanos.files lists the segments Chunks was
	// given with their sizes. What it was given stays there on error,
	// except the segment being written, which is aborted.
	Chunks chunkstream.SegmentSink
	// SegmentSize of the output's chunk segments; ≤ 0 means Prometheus'
	// default (512 MiB).
	SegmentSize int64
}

// Result describes the written block.
type Result struct {
	// Dir is OutDir/<ULID>; empty when Empty.
	Dir string
	// Meta is the written meta.json: thanos.files with sizes, compaction
	// level max(source levels)+1, sources the union of the sources'. Nil
	// when Empty.
	Meta *blockmeta.Meta
	// NumSeries and NumSamples of the output.
	NumSeries, NumSamples uint64
	// Empty is true when the partition holds no series: nothing is written.
	Empty bool
	// Read lists the sources that were opened; Skipped those whose
	// partition_info proves they hold no series of the partition (not opened).
	Read, Skipped []ulid.ULID
}

type source struct {
	dir  string
	meta *blockmeta.Meta
}

// Compact runs job. On any error the partial output is removed and the
// error names the source block or step that failed — a *SourceError when
// one source is to blame (BlamedSource); a source that does not
// hold the partition (SourceHoldsPartition) is never opened. Running the
// same job twice writes byte-identical index, chunks and meta.json.
func Compact(ctx context.Context, logger *slog.Logger, job Job) (*Result, error) {
	res, err := CompactMany(ctx, logger, []Job{job})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// CompactMany runs several partitions of one compaction in one pass over
// the sources: each source's index is read once to route its series, and
// each chunk is read once and written to its partition. The jobs must
// agree on everything but Partition, ULID, PartitionInfo and Chunks (the
// same sources, partition count, output directory, labels, resolution,
// source, symbols and segment size, and SourceChunks set or not), and name
// distinct partitions. Each output is byte for byte what Compact of its
// job alone writes. The results are in jobs order.
//
// With every partition of N over one big source, it is the split of that
// source into N blocks at the cost of reading it once.
func CompactMany(ctx context.Context, logger *slog.Logger, jobs []Job) ([]*Result, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("compact: no job: %w", ErrInvalidJob)
	}
	start := time.Now()
	job := jobs[0]
	n := job.PartitionCount
	if n == 0 {
		n = 1
	}
	for i := range jobs {
		if err := jobs[i].validate(n); err != nil {
			return nil, err
		}
		if err := job.sameCompaction(jobs[i], jobs[:i]); err != nil {
			return nil, err
		}
	}
	logger = logger.With("block", job.ULID.String(), "partition", job.Partition, "partitions", n)
	if len(jobs) > 1 {
		logger = logger.With("outputs", len(jobs))
	}
	results := make([]*Result, len(jobs))
	for i := range results {
		results[i] = &Result{}
	}
	if len(job.SourceDirs) == 0 {
		// Every source was left out (e.g. by the caller's own
		// SourceHoldsPartition check): the partitions are empty.
		logger.Info("partition empty: no sources")
		for _, r := range results {
			r.Empty = true
		}
		return results, nil
	}

	srcs := make([]source, 0, len(job.SourceDirs))
	seen := map[ulid.ULID]string{}
	for _, dir := range job.SourceDirs {
		m, err := blockmeta.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("compact %s: source %s: %w", job.ULID, dir, err)
		}
		if prev, dup := seen[m.ULID]; dup {
			return nil, fmt.Errorf("compact %s: source block %s given twice (%s and %s): %w", job.ULID, m.ULID, prev, dir, ErrInvalidJob)
		}
		seen[m.ULID] = dir
		srcs = append(srcs, source{dir: dir, meta: m})
	}
	// A fixed order, whatever the caller's: the merge and so the bytes
	// depend on it.
	slices.SortFunc(srcs, func(a, b source) int {
		if a.meta.MinTime != b.meta.MinTime {
			return cmpInt64(a.meta.MinTime, b.meta.MinTime)
		}
		return a.meta.ULID.Compare(b.meta.ULID)
	})

	// Downsampled sources hold Thanos' aggregate chunks: the pool reads
	// them as such (aggregateMerge carries them over whole).
	pool := downsample.NewPool()
	var readers []tsdb.BlockReader
	defer func() {
		for _, r := range readers {
			_ = r.(io.Closer).Close()
		}
	}()
	for _, s := range srcs {
		holds := false
		for i, j := range jobs {
			if SourceHoldsPartition(s.meta, j.Partition, n) {
				results[i].Read = append(results[i].Read, s.meta.ULID)
				holds = true
			} else {
				results[i].Skipped = append(results[i].Skipped, s.meta.ULID)
			}
		}
		if !holds {
			continue
		}
		b, err := job.open(ctx, logger, s, pool)
		if err != nil {
			return nil, fmt.Errorf("compact %s: %w", job.ULID, &SourceError{Block: s.meta.ULID, Err: fmt.Errorf("%s: %w", s.dir, err)})
		}
		readers = append(readers, b)
	}
	if len(readers) == 0 {
		logger.Info("partition empty: no source holds it", "skipped", len(srcs))
		for _, r := range results {
			r.Empty = true
		}
		return results, nil
	}

	metas := make([]*blockmeta.Meta, len(jobs))
	for i, j := range jobs {
		metas[i] = outputMeta(j, srcs)
	}
	dirs, err := writeBlocks(ctx, logger, jobs, metas, n, pool, readers)
	if err != nil {
		if _, blamed := BlamedSource(err); !blamed && ctx.Err() == nil {
			// Which source (if any) is to blame? The merge does not say.
			// Streamed chunks blame their block themselves, so for them
			// only the indexes are read again (reading a streamed
			// source's chunks again would cost its download).
			if blame := diagnose(ctx, readers, job.SourceChunks == nil); blame != nil {
				return nil, fmt.Errorf("compact %s: %w (merge failed: %v)", job.ULID, blame, err)
			}
		}
		return nil, fmt.Errorf("compact %s: %w", job.ULID, err)
	}
	for i, r := range results {
		out := metas[i]
		r.NumSeries, r.NumSamples = out.Stats.NumSeries, out.Stats.NumSamples
		if dirs[i] == "" {
			r.Empty = true
			logger.Info("partition empty: no series hash into it", "output", jobs[i].ULID.String(), "partition", jobs[i].Partition, "read", len(r.Read), "skipped", len(r.Skipped))
			continue
		}
		r.Dir, r.Meta = dirs[i], out
		logger.Info("compacted partition", "output", jobs[i].ULID.String(), "partition", jobs[i].Partition, "series", out.Stats.NumSeries, "samples", out.Stats.NumSamples,
			"read", len(r.Read), "skipped", len(r.Skipped), "duration", time.Since(start))
	}
	return results, nil
}

// sameCompaction checks that other is another partition of job's
// compaction, not one of done's.
func (job Job) sameCompaction(other Job, done []Job) error {
	bad := func(what string) error {
		return fmt.Errorf("compact %s: jobs of one pass differ in %s: %w", job.ULID, what, ErrInvalidJob)
	}
	sorted := func(dirs []string) []string { d := slices.Clone(dirs); slices.Sort(d); return d }
	switch {
	case !slices.Equal(sorted(job.SourceDirs), sorted(other.SourceDirs)):
		return bad("sources")
	case max(job.PartitionCount, 1) != max(other.PartitionCount, 1):
		return bad("partition count")
	case job.OutDir != other.OutDir || job.Resolution != other.Resolution || job.Source != other.Source ||
		job.KeepAllSymbols != other.KeepAllSymbols || job.SegmentSize != other.SegmentSize:
		return bad("output settings")
	case (job.SourceChunks == nil) != (other.SourceChunks == nil):
		return bad("how source chunks are read")
	case len(job.ThanosLabels) != len(other.ThanosLabels):
		return bad("labels")
	}
	for k, v := range job.ThanosLabels {
		if w, ok := other.ThanosLabels[k]; !ok || w != v {
			return bad("labels")
		}
	}
	for _, d := range done {
		if d.Partition == other.Partition || d.ULID == other.ULID {
			return fmt.Errorf("compact %s: partition %d or output %s given twice: %w", job.ULID, other.Partition, other.ULID, ErrInvalidJob)
		}
	}
	return nil
}

func (job *Job) validate(n int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("compact %s: %s: %w", job.ULID, fmt.Sprintf(format, args...), ErrInvalidJob)
	}
	switch {
	case !isPowerOfTwo(n) || n > MaxPartitions:
		return bad("partition count %d is not a power of two in [1, %d]", n, MaxPartitions)
	case job.Partition < 0 || job.Partition >= n:
		return bad("partition %d out of range [0, %d)", job.Partition, n)
	case job.ULID == (ulid.ULID{}):
		return bad("no output ULID")
	case job.OutDir == "":
		return bad("no output directory")
	case job.PartitionInfo == nil && n > 1:
		return bad("partition %d of %d needs PartitionInfo", job.Partition, n)
	case job.PartitionInfo != nil && (job.PartitionInfo.PartitionCount != n || job.PartitionInfo.PartitionID != job.Partition):
		return bad("PartitionInfo names partition %d of %d, job is %d of %d",
			job.PartitionInfo.PartitionID, job.PartitionInfo.PartitionCount, job.Partition, n)
	}
	return nil
}

// outputMeta is the output's meta.json before stats and files: the time
// range, sources and parents cover every source, read or skipped, so all
// partitions of a group agree on them.
func outputMeta(job Job, srcs []source) *blockmeta.Meta {
	m := &blockmeta.Meta{ULID: job.ULID, MinTime: srcs[0].meta.MinTime, MaxTime: srcs[0].meta.MaxTime, Version: blockmeta.TSDBVersion1}
	level := 0
	var sources []ulid.ULID
	for _, s := range srcs {
		m.MinTime = min(m.MinTime, s.meta.MinTime)
		m.MaxTime = max(m.MaxTime, s.meta.MaxTime)
		level = max(level, s.meta.Compaction.Level)
		if len(s.meta.Compaction.Sources) == 0 {
			sources = append(sources, s.meta.ULID)
		}
		sources = append(sources, s.meta.Compaction.Sources...)
		m.Compaction.Parents = append(m.Compaction.Parents, blockmeta.BlockDesc{ULID: s.meta.ULID, MinTime: s.meta.MinTime, MaxTime: s.meta.MaxTime})
	}
	slices.SortFunc(sources, func(a, b ulid.ULID) int { return a.Compare(b) })
	m.Compaction.Sources = slices.Compact(sources)
	m.Compaction.Level = level + 1
	labels := map[string]string{}
	for k, v := range job.ThanosLabels {
		labels[k] = v
	}
	src := job.Source
	if src == "" {
		src = SourceCompactor
	}
	m.Thanos = &blockmeta.Thanos{Labels: labels, Downsample: blockmeta.Downsample{Resolution: job.Resolution}, Source: src}
	if job.PartitionInfo != nil {
		m.SetPartitionInfo(job.PartitionInfo)
	}
	return m
}

// output is one block writeBlocks writes.
type output struct {
	job      Job
	meta     *blockmeta.Meta
	final    string
	tmp      string
	indexw   *index.Writer
	chunkw   tsdb.ChunkWriter
	streamed *chunkstream.Writer
	tm       *tsdb.BlockMeta
}

// writeBlocks writes each job's block to OutDir/<ULID> through a temporary
// directory, like tsdb.LeveledCompactor.write but with the caller's ULID,
// without touching the sources' meta.json and without a tombstones file
// (Thanos does not upload one); its chunks go to job.Chunks when set. The
// directory of an empty partition is "". On error nothing is left in
// OutDir.
func writeBlocks(ctx context.Context, logger *slog.Logger, jobs []Job, metas []*blockmeta.Meta, n int, pool chunkenc.Pool, readers []tsdb.BlockReader) (dirs []string, err error) {
	outs := make([]*output, len(jobs))
	closed := false
	defer func() {
		for _, o := range outs {
			if o == nil {
				continue
			}
			if !closed && o.indexw != nil {
				_ = o.chunkw.Close()
				_ = o.indexw.Close()
			}
			if err != nil && o.streamed != nil {
				o.streamed.Abort()
			}
			if rerr := os.RemoveAll(o.tmp); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		if err != nil {
			dirs = nil
		}
	}()
	writers := make([]*partitionWriter, len(jobs))
	for i, job := range jobs {
		o, err := openOutput(ctx, job, metas[i])
		if o != nil {
			outs[i] = o
		}
		if err != nil {
			return nil, err
		}
		writers[i] = &partitionWriter{Partition: job.Partition, Meta: o.tm, Index: o.indexw, Chunks: o.chunkw}
	}
	merge := storage.NewCompactingChunkSeriesMerger(storage.ChainedSeriesMerge)
	if jobs[0].Resolution > 0 {
		merge = aggregateMerge
	}
	m := metas[0]
	perr := populate(ctx, logger, pool, merge, readers, m.MinTime, m.MaxTime, n, jobs[0].KeepAllSymbols, writers, tsdb.AllSortedPostings)
	var cerr error
	for _, o := range outs {
		if perr != nil && o.streamed != nil {
			o.streamed.Abort()
		}
		cerr = errors.Join(cerr, o.chunkw.Close(), o.indexw.Close())
	}
	closed = true
	if perr != nil {
		return nil, perr
	}
	if cerr != nil {
		return nil, fmt.Errorf("close writers: %w", cerr)
	}
	dirs = make([]string, len(outs))
	for i, o := range outs {
		if dirs[i], err = o.finish(); err != nil {
			return nil, err
		}
	}
	return dirs, nil
}

// openOutput creates a job's temporary directory and its writers.
func openOutput(ctx context.Context, job Job, m *blockmeta.Meta) (*output, error) {
	o := &output{job: job, meta: m, final: filepath.Join(job.OutDir, m.ULID.String())}
	o.tmp = o.final + ".tmp-for-creation"
	if err := os.RemoveAll(o.tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.tmp, blockmeta.ChunksDirname), 0o755); err != nil {
		return o, err
	}
	if job.Chunks != nil {
		o.streamed = chunkstream.NewWriter(ctx, job.Chunks, job.SegmentSize)
		o.chunkw = o.streamed
	} else {
		w, err := chunks.NewWriter(filepath.Join(o.tmp, blockmeta.ChunksDirname), chunks.WithSegmentSize(job.SegmentSize))
		if err != nil {
			return o, fmt.Errorf("open chunk writer: %w", err)
		}
		o.chunkw = w
	}
	indexw, err := index.NewWriter(ctx, filepath.Join(o.tmp, blockmeta.IndexFilename))
	if err != nil {
		_ = o.chunkw.Close()
		if o.streamed != nil {
			o.streamed.Abort()
		}
		return o, fmt.Errorf("open index writer: %w", err)
	}
	o.indexw = indexw
	o.tm = &tsdb.BlockMeta{ULID: m.ULID, MinTime: m.MinTime, MaxTime: m.MaxTime}
	return o, nil
}

// finish writes the output's meta.json and moves it to its final
// directory; "" for an empty partition.
func (o *output) finish() (string, error) {
	m := o.meta
	m.Stats = blockmeta.Stats{
		NumSamples:          o.tm.Stats.NumSamples,
		NumFloatSamples:     o.tm.Stats.NumFloatSamples,
		NumHistogramSamples: o.tm.Stats.NumHistogramSamples,
		NumSeries:           o.tm.Stats.NumSeries,
		NumChunks:           o.tm.Stats.NumChunks,
	}
	if m.Stats.NumSeries == 0 {
		return "", nil
	}
	files, err := blockmeta.GatherFiles(o.tmp)
	if err != nil {
		return "", err
	}
	if o.streamed != nil {
		var segs []blockmeta.File
		for _, w := range o.streamed.Segments() {
			segs = append(segs, blockmeta.File{RelPath: blockmeta.ChunksDirname + "/" + w.Name, SizeBytes: w.Size})
		}
		files = append(segs, files...)
	}
	m.Thanos.Files = files
	if err := m.WriteDir(o.tmp); err != nil {
		return "", fmt.Errorf("write meta.json: %w", err)
	}
	if err := os.RemoveAll(o.final); err != nil {
		return "", err
	}
	if err := os.Rename(o.tmp, o.final); err != nil {
		return "", fmt.Errorf("rename block dir: %w", err)
	}
	return o.final, nil
}

// open opens source s: its directory as Prometheus does, or with
// SourceChunks, its directory's index and tombstones and the chunks that
// SourceChunks streams.
func (job Job) open(ctx context.Context, logger *slog.Logger, s source, pool chunkenc.Pool) (tsdb.BlockReader, error) {
	if err := verifyFiles(s, job.SourceChunks == nil); err != nil {
		return nil, err
	}
	if job.SourceChunks == nil {
		b, err := tsdb.OpenBlock(logger, s.dir, pool, nil)
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		return b, nil
	}
	// OpenBlock reads the index and tombstones; its chunks/ is empty, and
	// Chunks is the stream's.
	if err := os.MkdirAll(filepath.Join(s.dir, blockmeta.ChunksDirname), 0o755); err != nil {
		return nil, err
	}
	b, err := tsdb.OpenBlock(logger, s.dir, pool, nil)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	meta := s.meta
	return streamedBlock{Block: b, chunks: func() (tsdb.ChunkReader, error) { return job.SourceChunks(ctx, meta) }, id: meta.ULID}, nil
}

// streamedBlock is a source whose chunks are streamed: its Chunks opens a
// stream reader, whose corruption errors blame the block.
type streamedBlock struct {
	*tsdb.Block
	chunks func() (tsdb.ChunkReader, error)
	id     ulid.ULID
}

func (b streamedBlock) Chunks() (tsdb.ChunkReader, error) {
	cr, err := b.chunks()
	if err != nil {
		return nil, err
	}
	return blamingChunks{ChunkReader: cr, id: b.id}, nil
}

// blamingChunks makes a chunk that cannot be read because its bytes are
// corrupt a SourceError of its block: the merge does not say which block
// a chunk came from.
type blamingChunks struct {
	tsdb.ChunkReader
	id ulid.ULID
}

func (b blamingChunks) ChunkOrIterable(m chunks.Meta) (chunkenc.Chunk, chunkenc.Iterable, error) {
	c, it, err := b.ChunkReader.ChunkOrIterable(m)
	if err != nil && errors.Is(err, chunkstream.ErrCorrupt) {
		err = &SourceError{Block: b.id, Err: err}
	}
	return c, it, err
}

// verifyFiles checks the sizes of the files meta.json lists (thanos.files),
// so a truncated or missing download fails before any work, with a clear
// message; chunk segments only when withChunks. Blocks without
// thanos.files are checked by Prometheus' readers.
func verifyFiles(s source, withChunks bool) error {
	if s.meta.Thanos == nil {
		return nil
	}
	for _, f := range s.meta.Thanos.Files {
		if f.RelPath == blockmeta.MetaFilename || !withChunks && strings.HasPrefix(f.RelPath, blockmeta.ChunksDirname+"/") {
			continue
		}
		fi, err := os.Stat(filepath.Join(s.dir, filepath.FromSlash(f.RelPath)))
		if err != nil {
			return fmt.Errorf("file listed in meta.json: %w", err)
		}
		if f.SizeBytes > 0 && fi.Size() != f.SizeBytes {
			return fmt.Errorf("%s is %d bytes, meta.json says %d", f.RelPath, fi.Size(), f.SizeBytes)
		}
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// OpenStreamed opens the block whose meta.json, index and tombstones are in
// dir, with its chunks from chunks, as a compaction job opens a streamed
// source (a chunk that cannot be read blames the block). pool decodes
// its chunks: downsample.NewPool reads aggregate chunks too. The caller
// closes the block.
func OpenStreamed(ctx context.Context, logger *slog.Logger, dir string, pool chunkenc.Pool,
	chunks func(context.Context, *blockmeta.Meta) (tsdb.ChunkReader, error)) (OpenBlock, error) {
	m, err := blockmeta.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	r, err := Job{SourceChunks: chunks}.open(ctx, logger, source{dir: dir, meta: m}, pool)
	if err != nil {
		return nil, &SourceError{Block: m.ULID, Err: err}
	}
	return r.(OpenBlock), nil
}

// OpenBlock is an opened source block.
type OpenBlock interface {
	tsdb.BlockReader
	io.Closer
}
