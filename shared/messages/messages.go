// Package messages defines what Sluice's functions tell each other through
// SQS: compaction jobs, cleaner notes, block ops and plan requests, with
// their FIFO message groups and explicit deduplication ids.
//
// Deduplication ids are never content-based: PUT, DELETE, PUT of the same
// body within five minutes must not collapse into one.
package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Kind tags every message body.
type Kind string

// Message kinds.
const (
	KindJob     Kind = "job"
	KindCleaner Kind = "cleaner"
	KindOp      Kind = "op"
	KindPlan    Kind = "plan"
	KindSweep   Kind = "sweep"
	KindRetry   Kind = "retry"
	KindIndex   Kind = "index"
)

// IndexRequest asks the uploader to write a tenant's bucket index from
// the records (Cortex and Mimir buckets).
type IndexRequest struct {
	Tenant string `json:"tenant"`
	Why    string `json:"why"`
	// Scheduled is the periodic pass's request, which keeps an index that
	// already says what the records say while it is young enough; a
	// change's request always writes.
	Scheduled bool `json:"scheduled,omitempty"`
}

// Job asks the compact function for partition Partition of version Version
// of a group.
type Job struct {
	Tenant    string `json:"tenant"`
	Group     string `json:"group"`
	Version   int64  `json:"version"`
	Partition int    `json:"partition"`
	// Output is the output block's ULID, the job's FIFO message group.
	Output string `json:"output"`
	// Resend counts re-sends by the sweep (part of the dedup id).
	Resend int64 `json:"resend,omitempty"`
}

// CleanerNote asks the cleaner to look at a group.
type CleanerNote struct {
	Tenant string `json:"tenant"`
	Group  string `json:"group"`
	// Version is the version the sender saw (0 = whatever is current).
	Version int64  `json:"version,omitempty"`
	Why     string `json:"why"`
	// Nonce makes the dedup id unique per distinct event.
	Nonce string `json:"nonce"`
}

// OpKind is what the uploader does to a block key.
type OpKind string

// Block op kinds.
const (
	// OpPublish writes meta.json of a LIVE output.
	OpPublish OpKind = "PUBLISH"
	// OpMark writes deletion-mark.json of a RETIRING block.
	OpMark OpKind = "MARK"
	// OpDelete deletes every version the record names (meta.json first)
	// of a DELETED or DISCARDED block.
	OpDelete OpKind = "DELETE"
	// OpDeleteStray deletes the named versions, which no record names
	// (re-uploads of retired blocks, losing attempts' objects); never a
	// version the block's record names.
	OpDeleteStray OpKind = "DELETE_STRAY"
	// OpNoCompact writes no-compact-mark.json of a QUARANTINED block, as
	// Thanos and Cortex write it, so their tools leave it alone too.
	OpNoCompact OpKind = "NO_COMPACT"
	// OpUnmarkNoCompact deletes the no-compact mark Sluice wrote for a
	// block that `sluice retry` released (by its VersionId).
	OpUnmarkNoCompact OpKind = "UNMARK_NO_COMPACT"
)

// MaxStrayPerOp bounds the versions one DELETE_STRAY op names, so its body
// stays far below SQS's 256 KiB (a version is about 80 bytes); more are
// sent as several ops.
const MaxStrayPerOp = 500

// StrayVersion is an object version to delete that no record names.
type StrayVersion struct {
	RelPath   string `json:"rel"`
	VersionID string `json:"vid"`
}

// BlockOp is one PUBLISH / MARK / DELETE of one block key, valid only
// while the block's gen is Gen.
type BlockOp struct {
	Op     OpKind         `json:"op"`
	Tenant string         `json:"tenant"`
	Block  string         `json:"block"`
	Gen    int64          `json:"gen"`
	Stray  []StrayVersion `json:"stray,omitempty"`
	// Nonce distinguishes two DELETE_STRAY ops of one gen.
	Nonce string `json:"nonce,omitempty"`
}

// PlanRequest asks the planner to plan one group range.
type PlanRequest struct {
	Tenant string `json:"tenant"`
	Group  string `json:"group"`
	Why    string `json:"why"`
}

// RetryRequest asks the planner to release a quarantined block or group
// (`sluice retry`): exactly one of Block and Group is set.
type RetryRequest struct {
	Tenant string `json:"tenant"`
	Block  string `json:"block,omitempty"`
	Group  string `json:"group,omitempty"`
	// Nonce makes the dedup id unique per request.
	Nonce string `json:"nonce"`
}

type envelope struct {
	Sluice Kind            `json:"sluice"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// Encode wraps a message in its envelope.
func Encode(m any) (string, error) {
	var k Kind
	switch m.(type) {
	case Job:
		k = KindJob
	case CleanerNote:
		k = KindCleaner
	case BlockOp:
		k = KindOp
	case PlanRequest:
		k = KindPlan
	case RetryRequest:
		k = KindRetry
	case IndexRequest:
		k = KindIndex
	default:
		return "", fmt.Errorf("messages: cannot encode %T", m)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("messages: encode %s: %w", k, err)
	}
	out, err := json.Marshal(envelope{Sluice: k, Body: body})
	return string(out), err
}

// ErrNotSluice is returned by Decode for a body that is not a Sluice
// envelope (the planner then tries it as an S3 event).
var ErrNotSluice = errors.New("messages: not a sluice message")

// Decode unwraps an envelope into a Job, CleanerNote, BlockOp, PlanRequest
// or Sweep. Unknown fields are rejected so a malformed message fails
// loudly (and reaches the DLQ) instead of acting on zero values.
func Decode(body string) (any, error) {
	var env envelope
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Sluice == "" {
		return nil, ErrNotSluice
	}
	var m any
	switch env.Sluice {
	case KindJob:
		m = &Job{}
	case KindCleaner:
		m = &CleanerNote{}
	case KindOp:
		m = &BlockOp{}
	case KindPlan:
		m = &PlanRequest{}
	case KindRetry:
		m = &RetryRequest{}
	case KindIndex:
		m = &IndexRequest{}
	case KindSweep:
		return Sweep{}, nil
	default:
		return nil, fmt.Errorf("messages: unknown kind %q", env.Sluice)
	}
	dec := json.NewDecoder(bytes.NewReader(env.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("messages: decode %s: %w", env.Sluice, err)
	}
	switch v := m.(type) {
	case *Job:
		if v.Tenant == "" || v.Group == "" || v.Version < 1 || v.Partition < 0 || v.Output == "" {
			return nil, fmt.Errorf("messages: incomplete job %+v", *v)
		}
		return *v, nil
	case *CleanerNote:
		if v.Tenant == "" || v.Group == "" {
			return nil, fmt.Errorf("messages: incomplete cleaner note %+v", *v)
		}
		return *v, nil
	case *BlockOp:
		if v.Tenant == "" || v.Block == "" || v.Gen < 0 || (v.Gen == 0 && v.Op != OpDeleteStray) {
			return nil, fmt.Errorf("messages: incomplete block op %+v", *v)
		}
		switch v.Op {
		case OpPublish, OpMark, OpDelete, OpDeleteStray, OpNoCompact, OpUnmarkNoCompact:
		default:
			return nil, fmt.Errorf("messages: unknown block op %q", v.Op)
		}
		return *v, nil
	case *PlanRequest:
		if v.Tenant == "" || v.Group == "" {
			return nil, fmt.Errorf("messages: incomplete plan request %+v", *v)
		}
		return *v, nil
	case *IndexRequest:
		if v.Tenant == "" {
			return nil, fmt.Errorf("messages: an index request names its tenant: %+v", *v)
		}
		return *v, nil
	case *RetryRequest:
		if v.Tenant == "" || (v.Block == "") == (v.Group == "") {
			return nil, fmt.Errorf("messages: a retry request names one block or one group: %+v", *v)
		}
		return *v, nil
	}
	return nil, fmt.Errorf("messages: unreachable kind %q", env.Sluice)
}

// Sweep asks the cleaner to run its sweep; the schedule sends it.
type Sweep struct{}

// SweepBody is the body the schedule (EventBridge → cleaner-events.fifo)
// and the local runner's timer send.
const SweepBody = `{"sluice":"sweep"}`
