package pipeline

import (
	"os"
	"runtime/debug"
	"testing"
)

// A process that runs compaction jobs collects at JobGCPercent, unless its
// environment sets GOGC: the operator's setting wins.
func TestSetJobGCTarget(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	for _, tc := range []struct {
		name   string
		gogc   string // "" unsets it
		before int
		want   int
	}{
		{"GOGC unset", "", 100, JobGCPercent},
		{"GOGC set", "77", 77, 77},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc) // restored after the test
			if tc.gogc == "" {
				os.Unsetenv("GOGC")
			}
			debug.SetGCPercent(tc.before)
			SetJobGCTarget()
			if got := debug.SetGCPercent(tc.before); got != tc.want {
				t.Errorf("GC percent after SetJobGCTarget: %d; want %d", got, tc.want)
			}
		})
	}
}
