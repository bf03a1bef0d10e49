// Package blockcheck tells, from a few bytes, whether an uploaded block
// can be compacted: that its files stay inside the block, that its index
// ends in a table of contents whose checksum holds, and that its chunk
// segments start with Prometheus' segment header. The planner reads those
// bytes with ranged GETs (a few KiB per block) and rejects a block that
// fails, with the reason, at registration — before any compaction job
// downloads it.
//
// A block can still be corrupt in ways only reading it all shows (bytes
// flipped in the middle of the index or a chunk); compaction finds those,
// and the quarantine keeps them from being retried forever.
package blockcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"
)

// ErrCorrupt is wrapped by every error this package returns about a block.
var ErrCorrupt = errors.New("corrupt block")

// TOCSize is how many bytes at the end of an index file IndexTOC needs.
const TOCSize = 6*8 + 4

// ChunkHeaderSize is how many bytes at the start of a chunk segment
// ChunkHeader needs.
const ChunkHeaderSize = chunks.SegmentHeaderSize

// RelPath checks one file path of a block (thanos.files, or a listed key
// under the block's prefix): relative, clean, inside the block.
func RelPath(rel string) error {
	switch {
	case rel == "":
		return fmt.Errorf("empty file path: %w", ErrCorrupt)
	case strings.HasPrefix(rel, "/") || strings.Contains(rel, `\`):
		return fmt.Errorf("file path %q is not a relative path of the block: %w", rel, ErrCorrupt)
	case path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../"):
		return fmt.Errorf("file path %q leaves the block or is not clean: %w", rel, ErrCorrupt)
	}
	return nil
}

// IndexTOC checks the last TOCSize bytes of an index file of size bytes:
// the table of contents' checksum (Castagnoli CRC32, as Prometheus'
// reader checks it), the symbol table right after the 5-byte header, and
// every section offset inside the file. A truncated upload fails it.
func IndexTOC(tail []byte, size int64) error {
	if size < index.HeaderLen+TOCSize || len(tail) != TOCSize {
		return fmt.Errorf("index is %d bytes, too short for a header and a table of contents: %w", size, ErrCorrupt)
	}
	toc, err := index.NewTOCFromByteSlice(suffix{size: size, tail: tail})
	if err != nil {
		return fmt.Errorf("index table of contents: %v (truncated or corrupt): %w", err, ErrCorrupt)
	}
	if toc.Symbols != index.HeaderLen {
		return fmt.Errorf("index symbol table at %d, want %d: %w", toc.Symbols, index.HeaderLen, ErrCorrupt)
	}
	end := uint64(size - TOCSize)
	for name, off := range map[string]uint64{
		"series": toc.Series, "label indices": toc.LabelIndices, "label index table": toc.LabelIndicesTable,
		"postings": toc.Postings, "postings table": toc.PostingsTable,
	} {
		if off > end {
			return fmt.Errorf("index %s section at %d, past the end (%d): %w", name, off, end, ErrCorrupt)
		}
	}
	return nil
}

// ChunkHeader checks the first ChunkHeaderSize bytes of a chunk segment:
// Prometheus' magic number and format version 1.
func ChunkHeader(head []byte) error {
	if len(head) < ChunkHeaderSize {
		return fmt.Errorf("chunk segment is %d bytes, shorter than its header: %w", len(head), ErrCorrupt)
	}
	if m := binary.BigEndian.Uint32(head[:chunks.MagicChunksSize]); m != chunks.MagicChunks {
		return fmt.Errorf("chunk segment magic %#x, want %#x: %w", m, chunks.MagicChunks, ErrCorrupt)
	}
	if v := head[chunks.MagicChunksSize]; v != 1 {
		return fmt.Errorf("chunk segment format version %d, want 1: %w", v, ErrCorrupt)
	}
	return nil
}

// suffix is an index.ByteSlice of which only the last bytes are present.
type suffix struct {
	size int64
	tail []byte
}

func (s suffix) Len() int { return int(s.size) }

func (s suffix) Range(start, end int) []byte {
	off := int(s.size) - len(s.tail)
	if start < off || end > int(s.size) {
		return nil
	}
	return s.tail[start-off : end-off]
}
