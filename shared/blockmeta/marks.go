package blockmeta

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
)

// DeletionMarkVersion1 and NoCompactMarkVersion1 are the only marker
// versions Thanos defines.
const (
	DeletionMarkVersion1  = 1
	NoCompactMarkVersion1 = 1
)

// DeletionMark is <block>/deletion-mark.json in Thanos' format: the block is
// to be deleted once DeletionTime is older than the deletion delay.
type DeletionMark struct {
	ID ulid.ULID `json:"id"`
	// DeletionTime is when the block was marked, in unix seconds.
	DeletionTime int64 `json:"deletion_time"`
	Version      int   `json:"version"`
}

// NewDeletionMark returns a version-1 mark for id made at t.
func NewDeletionMark(id ulid.ULID, t time.Time) DeletionMark {
	return DeletionMark{ID: id, DeletionTime: t.Unix(), Version: DeletionMarkVersion1}
}

// Marshal encodes the mark deterministically.
func (d DeletionMark) Marshal() ([]byte, error) {
	if d.Version == 0 {
		d.Version = DeletionMarkVersion1
	}
	return indent(d)
}

// ParseDeletionMark decodes and validates a deletion-mark.json; blockKey
// names the block in errors.
func ParseDeletionMark(data []byte, blockKey string) (*DeletionMark, error) {
	var d DeletionMark
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("deletion-mark.json of block %s: %v: %w", blockKey, err, ErrInvalid)
	}
	switch {
	case d.ID == (ulid.ULID{}):
		return nil, fmt.Errorf("deletion-mark.json of block %s: missing id: %w", blockKey, ErrInvalid)
	case d.Version != DeletionMarkVersion1:
		return nil, fmt.Errorf("deletion-mark.json of block %s: unsupported version %d: %w", blockKey, d.Version, ErrInvalid)
	case d.DeletionTime <= 0:
		return nil, fmt.Errorf("deletion-mark.json of block %s: missing deletion_time: %w", blockKey, ErrInvalid)
	}
	return &d, nil
}

// NoCompactMark is <block>/no-compact-mark.json in Thanos' format: such a
// block is never compacted.
type NoCompactMark struct {
	ID      ulid.ULID `json:"id"`
	Version int       `json:"version"`
	// Details is free text from whoever set the mark.
	Details string `json:"details,omitempty"`
	// NoCompactTime is when the mark was set, in unix seconds.
	NoCompactTime int64 `json:"no_compact_time"`
	// Reason is one of Thanos' reasons ("manual", "index-stats", ...).
	Reason string `json:"reason"`
}

// ManualNoCompactReason is Thanos' reason for a mark set by hand or by a
// tool other than its compactor; Sluice's quarantine uses it, with its own
// reason in Details.
const ManualNoCompactReason = "manual"

// NewNoCompactMark returns a version-1 mark for id made at t.
func NewNoCompactMark(id ulid.ULID, t time.Time, details string) NoCompactMark {
	return NoCompactMark{ID: id, Version: NoCompactMarkVersion1, Details: details, NoCompactTime: t.Unix(), Reason: ManualNoCompactReason}
}

// Marshal encodes the mark deterministically.
func (n NoCompactMark) Marshal() ([]byte, error) {
	if n.Version == 0 {
		n.Version = NoCompactMarkVersion1
	}
	return indent(n)
}

// ParseNoCompactMark decodes and validates a no-compact-mark.json; blockKey
// names the block in errors.
func ParseNoCompactMark(data []byte, blockKey string) (*NoCompactMark, error) {
	var n NoCompactMark
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("no-compact-mark.json of block %s: %v: %w", blockKey, err, ErrInvalid)
	}
	switch {
	case n.ID == (ulid.ULID{}):
		return nil, fmt.Errorf("no-compact-mark.json of block %s: missing id: %w", blockKey, ErrInvalid)
	case n.Version != NoCompactMarkVersion1:
		return nil, fmt.Errorf("no-compact-mark.json of block %s: unsupported version %d: %w", blockKey, n.Version, ErrInvalid)
	}
	return &n, nil
}
