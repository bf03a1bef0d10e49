package blockcheck

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/blockgen"
)

func TestRelPath(t *testing.T) {
	for _, ok := range []string{"index", "chunks/000001", "tombstones", "meta.json", "index.cache.json"} {
		if err := RelPath(ok); err != nil {
			t.Errorf("RelPath(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/etc/passwd", "../other/index", "chunks/../../x", "chunks//000001", "./index", `chunks\000001`, ".."} {
		if err := RelPath(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("RelPath(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
}

// TestRealBlock: the files of a block Prometheus' writers wrote pass; the
// same files truncated, or with bytes flipped where the checks look, fail.
func TestRealBlock(t *testing.T) {
	bs, err := blockgen.Generate(t.TempDir(), blockgen.Options{Blocks: 1, Series: 50, Start: time.UnixMilli(0)})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := os.ReadFile(filepath.Join(bs[0].Dir, "index"))
	if err != nil {
		t.Fatal(err)
	}
	seg, err := os.ReadFile(filepath.Join(bs[0].Dir, "chunks", "000001"))
	if err != nil {
		t.Fatal(err)
	}
	tail := func(b []byte) []byte { return append([]byte(nil), b[len(b)-TOCSize:]...) }
	if err := IndexTOC(tail(idx), int64(len(idx))); err != nil {
		t.Fatalf("a real index fails: %v", err)
	}
	if err := ChunkHeader(seg[:ChunkHeaderSize]); err != nil {
		t.Fatalf("a real chunk segment fails: %v", err)
	}
	truncated := idx[:len(idx)-100]
	flipped := tail(idx)
	flipped[3] ^= 0xff
	for name, tc := range map[string]struct {
		tail []byte
		size int64
	}{
		"truncated":   {tail(truncated), int64(len(truncated))},
		"TOC flipped": {flipped, int64(len(idx))},
		"too short":   {idx[:4], 4},
	} {
		if err := IndexTOC(tc.tail, tc.size); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s index: %v, want ErrCorrupt", name, err)
		}
	}
	bad := append([]byte(nil), seg[:ChunkHeaderSize]...)
	bad[0] ^= 1
	if err := ChunkHeader(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad magic: %v", err)
	}
	bad = append([]byte(nil), seg[:ChunkHeaderSize]...)
	bad[4] = 2
	if err := ChunkHeader(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad version: %v", err)
	}
	if err := ChunkHeader(seg[:3]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short: %v", err)
	}
}
