package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/chunkstream"
)

// Partitions compacted together in one pass are byte for byte the blocks
// each partition's job writes alone — all N of one source (a split), a
// subset, over replicated sources, with chunks streamed both ways.
func TestCompactManyWritesWhatEachJobWrites(t *testing.T) {
	w := newWorld(t)
	one := w.gen("one", blockgen.Options{Blocks: 1, Series: 400, Histograms: true, Seed: 31, ThanosFiles: true})
	rf := w.gen("rf", blockgen.Options{Blocks: 2, Series: 200, ReplicationFactor: 2, Histograms: true, Seed: 32, ThanosFiles: true})
	for _, tc := range []struct {
		name     string
		srcs     []string
		n        int
		parts    []int
		streamed bool
	}{
		{"split one source in 8", one, 8, []int{0, 1, 2, 3, 4, 5, 6, 7}, false},
		{"split one source in 8, streamed", one, 8, []int{0, 1, 2, 3, 4, 5, 6, 7}, true},
		{"two of four over replicas", rf, 4, []int{3, 1}, false},
		{"all of one", rf, 1, []int{0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := filepath.Join(w.base, tc.name)
			var jobs []Job
			for _, p := range tc.parts {
				j := w.job(tc.srcs, filepath.Join(base, "many"), "g", p, tc.n)
				j.SegmentSize = 32 << 10
				jobs = append(jobs, j)
			}
			if tc.streamed {
				srcs := copyBlocks(t, tc.srcs, filepath.Join(base, "copy"))
				open := detachChunks(t, srcs)
				for i := range jobs {
					jobs[i].SourceDirs, jobs[i].SourceChunks = srcs, open
					jobs[i].Chunks = chunkstream.DirSink{Dir: filepath.Join(base, fmt.Sprintf("sink-%d", jobs[i].Partition))}
				}
			}
			many, err := CompactMany(context.Background(), nil, jobs)
			if err != nil {
				t.Fatal(err)
			}
			written := 0
			for i, p := range tc.parts {
				alone := w.job(tc.srcs, filepath.Join(base, fmt.Sprintf("alone-%d", p)), "g", p, tc.n)
				alone.SegmentSize = 32 << 10
				want, err := Compact(context.Background(), nil, alone)
				if err != nil {
					t.Fatal(err)
				}
				got := many[i]
				if got.Empty != want.Empty || got.NumSeries != want.NumSeries || got.NumSamples != want.NumSamples {
					t.Fatalf("partition %d: %d series, %d samples (empty %v); alone %d, %d (empty %v)", p, got.NumSeries, got.NumSamples, got.Empty, want.NumSeries, want.NumSamples, want.Empty)
				}
				if want.Empty {
					continue
				}
				written++
				for _, f := range want.Meta.Thanos.Files {
					a, err := os.ReadFile(filepath.Join(want.Dir, f.RelPath))
					if err != nil {
						t.Fatal(err)
					}
					from := filepath.Join(got.Dir, f.RelPath)
					if tc.streamed && filepath.Dir(f.RelPath) == "chunks" {
						from = filepath.Join(jobs[i].Chunks.(chunkstream.DirSink).Dir, filepath.Base(f.RelPath))
					}
					b, err := os.ReadFile(from)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(a, b) {
						t.Errorf("partition %d: %s differs from the job's alone", p, f.RelPath)
					}
				}
			}
			if written == 0 {
				t.Fatal("every partition was empty: the case compares nothing")
			}
		})
	}
}

// Jobs that are not partitions of one compaction are refused.
func TestCompactManyRefusesMismatchedJobs(t *testing.T) {
	w := newWorld(t)
	srcs := w.gen("src", blockgen.Options{Blocks: 2, Series: 50, Seed: 33})
	out := filepath.Join(w.base, "out")
	a := w.job(srcs, out, "g", 0, 4)
	for name, b := range map[string]Job{
		"same partition":  w.job(srcs, out, "g", 0, 4),
		"other count":     w.job(srcs, out, "g", 1, 2),
		"other sources":   w.job(srcs[:1], out, "g", 1, 4),
		"other directory": w.job(srcs, out+"2", "g", 1, 4),
	} {
		if _, err := CompactMany(context.Background(), nil, []Job{a, b}); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: %v; want ErrInvalidJob", name, err)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("refused jobs wrote %v", entries)
	}
}
