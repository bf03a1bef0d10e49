package pipeline

import "testing"

// The planner reads a block's record before registering it only when the
// block may be registered already: Sluice's own outputs (level above 1,
// thanos.source "compactor") and downsampled blocks. Uploads go straight
// to the conditional registration.
func TestMayBeRegistered(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta string
		want bool
	}{
		{"sidecar upload", `{"ulid":"01HK3QGM00JS67MS0A0DFMSX3V","minTime":0,"maxTime":7200000,"version":1,"compaction":{"level":1},"thanos":{"source":"sidecar","downsample":{"resolution":0}}}`, false},
		{"promtool block, no thanos section", `{"ulid":"01HK3QGM00JS67MS0A0DFMSX3V","minTime":0,"maxTime":7200000,"version":1,"compaction":{"level":1,"sources":["01HK3QGM00JS67MS0A0DFMSX3V"]}}`, false},
		{"receiver upload", `{"ulid":"01HK3QGM00JS67MS0A0DFMSX3V","minTime":0,"maxTime":7200000,"version":1,"compaction":{"level":1},"thanos":{"source":"receive"}}`, false},
		{"compactor output", `{"ulid":"01HK3QGM00JS67MS0A0DFMSX3V","minTime":0,"maxTime":7200000,"version":1,"compaction":{"level":2},"thanos":{"source":"compactor"}}`, true},
		{"level 3 without a thanos section", `{"ulid":"01HK3QGM00JS67MS0A0DFMSX3V","minTime":0,"maxTime":7200000,"version":1,"compaction":{"level":3}}`, true},
		{"level-1 block a compactor wrote (a split)", `{"ulid":"01HK3QGM00JS67MS0A0DFMSX3V","minTime":0,"maxTime":7200000,"version":1,"compaction":{"level":1},"thanos":{"source":"compactor"}}`, true},
		{"downsampled upload keeps its source", `{"ulid":"01HK3QGM00JS67MS0A0DFMSX3V","minTime":0,"maxTime":7200000,"version":1,"compaction":{"level":1},"thanos":{"source":"sidecar","downsample":{"resolution":300000}}}`, true},
		{"corrupt meta.json", `{"compaction":`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayBeRegistered([]byte(tc.meta)); got != tc.want {
				t.Errorf("mayBeRegistered(%s) = %v, want %v", tc.meta, got, tc.want)
			}
		})
	}
}
