package protocol

import (
	"testing"

	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/stream"
)

func TestRefsRoundTrip(t *testing.T) {
	g := planning.GroupKey{Stream: stream.Stream{Labels: map[string]string{"job": "a"}}.ID(), Level: 2, RangeStart: 1700000000000}
	v := VersionRef{Tenant: "team-a", Group: g, Version: 7}
	p := PartitionRef{VersionRef: v, Partition: 3}
	if got, err := ParseVersionRef(v.String()); err != nil || got != v {
		t.Errorf("version ref %s: got %+v, %v", v, got, err)
	}
	if got, err := ParsePartitionRef(p.String()); err != nil || got != p {
		t.Errorf("partition ref %s: got %+v, %v", p, got, err)
	}
	for _, bad := range []string{
		"", "team-a", "team-a/" + g.String(), "team-a/" + g.String() + "@v", "team-a/" + g.String() + "@v0",
		"team-a/" + g.String() + "@vx", "/" + g.String() + "@v1", "team-a/nogroup@v1", "team-a/" + g.String() + "@v01",
	} {
		if _, err := ParseVersionRef(bad); err == nil {
			t.Errorf("version ref %q parsed", bad)
		}
	}
	for _, bad := range []string{v.String(), v.String() + "/p", v.String() + "/p-1", v.String() + "/px", "upload"} {
		if _, err := ParsePartitionRef(bad); err == nil {
			t.Errorf("partition ref %q parsed", bad)
		}
	}
}
