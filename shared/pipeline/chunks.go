package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/blockstore"
	"github.com/sluice-dev/sluice/shared/chunkstream"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/records"
)

// awsError marks a failure to reach S3 inside a job's work (a chunk
// stream that did not resume, a segment that could not be uploaded): not
// the job's own failure, so it is not counted as a failed attempt, as a
// failed download never was.
type awsError struct{ err error }

func (e awsError) Error() string { return e.err.Error() }
func (e awsError) Unwrap() error { return e.err }

// sourceChunks streams the chunk segments of a job's sources from S3, by
// the VersionIds their records name.
type sourceChunks struct {
	api    blockstore.S3API
	bucket string
	blocks map[ulid.ULID][]blockstore.Object // segments in order

	mu      sync.Mutex
	readers []*chunkstream.Reader
}

func newSourceChunks(api blockstore.S3API, bucket string, layout blockkey.Layout, srcs []records.Block) (*sourceChunks, error) {
	s := &sourceChunks{api: api, bucket: bucket, blocks: map[ulid.ULID][]blockstore.Object{}}
	for _, b := range srcs {
		id, err := ulid.ParseStrict(b.ID)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", b.Key(), err)
		}
		k, err := layout.Block(b.Tenant, id)
		if err != nil {
			return nil, err
		}
		var segs []blockstore.Object
		for _, f := range b.Files {
			if strings.HasPrefix(f.RelPath, blockkey.ChunksDir+"/") {
				segs = append(segs, blockstore.Object{Key: k.Object(f.RelPath), VersionID: f.VersionID, Size: f.Size, RelPath: f.RelPath})
			}
		}
		// A segment's number is its place among the block's chunk files
		// in name order, as chunks.NewDirReader numbers them.
		slices.SortFunc(segs, func(a, b blockstore.Object) int { return strings.Compare(a.RelPath, b.RelPath) })
		s.blocks[id] = segs
	}
	return s, nil
}

// open is compaction.Job.SourceChunks.
func (s *sourceChunks) open(ctx context.Context, m *blockmeta.Meta) (tsdb.ChunkReader, error) {
	segs, ok := s.blocks[m.ULID]
	if !ok {
		return nil, fmt.Errorf("source %s: not one of the job's sources", m.ULID)
	}
	sizes := make([]int64, len(segs))
	for i, o := range segs {
		sizes[i] = o.Size
	}
	// The pool knows Thanos' aggregate chunks, which downsampled sources hold.
	r := chunkstream.NewReader(ctx, segmentSource{api: s.api, bucket: s.bucket, segs: segs}, sizes, downsample.NewPool(), chunkstream.ReaderOptions{})
	s.mu.Lock()
	s.readers = append(s.readers, r)
	s.mu.Unlock()
	return r, nil
}

// stats adds up what every stream read.
func (s *sourceChunks) stats() chunkstream.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st chunkstream.Stats
	for _, r := range s.readers {
		rs := r.Stats()
		st.Bytes += rs.Bytes
		st.Opens += rs.Opens
		st.Resumed += rs.Resumed
	}
	return st
}

// segmentSource is one source block's segments in S3.
type segmentSource struct {
	api    blockstore.S3API
	bucket string
	segs   []blockstore.Object
}

func (s segmentSource) Open(ctx context.Context, seq int, offset int64) (io.ReadCloser, error) {
	if seq >= len(s.segs) {
		return nil, fmt.Errorf("segment %d of %d: %w", seq, len(s.segs), chunkstream.ErrCorrupt)
	}
	rc, err := blockstore.OpenRange(ctx, s.api, s.bucket, s.segs[seq], offset)
	switch {
	case err == nil:
		return rc, nil
	case errors.Is(err, blockstore.ErrNotFound), errors.Is(err, blockstore.ErrSizeMismatch):
		// Deleted or changed behind Sluice's back: the source is to blame.
		return nil, fmt.Errorf("%w: %w", err, chunkstream.ErrCorrupt)
	case ctx.Err() != nil:
		return nil, err
	}
	return nil, awsError{err}
}

// segmentSink uploads an output's chunk segments as they are written.
type segmentSink struct {
	api    blockstore.S3API
	bucket string
	prefix string // the output block's key prefix
	opts   blockstore.UploadOptions

	uploaded []blockstore.Uploaded
}

func (s *segmentSink) Create(ctx context.Context, name string) (chunkstream.Segment, error) {
	rel := blockkey.ChunksDir + "/" + name
	return &segmentUpload{StreamUpload: blockstore.NewStreamUpload(ctx, s.api, s.bucket, strings.TrimSuffix(s.prefix, "/")+"/"+rel, rel, s.opts), sink: s}, nil
}

type segmentUpload struct {
	*blockstore.StreamUpload
	sink *segmentSink
}

func (u *segmentUpload) Write(p []byte) (int, error) {
	n, err := u.StreamUpload.Write(p)
	return n, uploadError(err)
}

func (u *segmentUpload) Close() error {
	if err := u.StreamUpload.Close(); err != nil {
		return uploadError(err)
	}
	u.sink.uploaded = append(u.sink.uploaded, u.Uploaded())
	return nil
}

// uploadError marks what is not the job's own failure as a failure to
// reach S3; other bytes under an output's key stay what they are.
func uploadError(err error) error {
	if err == nil || errors.Is(err, blockstore.ErrNotDeterministic) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return awsError{err}
}
