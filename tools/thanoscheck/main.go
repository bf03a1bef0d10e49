// Command thanoscheck proves that Sluice's downsampled blocks are the ones
// Thanos writes. It lives in a module of its own because Thanos' packages
// do not build beside the Prometheus version Sluice uses (see
// docs/block-engine.md). Given a raw block and Sluice's 5m and 1h
// downsamples of it, it runs Thanos' own downsample.Downsample on the raw
// block (and on its 5m output), then compares every series: the same
// labels, the same chunk boundaries, byte-identical aggregate chunks, and
// every aggregate of Sluice's chunks decoded by Thanos' AggrChunk. It
// exits 1 on the first difference. make thanos-downsample-check runs it.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"
	"github.com/thanos-io/thanos/pkg/block/metadata"
	"github.com/thanos-io/thanos/pkg/compact/downsample"
)

func main() {
	raw := flag.String("raw", "", "the raw block's directory")
	s5m := flag.String("sluice-5m", "", "Sluice's 5m downsample of it")
	s1h := flag.String("sluice-1h", "", "Sluice's 1h downsample of the 5m one")
	work := flag.String("work", os.TempDir(), "where Thanos writes its own downsamples")
	golden := flag.String("golden", "", "also write Thanos' 5m and 1h chunks of every series to this file (gzipped JSON) for shared/downsample's golden test")
	flag.Parse()
	if err := run(*raw, *s5m, *s1h, *work, *golden); err != nil {
		fmt.Fprintln(os.Stderr, "thanoscheck:", err)
		os.Exit(1)
	}
}

func run(raw, s5m, s1h, work, golden string) error {
	ctx := context.Background()
	t5m, took, err := thanosDownsample(ctx, raw, work, downsample.ResLevel1)
	if err != nil {
		return err
	}
	// The line scripts/thanos-downsample-check.sh reads Thanos' time from.
	fmt.Printf("thanos-seconds-to-5m=%.3f\n", took.Seconds())
	if err := compare(s5m, t5m, downsample.ResLevel1); err != nil {
		return fmt.Errorf("5m: %w", err)
	}
	t1h, _, err := thanosDownsample(ctx, t5m, work, downsample.ResLevel2)
	if err != nil {
		return err
	}
	if err := compare(s1h, t1h, downsample.ResLevel2); err != nil {
		return fmt.Errorf("1h: %w", err)
	}
	if golden != "" {
		return writeGolden(golden, t5m, t1h)
	}
	return nil
}

// goldenSeries is one series of a golden file: its labels and its chunks
// as Thanos wrote them.
type goldenSeries struct {
	Labels string        `json:"labels"`
	Chunks []goldenChunk `json:"chunks"`
}

type goldenChunk struct {
	MinTime int64  `json:"minTime"`
	MaxTime int64  `json:"maxTime"`
	Bytes   []byte `json:"bytes"`
}

// writeGolden writes {"5m": [...], "1h": [...]} of Thanos' blocks,
// gzipped.
func writeGolden(path, t5m, t1h string) error {
	out := map[string][]goldenSeries{}
	for name, dir := range map[string]string{"5m": t5m, "1h": t1h} {
		ss, _, err := read(dir)
		if err != nil {
			return err
		}
		for _, s := range ss {
			g := goldenSeries{Labels: s.lset.String()}
			for _, c := range s.chks {
				g.Chunks = append(g.Chunks, goldenChunk{MinTime: c.MinTime, MaxTime: c.MaxTime, Bytes: c.Chunk.Bytes()})
			}
			out[name] = append(out[name], g)
		}
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.ModTime = time.Time{}
	if err := json.NewEncoder(zw).Encode(out); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// thanosDownsample runs Thanos' Downsample on the block in dir and times
// it (the call alone, as dstool times Sluice's).
func thanosDownsample(ctx context.Context, dir, work string, res int64) (string, time.Duration, error) {
	meta, err := metadata.ReadFromDir(dir)
	if err != nil {
		return "", 0, err
	}
	b, err := tsdb.OpenBlock(slog.New(slog.DiscardHandler), dir, downsample.NewPool(), nil)
	if err != nil {
		return "", 0, err
	}
	defer b.Close()
	started := time.Now()
	id, err := downsample.Downsample(ctx, log.NewNopLogger(), meta, b, work, res)
	if err != nil {
		return "", 0, fmt.Errorf("thanos downsample of %s: %w", dir, err)
	}
	return filepath.Join(work, id.String()), time.Since(started), nil
}

type series struct {
	lset labels.Labels
	chks []chunks.Meta
}

// read loads every series of the block with its chunks' bytes copied.
func read(dir string) ([]series, *metadata.Meta, error) {
	meta, err := metadata.ReadFromDir(dir)
	if err != nil {
		return nil, nil, err
	}
	b, err := tsdb.OpenBlock(slog.New(slog.DiscardHandler), dir, downsample.NewPool(), nil)
	if err != nil {
		return nil, nil, err
	}
	defer b.Close()
	ir, err := b.Index()
	if err != nil {
		return nil, nil, err
	}
	defer ir.Close()
	cr, err := b.Chunks()
	if err != nil {
		return nil, nil, err
	}
	defer cr.Close()
	k, v := index.AllPostingsKey()
	p, err := ir.Postings(context.Background(), k, v)
	if err != nil {
		return nil, nil, err
	}
	var out []series
	var lb labels.ScratchBuilder
	for p.Next() {
		var chks []chunks.Meta
		if err := ir.Series(p.At(), &lb, &chks); err != nil {
			return nil, nil, err
		}
		for i := range chks {
			c, _, err := cr.ChunkOrIterable(chks[i])
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", lb.Labels(), err)
			}
			ac := downsample.AggrChunk(append([]byte(nil), c.Bytes()...))
			if c.Encoding() != downsample.ChunkEncAggr {
				return nil, nil, fmt.Errorf("%s: chunk encoding %v, not Thanos' aggregate one", lb.Labels(), c.Encoding())
			}
			chks[i].Chunk = &ac
		}
		out = append(out, series{lb.Labels(), chks})
	}
	return out, meta, p.Err()
}

// compare checks Sluice's block against Thanos' series by series.
func compare(sluiceDir, thanosDir string, res int64) error {
	got, gm, err := read(sluiceDir)
	if err != nil {
		return fmt.Errorf("sluice's block: %w", err)
	}
	want, wm, err := read(thanosDir)
	if err != nil {
		return fmt.Errorf("thanos' block: %w", err)
	}
	if gm.Thanos.Downsample.Resolution != res || wm.Thanos.Downsample.Resolution != res {
		return fmt.Errorf("resolutions %d (sluice) and %d (thanos), want %d", gm.Thanos.Downsample.Resolution, wm.Thanos.Downsample.Resolution, res)
	}
	if gm.MinTime != wm.MinTime || gm.MaxTime != wm.MaxTime || gm.Stats.NumSeries != wm.Stats.NumSeries ||
		gm.Stats.NumChunks != wm.Stats.NumChunks || gm.Stats.NumSamples != wm.Stats.NumSamples {
		return fmt.Errorf("meta.json differs: sluice %d–%d %+v, thanos %d–%d %+v", gm.MinTime, gm.MaxTime, gm.Stats, wm.MinTime, wm.MaxTime, wm.Stats)
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d series, thanos has %d", len(got), len(want))
	}
	chunksSeen, windows, histograms := 0, 0, 0
	for i := range got {
		g, w := got[i], want[i]
		if !labels.Equal(g.lset, w.lset) {
			return fmt.Errorf("series %d is %s, thanos has %s", i, g.lset, w.lset)
		}
		if len(g.chks) != len(w.chks) {
			return fmt.Errorf("%s: %d chunks, thanos cut %d", g.lset, len(g.chks), len(w.chks))
		}
		for j := range g.chks {
			gc, wc := g.chks[j], w.chks[j]
			if gc.MinTime != wc.MinTime || gc.MaxTime != wc.MaxTime {
				return fmt.Errorf("%s chunk %d: %d–%d, thanos %d–%d", g.lset, j, gc.MinTime, gc.MaxTime, wc.MinTime, wc.MaxTime)
			}
			gac := gc.Chunk.(*downsample.AggrChunk)
			for a := downsample.AggrCount; a <= downsample.AggrCounter; a++ {
				gs, gerr := samples(gac, a)
				if a == downsample.AggrCounter && len(gs) > 0 && gs[0].h != "" {
					histograms++
				}
				ws, werr := samples(wc.Chunk.(*downsample.AggrChunk), a)
				if (gerr == nil) != (werr == nil) || len(gs) != len(ws) {
					return fmt.Errorf("%s chunk %d %s: thanos decodes %d samples (err %v) from sluice's, %d (err %v) from its own", g.lset, j, a, len(gs), gerr, len(ws), werr)
				}
				for k := range gs {
					if gs[k] != ws[k] {
						return fmt.Errorf("%s chunk %d %s sample %d: sluice %v, thanos %v", g.lset, j, a, k, gs[k], ws[k])
					}
				}
				if a == downsample.AggrCount {
					windows += len(gs)
				}
			}
			if string(gac.Bytes()) != string(wc.Chunk.Bytes()) {
				return fmt.Errorf("%s chunk %d: same samples, different bytes", g.lset, j)
			}
			chunksSeen++
		}
	}
	fmt.Printf("resolution %d ms: %d series, %d chunks (%d of native histograms), %d windows: byte-identical to thanos' own downsample, decoded by thanos' AggrChunk\n", res, len(got), chunksSeen, histograms, windows)
	return nil
}

type point struct {
	t int64
	v float64
	h string // a float histogram, as text
}

// samples decodes one aggregate with Thanos' own AggrChunk: floats, or
// the float histograms of a native histogram series' sum and counter.
func samples(c *downsample.AggrChunk, a downsample.AggrType) ([]point, error) {
	x, err := c.Get(a)
	if errors.Is(err, downsample.ErrAggrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []point
	it := x.Iterator(nil)
	for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
		switch vt {
		case chunkenc.ValFloat:
			t, v := it.At()
			out = append(out, point{t: t, v: v})
		case chunkenc.ValFloatHistogram, chunkenc.ValHistogram:
			t, fh := it.AtFloatHistogram(nil)
			out = append(out, point{t: t, h: fmt.Sprintf("%s hint=%d", fh, fh.CounterResetHint)})
		}
	}
	return out, it.Err()
}
