package downsample_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/downsample/downsampletest"
)

// goldenSeries is one series of testdata/thanos-golden.json.gz: the chunks
// Thanos' own downsample.Downsample wrote for it (scripts/
// thanos-downsample-check.sh derives the file by running Thanos, which
// cannot be a dependency of this module, on downsampletest.Golden()).
type goldenSeries struct {
	Labels string `json:"labels"`
	Chunks []struct {
		MinTime int64  `json:"minTime"`
		MaxTime int64  `json:"maxTime"`
		Bytes   []byte `json:"bytes"`
	} `json:"chunks"`
}

// TestSameBytesAsThanos: Sluice's 5m and 1h downsamples of the golden raw
// block hold, series by series, the chunks Thanos wrote: the same
// boundaries and the same bytes.
func TestSameBytesAsThanos(t *testing.T) {
	f, err := os.Open("testdata/thanos-golden.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var golden map[string][]goldenSeries
	if err := json.NewDecoder(zr).Decode(&golden); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, m := raw(t, filepath.Join(dir, "raw"), downsampletest.Make(downsampletest.Golden()), false)
	out5 := downsampleDir(t, src, m, filepath.Join(dir, "5m"), downsample.Res5m)
	out1h := downsampleDir(t, out5.Dir, out5.Meta, filepath.Join(dir, "1h"), downsample.Res1h)
	for name, d := range map[string]string{"5m": out5.Dir, "1h": out1h.Dir} {
		got, _ := readSeries(t, d)
		want := golden[name]
		if len(want) == 0 || len(got) != len(want) {
			t.Fatalf("%s: %d series, Thanos wrote %d", name, len(got), len(want))
		}
		chunks := 0
		for _, w := range want {
			g, ok := got[w.Labels]
			if !ok || len(g) != len(w.Chunks) {
				t.Errorf("%s %s: %d chunks, Thanos cut %d", name, w.Labels, len(g), len(w.Chunks))
				continue
			}
			for i, wc := range w.Chunks {
				gc := g[i]
				if gc.MinTime != wc.MinTime || gc.MaxTime != wc.MaxTime || !bytes.Equal(gc.Chunk.Bytes(), wc.Bytes) {
					t.Errorf("%s %s chunk %d: %d–%d (%d bytes), Thanos %d–%d (%d bytes)", name, w.Labels, i,
						gc.MinTime, gc.MaxTime, len(gc.Chunk.Bytes()), wc.MinTime, wc.MaxTime, len(wc.Bytes))
					break
				}
				chunks++
			}
		}
		t.Logf("%s: %d series, %d chunks byte-identical to Thanos'", name, len(want), chunks)
	}
}
