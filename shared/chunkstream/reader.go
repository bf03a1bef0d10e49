package chunkstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// ErrCorrupt is wrapped by every error about the bytes of a segment: a
// bad header, a chunk reference outside its segment, a length that runs
// past it, a CRC mismatch. Its source block is to blame; a failure to
// read (a broken connection that did not resume) is not.
var ErrCorrupt = errors.New("corrupt chunk segment")

// A SegmentSource opens a block's chunk segments.
type SegmentSource interface {
	// Open returns segment seq's bytes from offset to its end. It fails
	// (with ErrCorrupt) when the stored segment is not as long as the
	// block says.
	Open(ctx context.Context, seq int, offset int64) (io.ReadCloser, error)
}

// Reader defaults.
const (
	DefaultMaxSkip    int64 = 4 << 20
	DefaultBufferSize       = 1 << 20
	DefaultRetries          = 4
)

// ReaderOptions tune a Reader; zero fields mean the defaults.
type ReaderOptions struct {
	// MaxSkip: a chunk at most this far ahead of a segment's stream is
	// reached by reading (and dropping) the bytes between; one further
	// ahead, or behind, by a new stream from its offset. A new ranged GET
	// costs about what a few MiB of transfer do.
	MaxSkip int64
	// BufferSize of each segment's stream.
	BufferSize int
	// Retries: a stream that breaks is opened again where it broke this
	// many times in a row before the read fails.
	Retries int
}

// Stats count what a Reader read.
type Stats struct {
	// Bytes read from the segments' streams, those skipped over included.
	Bytes int64
	// Opens is the number of streams opened (ranged GETs): one per segment
	// read front to back, more for jumps and resumed breaks.
	Opens int
	// Resumed counts streams opened again after a break.
	Resumed int
}

// Reader is a tsdb.ChunkReader over one block's segments, read as
// streams. It serves chunks asked for in any order, and is fast when they
// are asked for in the order they were written.
type Reader struct {
	ctx   context.Context
	src   SegmentSource
	sizes []int64
	pool  chunkenc.Pool
	opts  ReaderOptions

	mu    sync.Mutex
	segs  []*segStream
	stats Stats
}

// NewReader reads a block whose segments have the given sizes (in order,
// as the block's meta.json or record lists them) from src.
func NewReader(ctx context.Context, src SegmentSource, sizes []int64, pool chunkenc.Pool, opts ReaderOptions) *Reader {
	if pool == nil {
		pool = chunkenc.NewPool()
	}
	if opts.MaxSkip <= 0 {
		opts.MaxSkip = DefaultMaxSkip
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = DefaultBufferSize
	}
	if opts.Retries <= 0 {
		opts.Retries = DefaultRetries
	}
	return &Reader{ctx: ctx, src: src, sizes: sizes, pool: pool, opts: opts, segs: make([]*segStream, len(sizes))}
}

// segStream is the open stream of one segment.
type segStream struct {
	body io.ReadCloser
	br   *bufio.Reader
	pos  int64 // segment offset of the next byte br yields
}

// ChunkOrIterable implements tsdb.ChunkReader: it returns the chunk meta.Ref
// points at, CRC-checked.
func (r *Reader) ChunkOrIterable(meta chunks.Meta) (chunkenc.Chunk, chunkenc.Iterable, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, off := chunks.BlockChunkRef(meta.Ref).Unpack()
	if seq >= len(r.sizes) {
		return nil, nil, fmt.Errorf("chunk ref %d: segment %d of %d: %w", meta.Ref, seq, len(r.sizes), ErrCorrupt)
	}
	if int64(off) < segmentHeaderSize || int64(off) >= r.sizes[seq] {
		return nil, nil, fmt.Errorf("chunk ref %d: offset %d outside segment %s of %d bytes: %w", meta.Ref, off, SegmentName(seq), r.sizes[seq], ErrCorrupt)
	}
	var lastErr error
	for attempt := 0; attempt <= r.opts.Retries; attempt++ {
		enc, data, err := r.read(seq, int64(off), attempt > 0)
		if err == nil {
			c, err := r.pool.Get(chunkenc.Encoding(enc), data)
			if err != nil {
				return nil, nil, fmt.Errorf("segment %s offset %d: %w: %w", SegmentName(seq), off, err, ErrCorrupt)
			}
			return c, nil, nil
		}
		if errors.Is(err, ErrCorrupt) || r.ctx.Err() != nil {
			return nil, nil, err
		}
		lastErr = err
		r.drop(seq)
	}
	return nil, nil, fmt.Errorf("segment %s offset %d: read failed %d times: %w", SegmentName(seq), off, r.opts.Retries+1, lastErr)
}

// read reads the chunk at off of segment seq from its stream, opening one
// where the stream cannot reach it by reading on.
func (r *Reader) read(seq int, off int64, resumed bool) (enc byte, data []byte, err error) {
	s := r.segs[seq]
	if s == nil || off < s.pos || off-s.pos > r.opts.MaxSkip {
		r.drop(seq)
		if s, err = r.open(seq, off, resumed); err != nil {
			return 0, nil, err
		}
	}
	if skip := off - s.pos; skip > 0 {
		n, err := s.br.Discard(int(skip))
		s.pos += int64(n)
		if err != nil {
			return 0, nil, fmt.Errorf("segment %s: skip to %d: %w", SegmentName(seq), off, err)
		}
	}
	size := r.sizes[seq]
	l, ln, err := readLength(s.br)
	if err != nil {
		return 0, nil, fmt.Errorf("segment %s offset %d: read chunk length: %w", SegmentName(seq), off, err)
	}
	head := int64(ln) + chunks.ChunkEncodingSize
	if l > uint64(size) || off+head+int64(l)+crc32.Size > size {
		return 0, nil, fmt.Errorf("segment %s offset %d: chunk of %d bytes runs past the segment's %d: %w", SegmentName(seq), off, l, size, ErrCorrupt)
	}
	buf := make([]byte, 1+int(l)+crc32.Size)
	if _, err := io.ReadFull(s.br, buf); err != nil {
		return 0, nil, fmt.Errorf("segment %s offset %d: read chunk: %w", SegmentName(seq), off, err)
	}
	s.pos = off + head + int64(l) + crc32.Size
	body, sum := buf[:1+l], buf[1+l:]
	if got, want := crc32.Checksum(body, castagnoli), binary.BigEndian.Uint32(sum); got != want {
		return 0, nil, fmt.Errorf("segment %s offset %d: checksum mismatch: expected %x, got %x: %w", SegmentName(seq), off, want, got, ErrCorrupt)
	}
	return body[0], body[1:], nil
}

// open starts a stream of segment seq for a chunk at off: from the start
// (checking the header) when that is close enough, else from off.
func (r *Reader) open(seq int, off int64, resumed bool) (*segStream, error) {
	from := off
	if off-segmentHeaderSize <= r.opts.MaxSkip && !resumed {
		from = 0
	}
	body, err := r.src.Open(r.ctx, seq, from)
	if err != nil {
		return nil, fmt.Errorf("open segment %s at %d: %w", SegmentName(seq), from, err)
	}
	r.stats.Opens++
	if resumed {
		r.stats.Resumed++
	}
	s := &segStream{body: body, br: bufio.NewReaderSize(countingReader{body, &r.stats.Bytes}, r.opts.BufferSize), pos: from}
	r.segs[seq] = s
	if from == 0 {
		var hdr [segmentHeaderSize]byte
		if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
			return nil, fmt.Errorf("segment %s: read header: %w", SegmentName(seq), err)
		}
		s.pos = segmentHeaderSize
		if m := binary.BigEndian.Uint32(hdr[:]); m != magicChunks {
			return nil, fmt.Errorf("segment %s: invalid magic number %x: %w", SegmentName(seq), m, ErrCorrupt)
		}
		if v := hdr[chunks.MagicChunksSize]; v != formatV1 {
			return nil, fmt.Errorf("segment %s: invalid chunk format version %d: %w", SegmentName(seq), v, ErrCorrupt)
		}
	}
	return s, nil
}

// drop closes segment seq's stream, if open.
func (r *Reader) drop(seq int) {
	if s := r.segs[seq]; s != nil {
		_ = s.body.Close()
		r.segs[seq] = nil
	}
}

// Close implements tsdb.ChunkReader: it closes every open stream.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.segs {
		r.drop(i)
	}
	return nil
}

// Stats returns what the Reader read so far.
func (r *Reader) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// readLength reads a chunk's length field: a uvarint of at most
// chunks.MaxChunkLengthFieldSize bytes. It returns the bytes it took.
func readLength(br io.ByteReader) (uint64, int, error) {
	var x uint64
	for i := 0; i < chunks.MaxChunkLengthFieldSize; i++ {
		b, err := br.ReadByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, err
		}
		x |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return x, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("length field longer than %d bytes: %w", chunks.MaxChunkLengthFieldSize, ErrCorrupt)
}
