// Package chunkstream reads and writes a block's chunk segments as
// streams, so a compaction job keeps no chunk segment on disk.
//
// Prometheus writes a block's chunks in series order, and a label-ordered
// merge asks each source for its chunks in that order, so each segment is
// read front to back: Reader is a tsdb.ChunkReader that serves chunks from
// one sequential stream per segment (SegmentSource, ranged GETs by
// VersionId in the pipeline). Writer is a tsdb.ChunkWriter that hands
// every segment to a SegmentSink as it is written (a streaming upload in
// the pipeline), byte for byte what chunks.Writer would have put in the
// file: the same segment header, chunk framing, CRCs, references and
// segment cuts (TestWriterMatchesChunksWriter holds it to that). The
// samples' encoding is the tsdb library's (chunkenc); this package only
// frames chunks in segments, as chunks.Writer and chunks.Reader do.
package chunkstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/prometheus/prometheus/tsdb/chunks"
)

// The segment format of chunks.Writer (format v1).
const (
	magicChunks       = chunks.MagicChunks
	formatV1          = 1
	segmentHeaderSize = chunks.SegmentHeaderSize
	// DefaultSegmentSize is chunks.DefaultChunkSegmentSize: segments cut
	// where Prometheus' own compactor cuts them.
	DefaultSegmentSize = chunks.DefaultChunkSegmentSize
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SegmentName is the file name of segment seq (0-based) under chunks/:
// "000001" for the first, as chunks.Writer names them.
func SegmentName(seq int) string { return fmt.Sprintf("%06d", seq+1) }

// A SegmentSink receives the segments a Writer writes, one at a time.
type SegmentSink interface {
	// Create starts segment name (SegmentName).
	Create(ctx context.Context, name string) (Segment, error)
}

// A Segment is one segment being written.
type Segment interface {
	io.Writer
	// Close finishes the segment: once it returns nil the segment is
	// stored whole.
	Close() error
	// Abort gives the segment up; what it wrote may remain (a caller
	// cleans up by name) but no unfinished upload does.
	Abort()
}

// Written is one segment a Writer finished.
type Written struct {
	Name string // SegmentName
	Size int64
}

// Writer is a tsdb.ChunkWriter over a SegmentSink. It is not safe for
// concurrent use (nor is chunks.Writer).
type Writer struct {
	ctx         context.Context
	sink        SegmentSink
	segmentSize int64

	cur     Segment
	seq     int   // index of cur; -1 before the first
	n       int64 // bytes written to cur; 0 when there is none
	written []Written
	crc     hash.Hash32
	buf     [binary.MaxVarintLen32]byte
	err     error // sticky: a failed Writer writes nothing more
}

// NewWriter returns a Writer that cuts segments at segmentSize bytes (≤ 0:
// DefaultSegmentSize), as chunks.NewWriter with chunks.WithSegmentSize.
func NewWriter(ctx context.Context, sink SegmentSink, segmentSize int64) *Writer {
	if segmentSize <= 0 {
		segmentSize = DefaultSegmentSize
	}
	return &Writer{ctx: ctx, sink: sink, segmentSize: segmentSize, seq: -1, crc: crc32.New(castagnoli)}
}

// WriteChunks writes chks and sets their Ref, cutting a new segment where
// chunks.Writer.WriteChunks would: the chunks of one call stay in one
// segment unless they do not fit in what is left of it.
func (w *Writer) WriteChunks(chks ...chunks.Meta) error {
	if w.err != nil {
		return w.err
	}
	batches := w.batches(chks)
	if w.n == 0 {
		if err := w.cut(); err != nil {
			return w.fail(err)
		}
	}
	for i, b := range batches {
		if err := w.writeChunks(b); err != nil {
			return w.fail(err)
		}
		if i < len(batches)-1 {
			if err := w.cut(); err != nil {
				return w.fail(err)
			}
		}
	}
	return nil
}

// batches splits chks where chunks.Writer.WriteChunks does.
func (w *Writer) batches(chks []chunks.Meta) [][]chunks.Meta {
	var (
		batchSize  int64
		batchStart int
		batches    = make([][]chunks.Meta, 1)
		firstBatch = true
	)
	for i, chk := range chks {
		chkSize := int64(chunks.MaxChunkLengthFieldSize) + chunks.ChunkEncodingSize + int64(len(chk.Chunk.Bytes())) + crc32.Size
		batchSize += chkSize
		cutNew := i != 0 && batchSize+segmentHeaderSize > w.segmentSize
		if firstBatch && w.n > segmentHeaderSize {
			cutNew = batchSize+w.n > w.segmentSize
			if cutNew {
				firstBatch = false
			}
		}
		if cutNew {
			batchStart = i
			batches = append(batches, nil)
			batchSize = chkSize
		}
		batches[len(batches)-1] = chks[batchStart : i+1]
	}
	return batches
}

func (w *Writer) cut() error {
	if err := w.finish(); err != nil {
		return err
	}
	name := SegmentName(w.seq + 1)
	seg, err := w.sink.Create(w.ctx, name)
	if err != nil {
		return fmt.Errorf("create chunk segment %s: %w", name, err)
	}
	w.cur, w.seq = seg, w.seq+1
	var hdr [segmentHeaderSize]byte
	binary.BigEndian.PutUint32(hdr[:], magicChunks)
	hdr[4] = formatV1
	w.n = 0
	return w.write(hdr[:])
}

// finish closes the current segment, if any.
func (w *Writer) finish() error {
	if w.cur == nil {
		return nil
	}
	seg, name := w.cur, SegmentName(w.seq)
	w.cur = nil
	if err := seg.Close(); err != nil {
		return fmt.Errorf("finish chunk segment %s: %w", name, err)
	}
	w.written = append(w.written, Written{Name: name, Size: w.n})
	return nil
}

func (w *Writer) write(b []byte) error {
	n, err := w.cur.Write(b)
	w.n += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return err
}

func (w *Writer) writeChunks(chks []chunks.Meta) error {
	for i := range chks {
		c := &chks[i]
		c.Ref = chunks.ChunkRef(chunks.NewBlockChunkRef(uint64(w.seq), uint64(w.n)))
		data := c.Chunk.Bytes()
		n := binary.PutUvarint(w.buf[:], uint64(len(data)))
		if err := w.write(w.buf[:n]); err != nil {
			return err
		}
		w.buf[0] = byte(c.Chunk.Encoding())
		if err := w.write(w.buf[:1]); err != nil {
			return err
		}
		if err := w.write(data); err != nil {
			return err
		}
		w.crc.Reset()
		_, _ = w.crc.Write(w.buf[:1])
		_, _ = w.crc.Write(data)
		if err := w.write(w.crc.Sum(w.buf[:0])); err != nil {
			return err
		}
	}
	return nil
}

// fail makes err sticky and aborts the segment being written.
func (w *Writer) fail(err error) error {
	w.err = err
	if w.cur != nil {
		w.cur.Abort()
		w.cur = nil
	}
	return err
}

// errClosed is the sticky error of a Writer after Close or Abort.
var errClosed = errors.New("chunk writer closed")

// Close finishes the last segment. A Writer that wrote no chunk wrote no
// segment (as chunks.Writer).
func (w *Writer) Close() error {
	if w.err != nil {
		if errors.Is(w.err, errClosed) {
			return nil
		}
		return w.err
	}
	if err := w.finish(); err != nil {
		return w.fail(err)
	}
	w.err = errClosed
	return nil
}

// Abort gives up the segment being written (a failed compaction).
func (w *Writer) Abort() {
	if w.err == nil {
		_ = w.fail(errClosed)
	} else if w.cur != nil {
		w.cur.Abort()
		w.cur = nil
	}
}

// Segments are the segments written, in order, once Close returned nil.
func (w *Writer) Segments() []Written { return w.written }
