package protocol

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/shared/planning"
)

// VersionRef names version Version of a group: "<tenant>/<group>@v<v>",
// the value of a claimed source's claimedBy and of every log line about
// the version.
type VersionRef struct {
	Tenant  string
	Group   planning.GroupKey
	Version int64
}

func (r VersionRef) String() string { return fmt.Sprintf("%s/%s@v%d", r.Tenant, r.Group, r.Version) }

// ParseVersionRef reads what VersionRef.String writes.
func ParseVersionRef(s string) (VersionRef, error) {
	head, v, ok := strings.Cut(s, "@v")
	slash := strings.LastIndex(head, "/")
	if !ok || slash <= 0 {
		return VersionRef{}, fmt.Errorf("protocol: %q is no version reference (<tenant>/<group>@v<version>)", s)
	}
	g, err := planning.ParseGroupKey(head[slash+1:])
	if err != nil {
		return VersionRef{}, fmt.Errorf("protocol: version reference %q: %w", s, err)
	}
	version, err := strconv.ParseInt(v, 10, 64)
	if err != nil || version < 1 {
		return VersionRef{}, fmt.Errorf("protocol: version reference %q: bad version %q", s, v)
	}
	r := VersionRef{Tenant: head[:slash], Group: g, Version: version}
	if r.String() != s {
		return VersionRef{}, fmt.Errorf("protocol: %q is no canonical version reference", s)
	}
	return r, nil
}

// PartitionRef names partition Partition of a version: "<version ref>/p<p>",
// the producedBy of the partition's output.
type PartitionRef struct {
	VersionRef
	Partition int
}

func (r PartitionRef) String() string { return fmt.Sprintf("%s/p%d", r.VersionRef, r.Partition) }

// ParsePartitionRef reads what PartitionRef.String writes.
func ParsePartitionRef(s string) (PartitionRef, error) {
	i := strings.LastIndex(s, "/p")
	if i < 0 {
		return PartitionRef{}, fmt.Errorf("protocol: %q is no partition reference (<version ref>/p<partition>)", s)
	}
	v, err := ParseVersionRef(s[:i])
	if err != nil {
		return PartitionRef{}, err
	}
	p, err := strconv.Atoi(s[i+2:])
	if err != nil || p < 0 {
		return PartitionRef{}, fmt.Errorf("protocol: partition reference %q: bad partition %q", s, s[i+2:])
	}
	return PartitionRef{VersionRef: v, Partition: p}, nil
}
