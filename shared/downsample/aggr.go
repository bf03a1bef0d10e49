package downsample

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// EncAggr is the encoding byte Thanos gives an aggregate chunk in a chunk
// segment: the highest one, far from Prometheus' own.
const EncAggr = chunkenc.Encoding(0xff)

// Aggr names one of the five aggregates, in the order they sit in an
// aggregate chunk.
type Aggr uint8

// The aggregates, in their order in an AggrChunk.
const (
	Count Aggr = iota
	Sum
	Min
	Max
	Counter
	numAggrs
)

func (a Aggr) String() string {
	switch a {
	case Count:
		return "count"
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	case Counter:
		return "counter"
	}
	return fmt.Sprintf("aggr(%d)", uint8(a))
}

// ErrAbsent is returned for an aggregate an AggrChunk does not hold.
var ErrAbsent = errors.New("aggregate absent from the chunk")

// AggrChunk is Thanos' aggregate chunk: for each aggregate in Aggr order,
// a uvarint length n and then, when n > 0, one encoding byte and n bytes of
// that aggregate's own chunk (XOR for floats). A zero length is an absent
// aggregate. It implements chunkenc.Chunk so that the tsdb chunk writer and
// reader carry it; its samples are read through Get, never Iterator.
type AggrChunk []byte

// EncodeAggr lays out parts (nil: absent) as one AggrChunk.
func EncodeAggr(parts [numAggrs]chunkenc.Chunk) AggrChunk {
	var out []byte
	for _, c := range parts {
		if c == nil {
			out = binary.AppendUvarint(out, 0)
			continue
		}
		b := c.Bytes()
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, byte(c.Encoding()))
		out = append(out, b...)
	}
	return out
}

// Get is aggregate a's chunk, ErrAbsent when the chunk holds none.
func (c AggrChunk) Get(a Aggr) (chunkenc.Chunk, error) {
	if a >= numAggrs {
		return nil, fmt.Errorf("no aggregate %d", a)
	}
	rest := []byte(c)
	for i := Aggr(0); ; i++ {
		n, w := binary.Uvarint(rest)
		if w <= 0 {
			return nil, fmt.Errorf("aggregate chunk: bad length of %s", i)
		}
		rest = rest[w:]
		if n == 0 {
			if i == a {
				return nil, ErrAbsent
			}
			continue
		}
		if uint64(len(rest)) < n+1 {
			return nil, fmt.Errorf("aggregate chunk: %s needs %d bytes, %d left", i, n+1, len(rest))
		}
		if i == a {
			return chunkenc.FromData(chunkenc.Encoding(rest[0]), rest[1:n+1])
		}
		rest = rest[n+1:]
	}
}

// Bytes is the encoded chunk.
func (c AggrChunk) Bytes() []byte { return c }

// Encoding is EncAggr.
func (c AggrChunk) Encoding() chunkenc.Encoding { return EncAggr }

// Appender refuses: an aggregate chunk is built whole by EncodeAggr.
func (c AggrChunk) Appender() (chunkenc.Appender, error) {
	return nil, errors.New("an aggregate chunk cannot be appended to")
}

// Iterator yields nothing: the samples are per aggregate, through Get.
func (c AggrChunk) Iterator(chunkenc.Iterator) chunkenc.Iterator { return chunkenc.NewNopIterator() }

// NumSamples is the number of windows: the count aggregate's samples.
func (c AggrChunk) NumSamples() int {
	cc, err := c.Get(Count)
	if err != nil {
		return 0
	}
	return cc.NumSamples()
}

// Compact does nothing: the chunk is immutable.
func (c AggrChunk) Compact() {}

// Reset points the chunk at stream.
func (c *AggrChunk) Reset(stream []byte) { *c = stream }

// pool decodes aggregate chunks besides Prometheus' own encodings, so a
// downsampled block opens with tsdb.OpenBlock.
type pool struct{ std chunkenc.Pool }

// NewPool is a chunkenc.Pool that also knows EncAggr.
func NewPool() chunkenc.Pool { return pool{std: chunkenc.NewPool()} }

func (p pool) Get(e chunkenc.Encoding, b []byte) (chunkenc.Chunk, error) {
	if e == EncAggr {
		c := AggrChunk(b)
		return &c, nil
	}
	return p.std.Get(e, b)
}

func (p pool) Put(c chunkenc.Chunk) error {
	if c.Encoding() == EncAggr {
		return nil
	}
	return p.std.Put(c)
}
