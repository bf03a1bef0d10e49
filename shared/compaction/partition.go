package compaction

import (
	"crypto/sha256"
	"encoding/binary"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/planning"
)

// MaxPartitions is the largest partition count a job may use (one DynamoDB
// transaction writes a group version with all its partition items).
const MaxPartitions = 64

// PartitionOf returns the partition of n that holds lset:
// labels.StableHash(lset) % n, the hash Cortex and Prometheus' query
// sharding use (never Labels.Hash, which is not stable across versions).
func PartitionOf(lset labels.Labels, n int) int {
	return int(labels.StableHash(lset) % uint64(n))
}

func isPowerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// SourceHoldsPartition reports whether the source block m may hold series of
// partition p of n. It is false only when m's own partition_info proves
// otherwise (planning.Holds, which the planner's sizing uses too): a
// source without partition_info, or with counts that are not powers of
// two, is read.
func SourceHoldsPartition(m *blockmeta.Meta, p, n int) bool {
	pi, ok := m.PartitionInfo()
	if !ok {
		return true
	}
	return planning.Holds(pi.PartitionCount, pi.PartitionID, p, n)
}

// OutputULID derives the ULID of partition p of version v of a group: its
// time is createdAt (milliseconds; use the group version's creation time),
// its entropy the first 80 bits of SHA-256 over (tenant, group, version,
// partition). Every attempt of a job therefore writes the same keys, and
// distinct jobs never collide.
func OutputULID(createdAt time.Time, tenant, group string, version, partition int) ulid.ULID {
	h := sha256.New()
	h.Write([]byte("sluice/output-ulid/v1\x00"))
	writeString := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	writeString(tenant)
	writeString(group)
	var n [16]byte
	binary.BigEndian.PutUint64(n[:8], uint64(version))
	binary.BigEndian.PutUint64(n[8:], uint64(partition))
	h.Write(n[:])
	var id ulid.ULID
	ms := createdAt.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	if err := id.SetTime(uint64(ms)); err != nil {
		// Only after the year 10889.
		_ = id.SetTime(ulid.MaxTime())
	}
	_ = id.SetEntropy(h.Sum(nil)[:10])
	return id
}
