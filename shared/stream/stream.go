// Package stream names what Sluice never mixes: the blocks of one producer
// of series. Two Prometheus servers of one tenant write series with the
// same names; only their external labels (meta.json thanos.labels) tell
// them apart. Thanos groups blocks by those labels and the downsampling
// resolution, and Sluice does the same: a stream is (resolution, external
// labels minus the replica labels), and blocks of different streams never
// share a group, a version or an output.
//
// Replica labels are the labels by which replicas of one producer differ
// (Thanos' --deduplication.replica-label; Cortex's and Mimir's ingesters
// write __ingester_id__). Blocks that differ only in them are one stream:
// compacted vertically with duplicates removed, and the output carries the
// stream's labels, without the replica labels.
package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

// IDLength is the length of an ID: 16 hex digits of a SHA-256.
const IDLength = 16

// Stream is one producer's identity.
type Stream struct {
	// Labels are the external labels without the replica labels; never nil.
	Labels map[string]string
	// Resolution is thanos.downsample.resolution in ms (0: raw samples).
	Resolution int64
}

// Of returns the stream of a block from its meta.json.
func Of(m *blockmeta.Meta, replicaLabels []string) Stream {
	s := Stream{Labels: map[string]string{}}
	if m.Thanos == nil {
		return s
	}
	s.Resolution = m.Thanos.Downsample.Resolution
	for k, v := range m.Thanos.Labels {
		if !slices.Contains(replicaLabels, k) {
			s.Labels[k] = v
		}
	}
	return s
}

// ID is the stream's stable name in records and keys: 16 hex digits of a
// SHA-256 over the resolution and the sorted labels. It holds only [0-9a-f],
// so it can stand in keys and FIFO message group ids.
func (s Stream) ID() string {
	h := sha256.New()
	fmt.Fprintf(h, "resolution=%d\n", s.Resolution)
	for _, k := range s.names() {
		// Lengths first: no label set can spell another's bytes.
		fmt.Fprintf(h, "%d:%s=%d:%s\n", len(k), k, len(s.Labels[k]), s.Labels[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:IDLength]
}

func (s Stream) names() []string {
	names := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// String is how status and logs show the stream: `{cluster="east"}` for raw
// blocks, `{cluster="east"} @5m` for downsampled ones, `{}` for a producer
// without external labels.
func (s Stream) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range s.names() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, s.Labels[k])
	}
	b.WriteByte('}')
	if s.Resolution > 0 {
		b.WriteString(" @" + ResolutionName(s.Resolution))
	}
	return b.String()
}

// ResolutionName names a resolution as Thanos does: raw, 5m, 1h, or the
// milliseconds.
func ResolutionName(ms int64) string {
	switch ms {
	case 0:
		return "raw"
	case 5 * 60 * 1000:
		return "5m"
	case 60 * 60 * 1000:
		return "1h"
	}
	return fmt.Sprintf("%dms", ms)
}

// ValidID reports whether id has the form of an ID.
func ValidID(id string) bool {
	if len(id) != IDLength {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ParseReplicaLabels reads a comma-separated list of label names
// (SLUICE_REPLICA_LABELS); blanks are ignored.
func ParseReplicaLabels(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" && !slices.Contains(out, part) {
			out = append(out, part)
		}
	}
	return out
}
