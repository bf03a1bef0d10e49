package downsample_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/downsample/downsampletest"
)

// TestCompactingDownsampledBlocks: two consecutive 5m blocks of one stream
// compact into one whose every window is what the raw samples give — the
// aggregate chunks carried over, not decoded and lost.
func TestCompactingDownsampledBlocks(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	span := 48 * time.Hour
	var dirs []string
	var all [][]downsampletest.Series
	for i := 0; i < 2; i++ {
		ss := downsampletest.Make(downsampletest.Options{Start: start + int64(i)*span.Milliseconds(), Span: span, Counters: 5, Seed: 9})
		all = append(all, ss)
		src, m := raw(t, filepath.Join(dir, "raw", string(rune('a'+i))), ss, false)
		r := downsampleDir(t, src, m, filepath.Join(dir, "5m"), downsample.Res5m)
		dirs = append(dirs, r.Dir)
	}
	res, err := compaction.Compact(context.Background(), nopLogger(), compaction.Job{
		SourceDirs: dirs, ULID: ulid.Make(), OutDir: filepath.Join(dir, "out"),
		ThanosLabels: map[string]string{"cluster": "eu1"}, Resolution: downsample.Res5m,
	})
	if err != nil {
		t.Fatalf("compacting two 5m blocks: %v", err)
	}
	got, m := readSeries(t, res.Dir)
	if m.Thanos.Downsample.Resolution != downsample.Res5m {
		t.Fatalf("output resolution %d", m.Thanos.Downsample.Resolution)
	}
	checked := 0
	for k, s := range all[0] {
		joined := s
		joined.Ts = append(append([]int64(nil), s.Ts...), all[1][k].Ts...)
		joined.Vs = append(append([]float64(nil), s.Vs...), all[1][k].Vs...)
		want, counter := expected(joined, downsample.Res5m)
		if len(want) == 0 {
			continue
		}
		checkWindows(t, s.Labels.String(), got[s.Labels.String()], downsample.Res5m, want, counter)
		checked += len(want)
	}
	t.Logf("%d windows checked", checked)
}

// TestOverlappingDownsampledBlocksAreRefused: two replicas of one 5m range
// in one group would need their aggregate chunks merged sample by sample,
// which cannot be done; the compaction fails, naming the series, rather
// than write a block that lost them.
func TestOverlappingDownsampledBlocksAreRefused(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	ss := downsampletest.Make(downsampletest.Options{Start: start, Span: 48 * time.Hour, Counters: 2, Seed: 4})
	var dirs []string
	for i := 0; i < 2; i++ {
		src, m := raw(t, filepath.Join(dir, "raw", string(rune('a'+i))), ss, false)
		dirs = append(dirs, downsampleDir(t, src, m, filepath.Join(dir, "5m"), downsample.Res5m).Dir)
	}
	out := filepath.Join(dir, "out")
	_, err := compaction.Compact(context.Background(), nopLogger(), compaction.Job{
		SourceDirs: dirs, ULID: ulid.Make(), OutDir: out, Resolution: downsample.Res5m,
	})
	if err == nil || !strings.Contains(err.Error(), "cannot be merged") {
		t.Fatalf("compacting two overlapping 5m blocks: err %v, want a refusal", err)
	}
	if left, _ := os.ReadDir(out); len(left) != 0 {
		t.Errorf("the refused compaction left %d entries", len(left))
	}
}
