package chunkstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
)

// series makes n series of random chunks (floats and native histograms),
// each with 1–4 chunks of 1–200 samples: what a populator hands a writer,
// one WriteChunks call per series.
func series(t *testing.T, seed int64, n int) [][]chunks.Meta {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	out := make([][]chunks.Meta, n)
	for i := range out {
		ts := int64(0)
		for range 1 + rng.Intn(4) {
			samples := 1 + rng.Intn(200)
			var c chunkenc.Chunk
			if rng.Intn(5) == 0 {
				c = chunkenc.NewHistogramChunk()
				app, err := c.Appender()
				if err != nil {
					t.Fatal(err)
				}
				for j := range samples {
					ts += 15000
					h := tsdbutil.GenerateTestHistogram(int64(j))
					if _, _, app, err = app.AppendHistogram(nil, 0, ts, h, false); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				c = chunkenc.NewXORChunk()
				app, err := c.Appender()
				if err != nil {
					t.Fatal(err)
				}
				v := rng.Float64() * 100
				for range samples {
					ts += 15000
					v += rng.Float64()
					app.Append(0, ts, v)
				}
			}
			out[i] = append(out[i], chunks.Meta{Chunk: c, MinTime: ts, MaxTime: ts})
		}
	}
	return out
}

// copyMetas gives each writer its own Metas (WriteChunks sets Ref).
func copyMetas(in [][]chunks.Meta) [][]chunks.Meta {
	out := make([][]chunks.Meta, len(in))
	for i := range in {
		out[i] = slices.Clone(in[i])
	}
	return out
}

func refs(in [][]chunks.Meta) []chunks.ChunkRef {
	var out []chunks.ChunkRef
	for _, s := range in {
		for _, c := range s {
			out = append(out, c.Ref)
		}
	}
	return out
}

// writeStream writes the series through a Writer into dir.
func writeStream(t *testing.T, dir string, segSize int64, in [][]chunks.Meta) *Writer {
	t.Helper()
	w := NewWriter(context.Background(), DirSink{Dir: dir}, segSize)
	for _, s := range in {
		if err := w.WriteChunks(s...); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w
}

// The Writer writes exactly the bytes chunks.Writer writes, sets the same
// references and cuts segments at the same chunks, for segment sizes that
// cut often, rarely and never (a series bigger than a segment included).
func TestWriterMatchesChunksWriter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segSize int64
		series  int
	}{
		{"tiny segments: a series over several", 600, 50},
		{"small segments", 8 << 10, 400},
		{"one segment", DefaultSegmentSize, 400},
		{"no chunks at all", 8 << 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := series(t, 7, tc.series)
			base := t.TempDir()
			want, got := copyMetas(in), copyMetas(in)

			cw, err := chunks.NewWriter(filepath.Join(base, "want"), chunks.WithSegmentSize(tc.segSize))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range want {
				if err := cw.WriteChunks(s...); err != nil {
					t.Fatal(err)
				}
			}
			if err := cw.Close(); err != nil {
				t.Fatal(err)
			}
			w := writeStream(t, filepath.Join(base, "got"), tc.segSize, got)

			if !slices.Equal(refs(want), refs(got)) {
				t.Fatalf("references differ from chunks.Writer's")
			}
			wantFiles, _ := os.ReadDir(filepath.Join(base, "want"))
			if len(w.Segments()) != len(wantFiles) {
				t.Fatalf("%d segments, chunks.Writer wrote %d", len(w.Segments()), len(wantFiles))
			}
			for i, f := range wantFiles {
				a, _ := os.ReadFile(filepath.Join(base, "want", f.Name()))
				b, err := os.ReadFile(filepath.Join(base, "got", f.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("segment %s differs from chunks.Writer's (%d vs %d bytes)", f.Name(), len(b), len(a))
				}
				if seg := w.Segments()[i]; seg.Name != f.Name() || seg.Size != int64(len(a)) {
					t.Errorf("segment %d reported as %s of %d bytes; want %s of %d", i, seg.Name, seg.Size, f.Name(), len(a))
				}
			}
			if tc.segSize == 600 && len(wantFiles) < 10 {
				t.Errorf("only %d segments: the case does not cut", len(wantFiles))
			}
		})
	}
}

// countingSource counts what is opened and can break streams.
type countingSource struct {
	DirSource
	opens []int64 // offsets opened
	// breakAfter, when > 0, ends every stream with a broken connection
	// after that many bytes; breaks counts down how many streams break.
	breakAfter int64
	breaks     int
}

func (s *countingSource) Open(ctx context.Context, seq int, off int64) (io.ReadCloser, error) {
	s.opens = append(s.opens, off)
	rc, err := s.DirSource.Open(ctx, seq, off)
	if err != nil || s.breakAfter <= 0 || s.breaks == 0 {
		return rc, err
	}
	s.breaks--
	return brokenAfter{io.LimitReader(rc, s.breakAfter), rc}, nil
}

type brokenAfter struct {
	r io.Reader
	c io.Closer
}

func (b brokenAfter) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, errors.New("connection reset by peer")
	}
	return n, err
}
func (b brokenAfter) Close() error { return b.c.Close() }

func sizes(t *testing.T, dir string) []int64 {
	t.Helper()
	s, err := DirSizes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sameChunk compares a chunk read back with the one written.
func sameChunk(t *testing.T, got chunkenc.Chunk, want chunks.Meta) {
	t.Helper()
	if got.Encoding() != want.Chunk.Encoding() || !bytes.Equal(got.Bytes(), want.Chunk.Bytes()) {
		t.Fatalf("chunk %d: read %s of %d bytes, wrote %s of %d", want.Ref, got.Encoding(), len(got.Bytes()), want.Chunk.Encoding(), len(want.Chunk.Bytes()))
	}
}

// Read in the order written, every chunk comes back with one stream per
// segment; read as a partition job reads (every fourth series) it still
// needs one per segment while the gaps are small, and jumps ahead with a
// new stream when one is larger than MaxSkip; read backwards, each chunk
// needs its own.
func TestReaderStreamsSegments(t *testing.T) {
	dir := t.TempDir()
	in := series(t, 11, 300)
	writeStream(t, dir, 16<<10, in)
	segs := len(sizes(t, dir))
	if segs < 4 {
		t.Fatalf("%d segments; the test wants several", segs)
	}
	for _, tc := range []struct {
		name      string
		maxSkip   int64
		pick      func(i int) bool
		backwards bool
		opens     func(n int) bool
		what      string
	}{
		{"in order", 0, func(int) bool { return true }, false, func(n int) bool { return n == segs }, "one per segment"},
		{"every fourth series", 0, func(i int) bool { return i%4 == 1 }, false, func(n int) bool { return n <= segs }, "at most one per segment"},
		{"every fourth series, small MaxSkip", 64, func(i int) bool { return i%4 == 1 }, false, func(n int) bool { return n > 2*segs }, "more than two per segment"},
		{"backwards", 0, func(int) bool { return true }, true, func(n int) bool { return n > 100 }, "one per chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &countingSource{DirSource: DirSource{Dir: dir}}
			r := NewReader(context.Background(), src, sizes(t, dir), nil, ReaderOptions{MaxSkip: tc.maxSkip})
			defer r.Close()
			var want []chunks.Meta
			for i, s := range in {
				if tc.pick(i) {
					want = append(want, s...)
				}
			}
			if tc.backwards {
				slices.Reverse(want)
			}
			for _, m := range want {
				c, it, err := r.ChunkOrIterable(m)
				if err != nil {
					t.Fatal(err)
				}
				if it != nil {
					t.Fatal("an iterable instead of a chunk")
				}
				sameChunk(t, c, m)
			}
			if st := r.Stats(); !tc.opens(st.Opens) || st.Opens != len(src.opens) {
				t.Errorf("%d streams opened (source saw %d), want %s (%d segments)", st.Opens, len(src.opens), tc.what, segs)
			}
		})
	}
}

// A stream that breaks is opened again where it broke; one that keeps
// breaking fails the read, and not as corruption (the block is not to
// blame for the network).
func TestReaderResumesBrokenStreams(t *testing.T) {
	dir := t.TempDir()
	in := series(t, 13, 200)
	writeStream(t, dir, 64<<10, in)
	src := &countingSource{DirSource: DirSource{Dir: dir}, breakAfter: 5000, breaks: 3}
	r := NewReader(context.Background(), src, sizes(t, dir), nil, ReaderOptions{})
	for _, s := range in {
		for _, m := range s {
			c, _, err := r.ChunkOrIterable(m)
			if err != nil {
				t.Fatal(err)
			}
			sameChunk(t, c, m)
		}
	}
	if st := r.Stats(); st.Resumed != 3 {
		t.Errorf("resumed %d streams, want the 3 that broke", st.Resumed)
	}
	_ = r.Close()

	src = &countingSource{DirSource: DirSource{Dir: dir}, breakAfter: 100, breaks: -1}
	r = NewReader(context.Background(), src, sizes(t, dir), nil, ReaderOptions{Retries: 2})
	defer r.Close()
	var err error
	for _, s := range in {
		for _, m := range s {
			if _, _, err = r.ChunkOrIterable(m); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("a stream that always breaks: err = %v; want a read error that is not ErrCorrupt", err)
	}
}

// Damaged segments and impossible references fail with ErrCorrupt.
func TestReaderCorrupt(t *testing.T) {
	in := series(t, 17, 40)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string, first chunks.Meta) chunks.Meta
	}{
		{"flipped data byte", func(t *testing.T, dir string, first chunks.Meta) chunks.Meta {
			flip(t, filepath.Join(dir, "000001"), 12)
			return first
		}},
		{"bad magic", func(t *testing.T, dir string, first chunks.Meta) chunks.Meta {
			flip(t, filepath.Join(dir, "000001"), 0)
			return first
		}},
		{"reference past the last segment", func(t *testing.T, dir string, first chunks.Meta) chunks.Meta {
			first.Ref = chunks.ChunkRef(chunks.NewBlockChunkRef(9, 8))
			return first
		}},
		{"reference past the segment's end", func(t *testing.T, dir string, first chunks.Meta) chunks.Meta {
			first.Ref = chunks.ChunkRef(chunks.NewBlockChunkRef(0, 1<<30))
			return first
		}},
		{"missing segment", func(t *testing.T, dir string, first chunks.Meta) chunks.Meta {
			if err := os.Remove(filepath.Join(dir, "000001")); err != nil {
				t.Fatal(err)
			}
			return first
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			metas := copyMetas(in)
			writeStream(t, dir, DefaultSegmentSize, metas)
			sz := sizes(t, dir)
			m := tc.damage(t, dir, metas[0][0])
			r := NewReader(context.Background(), DirSource{Dir: dir}, sz, nil, ReaderOptions{})
			defer r.Close()
			_, _, err := r.ChunkOrIterable(m)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v; want ErrCorrupt", err)
			}
		})
	}
}

func flip(t *testing.T, path string, at int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The Reader reads what chunks.Writer wrote as well as its own Writer's
// output, and agrees with chunks.NewDirReader on every chunk.
func TestReaderAgreesWithDirReader(t *testing.T) {
	dir := t.TempDir()
	in := series(t, 19, 150)
	cw, err := chunks.NewWriter(dir, chunks.WithSegmentSize(32<<10))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range in {
		if err := cw.WriteChunks(s...); err != nil {
			t.Fatal(err)
		}
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	dr, err := chunks.NewDirReader(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dr.Close()
	r := NewReader(context.Background(), DirSource{Dir: dir}, sizes(t, dir), nil, ReaderOptions{})
	defer r.Close()
	n := 0
	for _, s := range in {
		for _, m := range s {
			a, _, err := dr.ChunkOrIterable(m)
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := r.ChunkOrIterable(m)
			if err != nil {
				t.Fatal(err)
			}
			if a.Encoding() != b.Encoding() || !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Fatalf("chunk %d differs from chunks.Reader's", m.Ref)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no chunks compared")
	}
	if got := r.Stats().Bytes; got != sum(sizes(t, dir)) {
		t.Errorf("read %d bytes of %d: in order, each byte once", got, sum(sizes(t, dir)))
	}
	t.Logf("%d chunks in %d segments", n, len(sizes(t, dir)))
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}
