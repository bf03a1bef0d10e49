// Package blockmeta reads, validates and writes the JSON files that describe
// a Prometheus TSDB block in an object store: meta.json (the Prometheus
// fields, the Thanos section and Cortex's partition_info extension),
// deletion-mark.json and no-compact-mark.json.
//
// Every JSON object keeps the members this package does not know in an
// Unknown map, so Parse followed by Marshal loses nothing another writer put
// there. Marshal is deterministic: typed members in a fixed order, unknown
// members sorted by key, tab-indented like Prometheus and Thanos write it.
package blockmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/oklog/ulid/v2"
)

// File names inside a block directory and under a block's key prefix.
const (
	MetaFilename          = "meta.json"
	IndexFilename         = "index"
	ChunksDirname         = "chunks"
	TombstonesFilename    = "tombstones"
	DeletionMarkFilename  = "deletion-mark.json"
	NoCompactMarkFilename = "no-compact-mark.json"
)

// Supported format versions.
const (
	// TSDBVersion1 is the only Prometheus meta.json version there is.
	TSDBVersion1 = 1
	// ThanosVersion1 is the only Thanos section version; 0 (absent) means 1.
	ThanosVersion1 = 1
)

// ErrInvalid is wrapped by every error that reports a malformed or
// unsupported meta.json or marker.
var ErrInvalid = errors.New("invalid block metadata")

// Meta is a block's meta.json: the Prometheus block meta plus the optional
// Thanos section.
type Meta struct {
	ULID    ulid.ULID `json:"ulid"`
	MinTime int64     `json:"minTime"`
	MaxTime int64     `json:"maxTime"`
	Stats   Stats     `json:"stats"`
	// Compaction tells how the block came to be.
	Compaction Compaction `json:"compaction"`
	// Version of the meta.json format: always 1.
	Version int `json:"version"`
	// Thanos is nil for a plain Prometheus block.
	Thanos *Thanos `json:"thanos,omitempty"`

	// Unknown holds the top-level members this package does not name.
	Unknown map[string]json.RawMessage `json:"-"`
}

// Stats counts what the block holds.
type Stats struct {
	NumSamples          uint64 `json:"numSamples,omitempty"`
	NumFloatSamples     uint64 `json:"numFloatSamples,omitempty"`
	NumHistogramSamples uint64 `json:"numHistogramSamples,omitempty"`
	NumSeries           uint64 `json:"numSeries,omitempty"`
	NumChunks           uint64 `json:"numChunks,omitempty"`
	NumTombstones       uint64 `json:"numTombstones,omitempty"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// Compaction is the Prometheus compaction section.
type Compaction struct {
	// Level is 1 for a block cut from a head, max(source levels)+1 after a
	// compaction.
	Level int `json:"level"`
	// Sources are the ULIDs of all level-1 blocks the block descends from.
	Sources   []ulid.ULID `json:"sources,omitempty"`
	Deletable bool        `json:"deletable,omitempty"`
	// Parents are the blocks directly compacted into this one.
	Parents []BlockDesc `json:"parents,omitempty"`
	Failed  bool        `json:"failed,omitempty"`
	Hints   []string    `json:"hints,omitempty"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// BlockDesc names a parent block and its time range.
type BlockDesc struct {
	ULID    ulid.ULID `json:"ulid"`
	MinTime int64     `json:"minTime"`
	MaxTime int64     `json:"maxTime"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// Thanos is the "thanos" section Thanos, Cortex and Mimir write.
type Thanos struct {
	// Version 0 (absent) and 1 both mean version 1.
	Version int `json:"version,omitempty"`
	// Labels are the external labels of the producer (never part of a series).
	Labels     map[string]string `json:"labels"`
	Downsample Downsample        `json:"downsample"`
	// Source names the writer: "sidecar", "receive", "compactor", ...
	Source string `json:"source"`
	// Files lists every file of the block sorted by RelPath, with sizes
	// (meta.json itself has none).
	Files []File `json:"files,omitempty"`
	// Extensions is free-form in Thanos; Cortex puts partition_info there.
	Extensions *Extensions `json:"extensions,omitempty"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// Downsample is the Thanos downsampling section.
type Downsample struct {
	// Resolution in milliseconds; 0 is raw data.
	Resolution int64 `json:"resolution"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// File is one file of a block, relative to the block directory.
type File struct {
	RelPath   string `json:"rel_path"`
	SizeBytes int64  `json:"size_bytes,omitempty"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// Extensions is thanos.extensions as Cortex writes it.
type Extensions struct {
	PartitionInfo *PartitionInfo `json:"partition_info,omitempty"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// PartitionInfo is Cortex's partition_info: the block holds exactly the
// series with labels.StableHash(lset) % PartitionCount == PartitionID of
// its partitioned group.
type PartitionInfo struct {
	PartitionedGroupID           uint32 `json:"partitioned_group_id"`
	PartitionCount               int    `json:"partition_count"`
	PartitionID                  int    `json:"partition_id"`
	PartitionedGroupCreationTime int64  `json:"partitioned_group_creation_time"`

	Unknown map[string]json.RawMessage `json:"-"`
}

// The plain* types have the same fields without the methods, so
// encoding/json handles the typed members and we handle Unknown.
type (
	plainMeta          Meta
	plainStats         Stats
	plainCompaction    Compaction
	plainBlockDesc     BlockDesc
	plainThanos        Thanos
	plainDownsample    Downsample
	plainFile          File
	plainExtensions    Extensions
	plainPartitionInfo PartitionInfo
)

func (m Meta) MarshalJSON() ([]byte, error) { return marshalObject(plainMeta(m), m.Unknown) }
func (m *Meta) UnmarshalJSON(b []byte) (err error) {
	m.Unknown, err = unmarshalObject(b, (*plainMeta)(m))
	return err
}

func (s Stats) MarshalJSON() ([]byte, error) { return marshalObject(plainStats(s), s.Unknown) }
func (s *Stats) UnmarshalJSON(b []byte) (err error) {
	s.Unknown, err = unmarshalObject(b, (*plainStats)(s))
	return err
}

func (c Compaction) MarshalJSON() ([]byte, error) {
	return marshalObject(plainCompaction(c), c.Unknown)
}
func (c *Compaction) UnmarshalJSON(b []byte) (err error) {
	c.Unknown, err = unmarshalObject(b, (*plainCompaction)(c))
	return err
}

func (d BlockDesc) MarshalJSON() ([]byte, error) {
	return marshalObject(plainBlockDesc(d), d.Unknown)
}
func (d *BlockDesc) UnmarshalJSON(b []byte) (err error) {
	d.Unknown, err = unmarshalObject(b, (*plainBlockDesc)(d))
	return err
}

func (t Thanos) MarshalJSON() ([]byte, error) { return marshalObject(plainThanos(t), t.Unknown) }
func (t *Thanos) UnmarshalJSON(b []byte) (err error) {
	t.Unknown, err = unmarshalObject(b, (*plainThanos)(t))
	return err
}

func (d Downsample) MarshalJSON() ([]byte, error) {
	return marshalObject(plainDownsample(d), d.Unknown)
}
func (d *Downsample) UnmarshalJSON(b []byte) (err error) {
	d.Unknown, err = unmarshalObject(b, (*plainDownsample)(d))
	return err
}

func (f File) MarshalJSON() ([]byte, error) { return marshalObject(plainFile(f), f.Unknown) }
func (f *File) UnmarshalJSON(b []byte) (err error) {
	f.Unknown, err = unmarshalObject(b, (*plainFile)(f))
	return err
}

func (e Extensions) MarshalJSON() ([]byte, error) {
	return marshalObject(plainExtensions(e), e.Unknown)
}
func (e *Extensions) UnmarshalJSON(b []byte) (err error) {
	e.Unknown, err = unmarshalObject(b, (*plainExtensions)(e))
	return err
}

func (p PartitionInfo) MarshalJSON() ([]byte, error) {
	return marshalObject(plainPartitionInfo(p), p.Unknown)
}
func (p *PartitionInfo) UnmarshalJSON(b []byte) (err error) {
	p.Unknown, err = unmarshalObject(b, (*plainPartitionInfo)(p))
	return err
}

// Parse decodes and validates a meta.json. blockKey names the block in
// errors (an object key such as "tenant/01H.../meta.json" or a directory).
// The error wraps ErrInvalid and says what is wrong: corrupt or truncated
// JSON, a missing ulid, minTime >= maxTime, an unsupported version.
func Parse(data []byte, blockKey string) (*Meta, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("meta.json of block %s: %s: %w", blockKey, fmt.Sprintf(format, args...), ErrInvalid)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, invalid("empty file")
	}
	var m Meta
	if err := json.Unmarshal(data, &m); err != nil {
		var syn *json.SyntaxError
		switch {
		case strings.Contains(err.Error(), "unexpected end of JSON input"):
			return nil, invalid("truncated JSON (%d bytes)", len(data))
		case errors.As(err, &syn):
			return nil, invalid("corrupt JSON at byte %d: %v", syn.Offset, err)
		default:
			return nil, invalid("%v", err)
		}
	}
	if m.ULID == (ulid.ULID{}) {
		return nil, invalid("missing ulid")
	}
	if m.MinTime >= m.MaxTime {
		return nil, invalid("minTime %d is not before maxTime %d", m.MinTime, m.MaxTime)
	}
	if m.Version != TSDBVersion1 {
		return nil, invalid("unsupported version %d (want %d)", m.Version, TSDBVersion1)
	}
	if m.Thanos != nil {
		if v := m.Thanos.Version; v != 0 && v != ThanosVersion1 {
			return nil, invalid("unsupported thanos.version %d (want %d)", v, ThanosVersion1)
		}
		if pi, ok := m.PartitionInfo(); ok {
			if pi.PartitionCount < 1 || pi.PartitionID < 0 || pi.PartitionID >= pi.PartitionCount {
				return nil, invalid("partition_info: partition_id %d of partition_count %d", pi.PartitionID, pi.PartitionCount)
			}
		}
	}
	return &m, nil
}

// Marshal encodes the meta deterministically (same Meta, same bytes),
// tab-indented with a trailing newline.
func (m *Meta) Marshal() ([]byte, error) {
	return indent(m)
}

func indent(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "\t"); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// PartitionInfo returns Cortex's partition_info when the block carries one.
func (m *Meta) PartitionInfo() (PartitionInfo, bool) {
	if m.Thanos == nil || m.Thanos.Extensions == nil || m.Thanos.Extensions.PartitionInfo == nil {
		return PartitionInfo{}, false
	}
	return *m.Thanos.Extensions.PartitionInfo, true
}

// SetPartitionInfo stores pi in thanos.extensions.partition_info, creating
// the Thanos section if needed. A nil pi removes it.
func (m *Meta) SetPartitionInfo(pi *PartitionInfo) {
	if pi == nil {
		if m.Thanos != nil && m.Thanos.Extensions != nil {
			m.Thanos.Extensions.PartitionInfo = nil
		}
		return
	}
	if m.Thanos == nil {
		m.Thanos = &Thanos{Labels: map[string]string{}}
	}
	if m.Thanos.Extensions == nil {
		m.Thanos.Extensions = &Extensions{}
	}
	c := *pi
	m.Thanos.Extensions.PartitionInfo = &c
}

// ReadDir reads and validates dir/meta.json; errors name dir.
func ReadDir(dir string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFilename))
	if err != nil {
		return nil, fmt.Errorf("read meta.json of block %s: %w", dir, err)
	}
	return Parse(b, dir)
}

// WriteDir writes m to dir/meta.json atomically (temporary file, rename).
func (m *Meta) WriteDir(dir string) error {
	b, err := m.Marshal()
	if err != nil {
		return fmt.Errorf("marshal meta.json of block %s: %w", m.ULID, err)
	}
	path := filepath.Join(dir, MetaFilename)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// GatherFiles lists a block directory's files the way Thanos records them in
// thanos.files: every chunks segment and the index with their sizes, and
// meta.json without one, sorted by RelPath. Other files (tombstones) are
// not listed, as Thanos does not upload them.
func GatherFiles(dir string) ([]File, error) {
	entries, err := os.ReadDir(filepath.Join(dir, ChunksDirname))
	if err != nil {
		return nil, fmt.Errorf("list chunks of block %s: %w", dir, err)
	}
	var files []File
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("stat chunks of block %s: %w", dir, err)
		}
		files = append(files, File{RelPath: ChunksDirname + "/" + e.Name(), SizeBytes: fi.Size()})
	}
	fi, err := os.Stat(filepath.Join(dir, IndexFilename))
	if err != nil {
		return nil, fmt.Errorf("stat index of block %s: %w", dir, err)
	}
	files = append(files, File{RelPath: IndexFilename, SizeBytes: fi.Size()}, File{RelPath: MetaFilename})
	// os.ReadDir sorts, and "chunks/" < "index" < "meta.json".
	return files, nil
}
