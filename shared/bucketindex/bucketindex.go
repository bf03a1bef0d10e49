// Package bucketindex builds a tenant's bucket index — the
// <tenant>/bucket-index.json.gz through which Cortex and Mimir
// store-gateways and queriers discover blocks — from Sluice's records,
// never from a LIST.
//
// The format is the one Cortex (pkg/storage/tsdb/bucketindex, version 1)
// and Mimir (the same package, version 2, which adds compactor_shard_id)
// write and read: gzip-compressed JSON, the gzip header naming
// bucket-index.json, with the blocks a reader may query, the deletion
// marks of those on their way out, and when the index was written. Their
// readers decode it with encoding/json and check no version; Mimir's
// queriers refuse an index older than their max stale period (1h by
// default), so it is rewritten on a schedule even when nothing changed.
//
// testdata/ holds a golden index derived from their struct tags, because
// neither package builds as a dependency here (tried 2026-12-01): Mimir's
// bucketindex needs Prometheus through its replace onto Grafana's fork
// ("cannot find module providing package .../prometheus/tsdb"), and
// Cortex v1.21.1's resolves, but its Thanos and gRPC dependencies do not
// compile without Cortex's own replace directives (groupcache's
// UnmarshalBinary, resolver.Backend).
package bucketindex

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// File is the index's key under a tenant's prefix, and Name the file name
// its gzip header carries (as Cortex and Mimir write it).
const (
	File = "bucket-index.json.gz"
	Name = "bucket-index.json"
)

// Flavours: which compactor's index a deployment writes.
const (
	// Cortex writes version 1.
	Cortex = "cortex"
	// Mimir writes version 2.
	Mimir = "mimir"
)

// SegmentsFormat1Based6Digits says a block's chunk segments are
// chunks/000001 … chunks/NNNNNN, so the index records their count only.
const SegmentsFormat1Based6Digits = "1b6d"

// Index is a tenant's bucket index.
type Index struct {
	Version            int                  `json:"version"`
	Blocks             []*Block             `json:"blocks"`
	BlockDeletionMarks []*BlockDeletionMark `json:"block_deletion_marks"`
	// UpdatedAt is when the index was written, in unix seconds.
	UpdatedAt int64 `json:"updated_at"`
}

// Block is one block a reader may query.
type Block struct {
	ID      ulid.ULID `json:"block_id"`
	MinTime int64     `json:"min_time"`
	MaxTime int64     `json:"max_time"`
	// SegmentsFormat and SegmentsNum describe the chunk segments when they
	// follow SegmentsFormat1Based6Digits ("" and 0 otherwise).
	SegmentsFormat string `json:"segments_format,omitempty"`
	SegmentsNum    int    `json:"segments_num,omitempty"`
	// UploadedAt is when the block was complete in the bucket (unix s).
	UploadedAt       int64             `json:"uploaded_at"`
	CompactorShardID string            `json:"compactor_shard_id,omitempty"`
	Source           string            `json:"source,omitempty"`
	CompactionLevel  int               `json:"compaction_level,omitempty"`
	OutOfOrder       bool              `json:"out_of_order,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
}

// BlockDeletionMark is the deletion mark of a block in the index.
type BlockDeletionMark struct {
	ID ulid.ULID `json:"block_id"`
	// DeletionTime is when the block was marked (unix s).
	DeletionTime int64 `json:"deletion_time"`
}

// compactorShardLabel is the external label Mimir's split compactor puts
// on its shards; the index copies it out.
const compactorShardLabel = "__compactor_shard_id__"

// outOfOrderHint is the compaction hint of a block of out-of-order samples.
const outOfOrderHint = "from-out-of-order"

// Visible reports whether a reader sees block b: its meta.json is in the
// bucket (a published output or an upload) and it is not deleted. A
// retiring block is visible, with its deletion mark, until it is deleted.
func Visible(b records.Block) bool {
	switch b.State {
	case protocol.BlockLive:
		return b.Published
	case protocol.BlockClaimed, protocol.BlockQuarantined:
		return true
	case protocol.BlockRetiring:
		return b.MetaVersionID != ""
	}
	return false
}

// Build makes the index of a tenant's block records, written at now, in
// the given flavour. Blocks are sorted by ULID, so the same records give
// the same index but for UpdatedAt.
func Build(flavour string, blocks []records.Block, now time.Time) (Index, error) {
	idx := Index{Version: 1, Blocks: []*Block{}, BlockDeletionMarks: []*BlockDeletionMark{}, UpdatedAt: now.Unix()}
	switch flavour {
	case Cortex:
	case Mimir:
		idx.Version = 2
	default:
		return Index{}, fmt.Errorf("bucketindex: flavour %q: want %s or %s", flavour, Cortex, Mimir)
	}
	for _, b := range blocks {
		if !Visible(b) {
			continue
		}
		e, err := entry(b)
		if err != nil {
			return Index{}, err
		}
		idx.Blocks = append(idx.Blocks, e)
		if b.State == protocol.BlockRetiring && b.MarkVersionID != "" {
			idx.BlockDeletionMarks = append(idx.BlockDeletionMarks, &BlockDeletionMark{ID: e.ID, DeletionTime: b.MarkedAt / 1000})
		}
	}
	sort.Slice(idx.Blocks, func(i, j int) bool { return idx.Blocks[i].ID.Compare(idx.Blocks[j].ID) < 0 })
	sort.Slice(idx.BlockDeletionMarks, func(i, j int) bool {
		return idx.BlockDeletionMarks[i].ID.Compare(idx.BlockDeletionMarks[j].ID) < 0
	})
	return idx, nil
}

// uploadedAt is when block b was complete in the bucket (ms), which
// Cortex's and Mimir's own updaters take from meta.json's last-modified
// time: the record's PublishedAt (an upload's meta.json written, the
// PUBLISH of one of Sluice's blocks recorded, after its PUT). Not the
// commit (Arrived): an output is published after it, and a split's
// partitions carry their source's arrival, minutes before them for a big
// block, which would shorten the grace a querier gives store-gateways to
// load them. Arrived stands in for records written before PublishedAt
// was.
func uploadedAt(b records.Block) int64 {
	if b.PublishedAt != 0 {
		return b.PublishedAt
	}
	return b.Arrived
}

// entry is block b's line in the index, from its record and meta.json.
func entry(b records.Block) (*Block, error) {
	id, err := ulid.ParseStrict(b.ID)
	if err != nil {
		return nil, fmt.Errorf("bucketindex: block %s: %w", b.Key(), err)
	}
	e := &Block{ID: id, MinTime: b.MinT, MaxTime: b.MaxT, UploadedAt: uploadedAt(b) / 1000}
	if meta, err := blockmeta.Parse([]byte(b.Meta), b.Key()); err == nil {
		e.CompactionLevel = meta.Compaction.Level
		e.OutOfOrder = strings.Contains(strings.Join(meta.Compaction.Hints, ","), outOfOrderHint)
		if meta.Thanos != nil {
			e.Source = meta.Thanos.Source
			if len(meta.Thanos.Labels) > 0 {
				e.Labels = meta.Thanos.Labels
				e.CompactorShardID = meta.Thanos.Labels[compactorShardLabel]
			}
		}
	}
	e.SegmentsFormat, e.SegmentsNum = segments(b.Files)
	return e, nil
}

// segments is the chunk segments' format and count when they are
// chunks/000001 … in order, as the index records them.
func segments(files []records.ObjectVersion) (string, int) {
	var chunks []string
	for _, f := range files {
		if strings.HasPrefix(f.RelPath, "chunks/") {
			chunks = append(chunks, f.RelPath)
		}
	}
	sort.Strings(chunks)
	for i, c := range chunks {
		if c != fmt.Sprintf("chunks/%06d", i+1) {
			return "", 0
		}
	}
	if len(chunks) == 0 {
		return "", 0
	}
	return SegmentsFormat1Based6Digits, len(chunks)
}

// Encode is the index as Cortex and Mimir write it: JSON, gzipped, the
// header naming bucket-index.json.
func Encode(idx Index) ([]byte, error) {
	body, err := json.Marshal(idx)
	if err != nil {
		return nil, fmt.Errorf("bucketindex: encode: %w", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Name = Name
	if _, err := zw.Write(body); err != nil {
		return nil, fmt.Errorf("bucketindex: gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("bucketindex: gzip: %w", err)
	}
	return buf.Bytes(), nil
}

// The S3 user metadata Sluice puts on an index (keys lowercase, as S3
// returns them), so a writer can tell from a HEAD alone whether the index
// in the bucket already says what it would write, and how old it is to its
// readers: its ContentSum, and its UpdatedAt in unix seconds.
const (
	MetadataContentSum = "sluice-content-sha256"
	MetadataUpdatedAt  = "sluice-updated-at"
)

// ContentSum is the SHA-256, hex, of what an index tells its readers:
// every field but UpdatedAt. Two indexes built from the same records have
// the same sum whenever they were built.
func ContentSum(idx Index) (string, error) {
	idx.UpdatedAt = 0
	body, err := json.Marshal(idx)
	if err != nil {
		return "", fmt.Errorf("bucketindex: content sum: %w", err)
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// Decode reads an index as Cortex and Mimir read it.
func Decode(data []byte) (Index, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return Index{}, fmt.Errorf("bucketindex: not gzip: %w", err)
	}
	defer zr.Close()
	var idx Index
	if err := json.NewDecoder(zr).Decode(&idx); err != nil {
		return Index{}, fmt.Errorf("bucketindex: decode: %w", err)
	}
	return idx, nil
}
