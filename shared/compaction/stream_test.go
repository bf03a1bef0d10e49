package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/chunkstream"
)

// detachChunks moves each source's chunks/ out of its directory, so only a
// SourceChunks stream can reach them, and returns the opener.
func detachChunks(t *testing.T, srcs []string) func(context.Context, *blockmeta.Meta) (tsdb.ChunkReader, error) {
	t.Helper()
	where := map[string]string{}
	for _, d := range srcs {
		moved := d + ".chunks"
		if err := os.Rename(filepath.Join(d, "chunks"), moved); err != nil {
			t.Fatal(err)
		}
		where[filepath.Base(d)] = moved
	}
	return func(ctx context.Context, m *blockmeta.Meta) (tsdb.ChunkReader, error) {
		dir := where[m.ULID.String()]
		var sizes []int64
		if m.Thanos != nil {
			for _, f := range m.Thanos.Files {
				if strings.HasPrefix(f.RelPath, "chunks/") {
					sizes = append(sizes, f.SizeBytes)
				}
			}
		}
		if len(sizes) == 0 {
			var err error
			if sizes, err = chunkstream.DirSizes(dir); err != nil {
				return nil, err
			}
		}
		return chunkstream.NewReader(ctx, chunkstream.DirSource{Dir: dir, Sizes: sizes}, sizes, nil, chunkstream.ReaderOptions{}), nil
	}
}

// A job whose sources' chunks are streamed and whose output's chunks go to
// a sink writes the same block, byte for byte, as one that reads and
// writes chunk files: the same index, segments and meta.json (segment
// cuts included: the sources and the output have several segments).
func TestStreamedChunksWriteTheSameBlock(t *testing.T) {
	w := newWorld(t)
	raw := w.gen("src", blockgen.Options{Blocks: 3, Series: 300, ReplicationFactor: 2, Histograms: true, Seed: 21, ThanosFiles: true})
	const seg = 48 << 10
	// Sources of several segments each: a first compaction's outputs.
	var srcs []string
	for p := 0; p < 2; p++ {
		j := w.job(raw, filepath.Join(w.base, "pre"), "pre", p, 2)
		j.SegmentSize = seg
		res, err := Compact(context.Background(), nil, j)
		if err != nil {
			t.Fatal(err)
		}
		if segs, _ := chunkstream.DirSizes(filepath.Join(res.Dir, "chunks")); len(segs) < 3 {
			t.Fatalf("source %s has %d segments; the test wants several", res.Dir, len(segs))
		}
		srcs = append(srcs, res.Dir)
	}
	for _, n := range []int{1, 4} {
		for p := 0; p < n; p++ {
			plain := w.job(srcs, filepath.Join(w.base, fmt.Sprintf("plain-%d", n)), "g", p, n)
			plain.SegmentSize = seg
			want, err := Compact(context.Background(), nil, plain)
			if err != nil {
				t.Fatal(err)
			}
			if want.Empty {
				continue
			}
			streamed := plain
			streamed.OutDir = filepath.Join(w.base, fmt.Sprintf("streamed-%d", n))
			sink := filepath.Join(w.base, fmt.Sprintf("sink-%d-%d", n, p))
			streamed.Chunks = chunkstream.DirSink{Dir: sink}
			streamedSrcs := copyBlocks(t, srcs, filepath.Join(w.base, fmt.Sprintf("copy-%d-%d", n, p)))
			streamed.SourceDirs = streamedSrcs
			streamed.SourceChunks = detachChunks(t, streamedSrcs)
			got, err := Compact(context.Background(), nil, streamed)
			if err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(filepath.Join(got.Dir, "chunks")); len(entries) != 0 {
				t.Errorf("N=%d p=%d: the streamed output wrote %d chunk files locally", n, p, len(entries))
			}
			for _, f := range want.Meta.Thanos.Files {
				a, err := os.ReadFile(filepath.Join(want.Dir, f.RelPath))
				if err != nil {
					t.Fatal(err)
				}
				from := got.Dir
				if strings.HasPrefix(f.RelPath, "chunks/") {
					from = sink
					f.RelPath = strings.TrimPrefix(f.RelPath, "chunks/")
				}
				b, err := os.ReadFile(filepath.Join(from, f.RelPath))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("N=%d p=%d: %s differs between the streamed and the file job", n, p, f.RelPath)
				}
			}
			if len(got.Meta.Thanos.Files) != len(want.Meta.Thanos.Files) {
				t.Errorf("N=%d p=%d: thanos.files lists %d files, the file job's %d", n, p, len(got.Meta.Thanos.Files), len(want.Meta.Thanos.Files))
			}
		}
	}
}

// copyBlocks copies block directories under base.
func copyBlocks(t *testing.T, dirs []string, base string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		to := filepath.Join(base, filepath.Base(d))
		if err := os.CopyFS(to, os.DirFS(d)); err != nil {
			t.Fatal(err)
		}
		out = append(out, to)
	}
	return out
}

// A streamed source whose chunks or index are damaged fails the job with
// an error that blames it (the pipeline quarantines the block), and
// nothing is left in the output directory.
func TestStreamedCorruptSourceIsBlamed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(blockDir string) error
		chunks  bool // the damage is in the chunks
	}{
		{"flipped chunk byte", func(d string) error { return flip(filepath.Join(d+".chunks", "000001"), 0.6) }, true},
		{"truncated segment", func(d string) error { return truncate(filepath.Join(d+".chunks", "000001"), 0.5) }, true},
		{"missing segment", func(d string) error { return os.Remove(filepath.Join(d+".chunks", "000001")) }, true},
		// Found by reading the indexes again, not the streams.
		{"flipped index byte", func(d string) error { return flip(filepath.Join(d, "index"), 0.3) }, false},
	} {
		for _, thanosFiles := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/thanos.files=%v", tc.name, thanosFiles), func(t *testing.T) {
				w := newWorld(t)
				srcs := w.gen("src", blockgen.Options{Blocks: 3, Series: 100, ThanosFiles: thanosFiles})
				job := w.job(srcs, filepath.Join(w.base, "out"), "g", 0, 1)
				job.SourceChunks = detachChunks(t, srcs)
				job.Chunks = chunkstream.DirSink{Dir: filepath.Join(w.base, "sink")}
				victim := srcs[1]
				if err := tc.corrupt(victim); err != nil {
					t.Fatal(err)
				}
				_, err := Compact(context.Background(), nil, job)
				if err == nil {
					t.Fatal("compacting a corrupt streamed source succeeded")
				}
				if blamed, ok := BlamedSource(err); !ok || blamed.String() != filepath.Base(victim) {
					t.Fatalf("error blames %v (%v), want source %s: %v", blamed, ok, filepath.Base(victim), err)
				}
				if tc.chunks != errors.Is(err, chunkstream.ErrCorrupt) {
					t.Errorf("error is about corrupt chunks: %v, want %v: %v", !tc.chunks, tc.chunks, err)
				}
				if entries, _ := os.ReadDir(filepath.Join(w.base, "out")); len(entries) != 0 {
					t.Errorf("left behind %v", entries)
				}
			})
		}
	}
}
