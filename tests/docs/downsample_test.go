package docs

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/equiv"
	"github.com/sluice-dev/sluice/shared/planning"
)

// The blocks promtool writes from the README's OpenMetrics file (real
// backfilled blocks: no Thanos section, maxTime at the last sample + 1 ms)
// downsample to what their samples give: every 5m window, and every 1h
// window of the 5m block's own downsample, of every series holds the
// count, sum, min and max of its raw samples (equiv.CheckDownsampled).
func TestPromtoolBlocksDownsampleToTheirSamples(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeOpenMetrics(t, filepath.Join(dir, "metrics.om"))
	cmd := exec.Command(filepath.Join(promtoolDir(t), "promtool"), "tsdb", "create-blocks-from", "openmetrics", "metrics.om", "blocks")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "blocks"))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	down := func(src string, pool chunkenc.Pool, res int64) string {
		t.Helper()
		b, err := tsdb.OpenBlock(nil, src, pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		m, err := blockmeta.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		out, err := downsample.Block(ctx, logger, b, m, t.TempDir(), ulid.Make(), res)
		if err != nil {
			t.Fatal(err)
		}
		return out.Dir
	}
	blocks := 0
	for _, e := range entries {
		if _, err := ulid.ParseStrict(e.Name()); err != nil || !e.IsDir() {
			continue
		}
		blocks++
		raw := filepath.Join(dir, "blocks", e.Name())
		five := down(raw, nil, planning.Resolution5m)
		if err := equiv.CheckDownsampled(ctx, []string{raw}, []string{five}, nil); err != nil {
			t.Errorf("block %s at 5m: %v", e.Name(), err)
		}
		hour := down(five, downsample.NewPool(), planning.Resolution1h)
		if err := equiv.CheckDownsampled(ctx, []string{raw}, []string{hour}, nil); err != nil {
			t.Errorf("block %s at 1h: %v", e.Name(), err)
		}
	}
	if blocks == 0 {
		t.Fatal("promtool wrote no block")
	}
}
