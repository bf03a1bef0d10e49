// Command dstool writes raw blocks and Sluice's 5m and 1h downsamples of
// them, for tools/thanoscheck to hold against Thanos' own downsampling
// (scripts/thanos-downsample-check.sh). Two raw blocks: the test series of
// every shape (shared/downsample/downsampletest, resets at chunk and
// window edges, stale markers, gaps) over 48h, and a blockgen block of
// many realistic series; first, the small block behind shared/downsample's
// golden file (downsampletest.Golden). It prints one line per raw block:
// "<name> <raw dir> <5m dir> <1h dir> <raw samples> <seconds to 5m>".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/downsample/downsampletest"
)

func main() {
	out := flag.String("out", "", "directory to write into (required)")
	series := flag.Int("series", 2000, "series of the blockgen block")
	flag.Parse()
	if *out == "" {
		log.Fatal("-out is required")
	}
	ctx := context.Background()
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	golden, gm, err := downsampletest.Write(ctx, filepath.Join(*out, "golden"), downsampletest.Make(downsampletest.Golden()), false)
	if err != nil {
		log.Fatal(err)
	}
	if err := both(ctx, *out, "golden", golden, gm); err != nil {
		log.Fatal(err)
	}
	shapes, m, err := downsampletest.Write(ctx, filepath.Join(*out, "shapes"),
		downsampletest.Make(downsampletest.Options{Start: start.UnixMilli() + 7, Span: 48 * time.Hour, Counters: 200, Seed: 3, Histograms: true}), false)
	if err != nil {
		log.Fatal(err)
	}
	if err := both(ctx, *out, "shapes", shapes, m); err != nil {
		log.Fatal(err)
	}
	bs, err := blockgen.Generate(filepath.Join(*out, "gen"), blockgen.Options{
		Tenant: "ds", Start: start, BlockRange: 48 * time.Hour, Series: *series, SamplesPerSeries: 48 * 60 * 4,
		ExternalLabels: map[string]string{"cluster": "eu1"}, Seed: 5,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := both(ctx, *out, "gen", bs[0].Dir, bs[0].Meta); err != nil {
		log.Fatal(err)
	}
}

// both downsamples the raw block to 5m and that to 1h, and prints its line.
func both(ctx context.Context, out, name, dir string, m *blockmeta.Meta) error {
	r5, took, err := one(ctx, dir, m, filepath.Join(out, name+"-5m"), downsample.Res5m)
	if err != nil {
		return err
	}
	r1, _, err := one(ctx, r5.Dir, r5.Meta, filepath.Join(out, name+"-1h"), downsample.Res1h)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s %s %d %.3f\n", name, dir, r5.Dir, r1.Dir, r5.RawSamples, took.Seconds())
	return nil
}

func one(ctx context.Context, dir string, m *blockmeta.Meta, out string, res int64) (downsample.Result, time.Duration, error) {
	b, err := tsdb.OpenBlock(nil, dir, downsample.NewPool(), nil)
	if err != nil {
		return downsample.Result{}, 0, err
	}
	defer b.Close()
	started := time.Now()
	r, err := downsample.Block(ctx, slog.New(slog.DiscardHandler), b, m, out, ulid.Make(), res)
	return r, time.Since(started), err
}
