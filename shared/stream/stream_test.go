package stream

import (
	"testing"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

func meta(labels map[string]string, res int64) *blockmeta.Meta {
	return &blockmeta.Meta{Thanos: &blockmeta.Thanos{Labels: labels, Downsample: blockmeta.Downsample{Resolution: res}}}
}

func TestStreams(t *testing.T) {
	replicas := []string{"replica", "__ingester_id__"}
	east := Of(meta(map[string]string{"cluster": "east", "replica": "a"}, 0), replicas)
	tests := []struct {
		name string
		m    *blockmeta.Meta
		same bool
	}{
		{"another replica of east is east", meta(map[string]string{"cluster": "east", "replica": "b"}, 0), true},
		{"east without a replica label is east", meta(map[string]string{"cluster": "east"}, 0), true},
		{"west is not east", meta(map[string]string{"cluster": "west", "replica": "a"}, 0), false},
		{"east downsampled to 5m is not raw east", meta(map[string]string{"cluster": "east"}, 300000), false},
		{"one more label is another stream", meta(map[string]string{"cluster": "east", "region": "eu"}, 0), false},
		{"no labels at all is another stream", meta(nil, 0), false},
		{"a label value that spells a name is another stream", meta(map[string]string{"cluster": "east\n1:x=1:y"}, 0), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Of(tc.m, replicas)
			if got := s.ID() == east.ID(); got != tc.same {
				t.Fatalf("%s vs %s: same stream = %v, want %v", s, east, got, tc.same)
			}
			if !ValidID(s.ID()) {
				t.Fatalf("ID %q is not valid", s.ID())
			}
		})
	}
	if got, want := east.String(), `{cluster="east"}`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if got := Of(&blockmeta.Meta{}, nil); got.Labels == nil || got.String() != "{}" {
		t.Errorf("a plain Prometheus block: %+v %s", got, got)
	}
	if got, want := Of(meta(map[string]string{"a": "1"}, 3600000), nil).String(), `{a="1"} @1h`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if got := ParseReplicaLabels(" replica, ,__ingester_id__,replica "); len(got) != 2 || got[0] != "replica" || got[1] != "__ingester_id__" {
		t.Errorf("ParseReplicaLabels = %q", got)
	}
	for _, bad := range []string{"", "0123456789abcdeg", "0123456789ABCDEF", "0123456789abcdef0"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}
