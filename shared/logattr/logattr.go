// Package logattr builds, in one place, the log attributes that say what a
// line is about: tenant, stream, group, version, partition, block. Every
// handler's logger carries one Subject, so a CloudWatch Logs Insights query
// by group or by block finds every line of its story under the same names
// (docs/operations.md has the queries).
package logattr

import (
	"log/slog"

	"github.com/sluice-dev/sluice/shared/planning"
)

// Subject is what a log line is about. Zero fields are left out.
type Subject struct {
	Tenant string
	// Group is the group's key; its stream goes with it.
	Group    planning.GroupKey
	hasGroup bool
	// Version of the group, if the line is about one (0: none).
	Version int64
	// Partition of the version, if the line is about one.
	Partition    int
	hasPartition bool
	Block        string
}

// LogValue lays the subject out as attributes: tenant, stream, group,
// version, partition, block.
func (s Subject) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 6)
	if s.Tenant != "" {
		attrs = append(attrs, slog.String("tenant", s.Tenant))
	}
	if s.hasGroup {
		// Not the group's level: "level" is every line's severity.
		attrs = append(attrs, slog.String("stream", s.Group.Stream), slog.String("group", s.Group.String()))
	}
	if s.Version > 0 {
		attrs = append(attrs, slog.Int64("version", s.Version))
	}
	if s.hasPartition {
		attrs = append(attrs, slog.Int("partition", s.Partition))
	}
	if s.Block != "" {
		attrs = append(attrs, slog.String("block", s.Block))
	}
	return slog.GroupValue(attrs...)
}

// Attr is s as one attribute with no key: the standard handlers inline
// its attributes at the line's top level, where a query finds them.
func (s Subject) Attr() slog.Attr { return slog.Attr{Value: slog.AnyValue(s)} }

// Block is a line about a tenant's block.
func Block(tenant, block string) slog.Attr { return Subject{Tenant: tenant, Block: block}.Attr() }

// Group is a line about a group (any version).
func Group(tenant string, g planning.GroupKey) slog.Attr {
	return Subject{Tenant: tenant, Group: g, hasGroup: true}.Attr()
}

// Version is a line about one version of a group.
func Version(tenant string, g planning.GroupKey, v int64) slog.Attr {
	return Subject{Tenant: tenant, Group: g, hasGroup: true, Version: v}.Attr()
}

// Partition is a line about one partition job of a version.
func Partition(tenant string, g planning.GroupKey, v int64, p int) slog.Attr {
	return Subject{Tenant: tenant, Group: g, hasGroup: true, Version: v, Partition: p, hasPartition: true}.Attr()
}

// GroupBlock is a line about a block in a group's story (a source, a
// marked block, a retried one).
func GroupBlock(tenant string, g planning.GroupKey, block string) slog.Attr {
	return Subject{Tenant: tenant, Group: g, hasGroup: true, Block: block}.Attr()
}

// Tenant is a line about a tenant as a whole.
func Tenant(tenant string) slog.Attr { return Subject{Tenant: tenant}.Attr() }

// VersionBlock is a line about a block in one version's story (an output
// or a source of that version).
func VersionBlock(tenant string, g planning.GroupKey, v int64, block string) slog.Attr {
	return Subject{Tenant: tenant, Group: g, hasGroup: true, Version: v, Block: block}.Attr()
}

// InVersion names the version a line is also about, for a logger that
// already carries the tenant and block (it adds stream, group and version
// only, so no key appears twice).
func InVersion(g planning.GroupKey, v int64) slog.Attr {
	return Subject{Group: g, hasGroup: true, Version: v}.Attr()
}
