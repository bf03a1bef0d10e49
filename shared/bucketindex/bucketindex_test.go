package bucketindex

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// mimirIndex mirrors the JSON of Mimir's bucketindex.Index and Block
// (pkg/storage/tsdb/bucketindex/index.go, read 2026-12): every field name
// and type as their struct tags give them. Decoding Sluice's output into
// it with unknown fields refused proves Sluice writes nothing they would
// not read, under the names they read.
type mimirIndex struct {
	Version int `json:"version"`
	Blocks  []struct {
		ID               string            `json:"block_id"`
		MinTime          int64             `json:"min_time"`
		MaxTime          int64             `json:"max_time"`
		SegmentsFormat   string            `json:"segments_format,omitempty"`
		SegmentsNum      int               `json:"segments_num,omitempty"`
		UploadedAt       int64             `json:"uploaded_at"`
		CompactorShardID string            `json:"compactor_shard_id,omitempty"`
		Source           string            `json:"source,omitempty"`
		CompactionLevel  int               `json:"compaction_level,omitempty"`
		OutOfOrder       bool              `json:"out_of_order,omitempty"`
		Labels           map[string]string `json:"labels,omitempty"`
	} `json:"blocks"`
	BlockDeletionMarks []struct {
		ID           string `json:"block_id"`
		DeletionTime int64  `json:"deletion_time"`
	} `json:"block_deletion_marks"`
	UpdatedAt int64 `json:"updated_at"`
}

func chunks(n int) []records.ObjectVersion {
	out := []records.ObjectVersion{{RelPath: "index", VersionID: "vi"}}
	for i := 1; i <= n; i++ {
		out = append(out, records.ObjectVersion{RelPath: "chunks/" + []string{"", "000001", "000002", "000003"}[i], VersionID: "v"})
	}
	return out
}

// testBlocks are one tenant's records in every state the index cares about.
func testBlocks() []records.Block {
	meta := func(id string, level int, labels string) string {
		return `{"ulid":"` + id + `","minTime":0,"maxTime":7200000,"version":1,"stats":{},"compaction":{"level":` +
			string(rune('0'+level)) + `,"sources":["` + id + `"]},"thanos":{"labels":` + labels + `,"source":"compactor","downsample":{"resolution":0}}}`
	}
	return []records.Block{
		{ID: "01M8KJT9G01VSTWNA0VEXBDW5Q", State: protocol.BlockLive, Published: true, MinT: 1795946400000, MaxT: 1795953600000,
			Arrived: 1796000000123, PublishedAt: 1796000002456, Files: chunks(2), Meta: meta("01M8KJT9G01VSTWNA0VEXBDW5Q", 2, `{"cluster":"east","__compactor_shard_id__":"1_of_2"}`)},
		{ID: "01M8JGFN80AXYXBMJ0P3BE84BB", State: protocol.BlockRetiring, MetaVersionID: "vm", MarkVersionID: "vd", MarkedAt: 1796001000999,
			MinT: 1795910400000, MaxT: 1795917600000, Arrived: 1795990000000, Files: chunks(1), Meta: meta("01M8JGFN80AXYXBMJ0P3BE84BB", 1, `{}`)},
		{ID: "01M8K52V00H9HD38D9TBDS6ATA", State: protocol.BlockLive, Published: false, MinT: 1, MaxT: 2, Meta: "{}"},
		{ID: "01M8KBYJ80E0YNYJFKFNSVVQJB", State: protocol.BlockDeleted, MinT: 1, MaxT: 2},
		{ID: "01M8N2WC80DZC28YT23QVBAS0J", State: protocol.BlockPending, MinT: 1, MaxT: 2},
		{ID: "01M8N9R3G0MF9B1YGZZSJCGNAE", State: protocol.BlockRejected, MinT: 1, MaxT: 2, Meta: "not json"},
	}
}

// TestIndexMatchesTheGolden: the index of testBlocks is, byte for byte,
// testdata/mimir.golden.json (written by hand from Mimir's struct tags and
// their updater's rules: complete blocks only, deletion marks beside,
// times in seconds, uploaded_at the publication's, not the commit's), its
// gzip header names bucket-index.json, and it
// decodes into Mimir's shape with nothing left over.
func TestIndexMatchesTheGolden(t *testing.T) {
	idx, err := Build(Mimir, testBlocks(), time.Unix(1796002000, 0))
	if err != nil {
		t.Fatal(err)
	}
	gz, err := Encode(idx)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "bucket-index.json" {
		t.Errorf("gzip header names %q, want bucket-index.json", zr.Name)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/mimir.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var wantCompact bytes.Buffer
	if err := json.Compact(&wantCompact, want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantCompact.Bytes()) {
		t.Errorf("index differs from the golden:\n got %s\nwant %s", got, wantCompact.Bytes())
	}
	dec := json.NewDecoder(bytes.NewReader(got))
	dec.DisallowUnknownFields()
	var m mimirIndex
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("Mimir's shape does not read it: %v", err)
	}
	if m.Version != 2 || len(m.Blocks) != 2 || len(m.BlockDeletionMarks) != 1 || m.Blocks[1].CompactorShardID != "1_of_2" {
		t.Errorf("decoded as Mimir reads it: %+v", m)
	}
	back, err := Decode(gz)
	if err != nil || len(back.Blocks) != 2 || back.UpdatedAt != 1796002000 {
		t.Errorf("Decode(Encode) = %+v, %v", back, err)
	}
}

func TestFlavours(t *testing.T) {
	for _, tc := range []struct {
		flavour string
		version int
		fail    bool
	}{{Cortex, 1, false}, {Mimir, 2, false}, {"thanos", 0, true}} {
		idx, err := Build(tc.flavour, nil, time.Unix(1, 0))
		if (err != nil) != tc.fail || idx.Version != tc.version {
			t.Errorf("Build(%q) = version %d, %v; want version %d (error %v)", tc.flavour, idx.Version, err, tc.version, tc.fail)
		}
		if !tc.fail && (idx.Blocks == nil || idx.BlockDeletionMarks == nil) {
			t.Errorf("Build(%q) of no blocks writes null lists; Cortex and Mimir write []", tc.flavour)
		}
	}
}

func TestSegments(t *testing.T) {
	for _, tc := range []struct {
		files  []string
		format string
		n      int
	}{
		{[]string{"index", "chunks/000001", "chunks/000002"}, SegmentsFormat1Based6Digits, 2},
		{[]string{"index", "chunks/000002"}, "", 0},
		{[]string{"index", "chunks/1"}, "", 0},
		{[]string{"index"}, "", 0},
	} {
		var fs []records.ObjectVersion
		for _, f := range tc.files {
			fs = append(fs, records.ObjectVersion{RelPath: f})
		}
		if f, n := segments(fs); f != tc.format || n != tc.n {
			t.Errorf("segments(%v) = %q, %d; want %q, %d", tc.files, f, n, tc.format, tc.n)
		}
	}
}

// TestContentSum: the sum is what a reader is told, whenever and in
// whatever order the records were read: the same records give the same
// sum at another time, a block marked or gone changes it.
func TestContentSum(t *testing.T) {
	sum := func(blocks []records.Block, at int64) string {
		t.Helper()
		idx, err := Build(Mimir, blocks, time.Unix(at, 0))
		if err != nil {
			t.Fatal(err)
		}
		s, err := ContentSum(idx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := sum(testBlocks(), 1796002000)
	reversed := testBlocks()
	slices.Reverse(reversed)
	marked := testBlocks()
	// Still published (a meta.json version named), so it stays in the
	// index and only its deletion mark is new.
	marked[0].State, marked[0].MetaVersionID, marked[0].MarkVersionID, marked[0].MarkedAt = protocol.BlockRetiring, "vm0", "vd2", 1796003000000
	was, errWas := Build(Mimir, testBlocks(), time.Unix(1796002000, 0))
	is, errIs := Build(Mimir, marked, time.Unix(1796002000, 0))
	if errWas != nil || errIs != nil || len(is.Blocks) != len(was.Blocks) || len(is.BlockDeletionMarks) != len(was.BlockDeletionMarks)+1 {
		t.Fatalf("marking block 0 gives %d blocks and %d marks, from %d and %d (%v, %v); want the same blocks and one mark more",
			len(is.Blocks), len(is.BlockDeletionMarks), len(was.Blocks), len(was.BlockDeletionMarks), errWas, errIs)
	}
	gone := testBlocks()
	gone[1].State = protocol.BlockDeleted
	for _, tc := range []struct {
		name string
		sum  string
		same bool
	}{
		{"the same records an hour later", sum(testBlocks(), 1796005600), true},
		{"the same records read in another order", sum(reversed, 1796002000), true},
		{"a listed block marked for deletion", sum(marked, 1796002000), false},
		{"a marked block deleted", sum(gone, 1796002000), false},
		{"no blocks", sum(nil, 1796002000), false},
	} {
		if (tc.sum == base) != tc.same {
			t.Errorf("%s: sum %s, base %s; want same %v", tc.name, tc.sum, base, tc.same)
		}
	}
}
