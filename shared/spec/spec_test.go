package spec

import "testing"

func TestGoMemLimit(t *testing.T) {
	for _, tc := range []struct {
		memoryMB int
		want     string
	}{
		{4096, "3687MiB"},
		{512, "448MiB"},
		{256, "192MiB"},
	} {
		if got := (Function{MemoryMB: tc.memoryMB}).GoMemLimit(); got != tc.want {
			t.Errorf("GoMemLimit of %d MB = %s, want %s", tc.memoryMB, got, tc.want)
		}
	}
}
