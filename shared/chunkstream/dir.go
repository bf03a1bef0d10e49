package chunkstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// DirSink writes segments as files of a local chunks/ directory, as
// chunks.Writer does (without its preallocation and fsyncs).
type DirSink struct{ Dir string }

// Create implements SegmentSink.
func (d DirSink) Create(_ context.Context, name string) (Segment, error) {
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(d.Dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return dirSegment{f}, nil
}

type dirSegment struct{ *os.File }

func (s dirSegment) Abort() {
	_ = s.File.Close()
	_ = os.Remove(s.Name())
}

// DirSource reads segments from a local chunks/ directory.
type DirSource struct {
	Dir string
	// Sizes, when set, are the sizes the segments must have.
	Sizes []int64
}

// Open implements SegmentSource.
func (d DirSource) Open(_ context.Context, seq int, offset int64) (io.ReadCloser, error) {
	f, err := os.Open(filepath.Join(d.Dir, SegmentName(seq)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", err, ErrCorrupt)
		}
		return nil, err
	}
	if seq < len(d.Sizes) {
		fi, err := f.Stat()
		if err == nil && fi.Size() != d.Sizes[seq] {
			err = fmt.Errorf("segment %s is %d bytes, want %d: %w", SegmentName(seq), fi.Size(), d.Sizes[seq], ErrCorrupt)
		}
		if err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// DirSizes returns the sizes of a local chunks/ directory's segments, in
// order, for NewReader.
func DirSizes(dir string) ([]int64, error) {
	var sizes []int64
	for seq := 0; ; seq++ {
		fi, err := os.Stat(filepath.Join(dir, SegmentName(seq)))
		if errors.Is(err, os.ErrNotExist) {
			return sizes, nil
		}
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, fi.Size())
	}
}
