package blockmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// A meta.json as a newer Cortex/Thanos would write it, with members this
// package does not know at every level.
const foreignMeta = `{
	"ulid": "01JABCDEFGHJKMNPQRSTVWXYZ0",
	"minTime": 1700000000000,
	"maxTime": 1700007200000,
	"stats": {"numSamples": 12, "numSeries": 3, "numChunks": 3, "numFutureThings": 7},
	"compaction": {
		"level": 2,
		"sources": ["01JABCDEFGHJKMNPQRSTVWXYZ1", "01JABCDEFGHJKMNPQRSTVWXYZ2"],
		"parents": [{"ulid": "01JABCDEFGHJKMNPQRSTVWXYZ1", "minTime": 1700000000000, "maxTime": 1700007200000, "note": "x"}],
		"hints": ["from-out-of-order"],
		"compactor_shard": {"id": 3}
	},
	"version": 1,
	"thanos": {
		"version": 1,
		"labels": {"__org_id__": "tenant-a"},
		"downsample": {"resolution": 0, "algo": "v2"},
		"source": "compactor",
		"segment_files": ["000001"],
		"files": [
			{"rel_path": "chunks/000001", "size_bytes": 1234, "hash": {"func": "SHA256", "value": "ab"}},
			{"rel_path": "index", "size_bytes": 99},
			{"rel_path": "meta.json"}
		],
		"index_stats": {"series_max_size": 1234567890123456789},
		"extensions": {
			"partition_info": {"partitioned_group_id": 4242, "partition_count": 4, "partition_id": 2, "partitioned_group_creation_time": 1700009000, "future": true},
			"time_range": 7200000
		}
	},
	"mimir_future": [1, 2.50, "three"]
}`

func TestParseMarshalKeepsUnknownFields(t *testing.T) {
	m, err := Parse([]byte(foreignMeta), "tenant-a/01JABCDEFGHJKMNPQRSTVWXYZ0")
	if err != nil {
		t.Fatal(err)
	}
	pi, ok := m.PartitionInfo()
	if !ok || pi.PartitionCount != 4 || pi.PartitionID != 2 || pi.PartitionedGroupID != 4242 || pi.PartitionedGroupCreationTime != 1700009000 {
		t.Fatalf("partition info = %+v, %v", pi, ok)
	}
	if got := m.Thanos.Files[0]; got.RelPath != "chunks/000001" || got.SizeBytes != 1234 {
		t.Fatalf("files[0] = %+v", got)
	}
	out, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Semantically equal to the input, unknown members included.
	if !jsonEqual(t, []byte(foreignMeta), out) {
		t.Fatalf("round trip changed the document:\n%s", out)
	}
	// Big integers and number spellings survive byte for byte.
	for _, s := range []string{"1234567890123456789", "2.50", `"algo":"v2"`, `"future":true`} {
		if !bytes.Contains(compact(t, out), []byte(s)) {
			t.Errorf("output lost %s", s)
		}
	}
	// A read-modify-write keeps them too.
	m.Stats.NumSamples = 13
	m.SetPartitionInfo(&PartitionInfo{PartitionCount: 8, PartitionID: 5})
	out2, _ := m.Marshal()
	m2, err := Parse(out2, "again")
	if err != nil {
		t.Fatal(err)
	}
	if m2.Stats.NumSamples != 13 || string(compact(t, m2.Unknown["mimir_future"])) != `[1,2.50,"three"]` {
		t.Fatalf("modified meta lost data: %s", out2)
	}
	if pi, _ := m2.PartitionInfo(); pi.PartitionCount != 8 || pi.PartitionID != 5 {
		t.Fatalf("partition info not updated: %+v", pi)
	}
	if string(m2.Thanos.Extensions.Unknown["time_range"]) != "7200000" {
		t.Fatalf("extensions lost time_range: %s", out2)
	}
}

func TestMarshalDeterministic(t *testing.T) {
	m, err := Parse([]byte(foreignMeta), "k")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := m.Marshal()
	for i := 0; i < 20; i++ {
		again, _ := m.Marshal()
		if !bytes.Equal(first, again) {
			t.Fatal("Marshal is not deterministic")
		}
		m2, _ := Parse(again, "k")
		if b, _ := m2.Marshal(); !bytes.Equal(first, b) {
			t.Fatal("Parse→Marshal is not a fixed point")
		}
	}
	if !bytes.HasPrefix(first, []byte("{\n\t\"ulid\": ")) {
		t.Fatalf("want Prometheus field order and tab indent, got %.40q", first)
	}
}

func TestParseRejects(t *testing.T) {
	valid := `{"ulid":"01JABCDEFGHJKMNPQRSTVWXYZ0","minTime":0,"maxTime":10,"stats":{},"compaction":{"level":1},"version":1}`
	for _, tc := range []struct {
		name, data, want string
	}{
		{"empty", "", "empty file"},
		{"truncated", valid[:40], "truncated JSON"},
		{"corrupt", strings.Replace(valid, ":0,", ":0x,", 1), "corrupt JSON"},
		{"not an object", `[1,2]`, "cannot unmarshal"},
		{"missing ulid", strings.Replace(valid, `"ulid":"01JABCDEFGHJKMNPQRSTVWXYZ0",`, "", 1), "missing ulid"},
		{"bad ulid", strings.Replace(valid, "01JABCDEFGHJKMNPQRSTVWXYZ0", "nope", 1), "ulid"},
		{"empty range", strings.Replace(valid, `"maxTime":10`, `"maxTime":0`, 1), "minTime 0 is not before maxTime 0"},
		{"version 2", strings.Replace(valid, `"version":1`, `"version":2`, 1), "unsupported version 2"},
		{"no version", strings.Replace(valid, `,"version":1`, "", 1), "unsupported version 0"},
		{"thanos version", strings.Replace(valid, `"version":1}`, `"version":1,"thanos":{"version":3,"labels":{},"downsample":{"resolution":0},"source":"x"}}`, 1), "thanos.version 3"},
		{"bad partition", strings.Replace(valid, `"version":1}`, `"version":1,"thanos":{"labels":{},"downsample":{"resolution":0},"source":"x","extensions":{"partition_info":{"partition_count":2,"partition_id":2}}}}`, 1), "partition_id 2 of partition_count 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data), "tenant-x/01BLOCK")
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), "tenant-x/01BLOCK") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q should name the block and say %q", err, tc.want)
			}
		})
	}
	if _, err := Parse([]byte(valid), "ok"); err != nil {
		t.Fatalf("valid meta rejected: %v", err)
	}
}

func TestPlainPrometheusMetaHasNoThanosSection(t *testing.T) {
	m := &Meta{ULID: ulid.MustParse("01JABCDEFGHJKMNPQRSTVWXYZ0"), MinTime: 0, MaxTime: 1, Version: 1}
	m.Compaction.Level = 1
	b, _ := m.Marshal()
	if bytes.Contains(b, []byte("thanos")) {
		t.Fatalf("unexpected thanos section: %s", b)
	}
	if _, ok := m.PartitionInfo(); ok {
		t.Fatal("plain meta has no partition info")
	}
}

func TestMarks(t *testing.T) {
	id := ulid.MustParse("01JABCDEFGHJKMNPQRSTVWXYZ0")
	dm := NewDeletionMark(id, time.Unix(1700000000, 0))
	b, err := dm.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(t, b, []byte(`{"id":"01JABCDEFGHJKMNPQRSTVWXYZ0","deletion_time":1700000000,"version":1}`)) {
		t.Fatalf("deletion mark = %s", b)
	}
	got, err := ParseDeletionMark(b, "k")
	if err != nil || *got != dm {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{`{`, `{"deletion_time":1,"version":1}`, `{"id":"01JABCDEFGHJKMNPQRSTVWXYZ0","deletion_time":1,"version":2}`} {
		if _, err := ParseDeletionMark([]byte(bad), "t/01X"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "t/01X") {
			t.Errorf("ParseDeletionMark(%s) = %v", bad, err)
		}
	}
	nc, err := ParseNoCompactMark([]byte(`{"id":"01JABCDEFGHJKMNPQRSTVWXYZ0","version":1,"details":"too big","no_compact_time":1700000000,"reason":"index-size-exceeding"}`), "k")
	if err != nil || nc.Reason != "index-size-exceeding" || nc.NoCompactTime != 1700000000 || nc.Details != "too big" {
		t.Fatalf("no-compact mark: %+v, %v", nc, err)
	}
	if _, err := ParseNoCompactMark([]byte(`{"version":1}`), "k"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing id accepted: %v", err)
	}
}

func TestReadWriteDirAndGatherFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ChunksDirname), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ChunksDirname, "000002"), make([]byte, 5), 0o644)
	os.WriteFile(filepath.Join(dir, ChunksDirname, "000001"), make([]byte, 7), 0o644)
	os.WriteFile(filepath.Join(dir, IndexFilename), make([]byte, 11), 0o644)
	files, err := GatherFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []File{{RelPath: "chunks/000001", SizeBytes: 7}, {RelPath: "chunks/000002", SizeBytes: 5}, {RelPath: "index", SizeBytes: 11}, {RelPath: "meta.json"}}
	if len(files) != len(want) {
		t.Fatalf("files = %+v", files)
	}
	for i := range want {
		if files[i].RelPath != want[i].RelPath || files[i].SizeBytes != want[i].SizeBytes {
			t.Fatalf("files = %+v", files)
		}
	}
	m, _ := Parse([]byte(foreignMeta), "k")
	if err := m.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := m.Marshal()
	b, _ := back.Marshal()
	if !bytes.Equal(a, b) {
		t.Fatal("WriteDir/ReadDir changed the meta")
	}
	if _, err := ReadDir(t.TempDir()); err == nil {
		t.Fatal("ReadDir of an empty dir succeeded")
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	return bytes.Equal(normalize(t, a), normalize(t, b))
}

// normalize re-encodes JSON with sorted keys, numbers kept as written.
func normalize(t *testing.T, b []byte) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return out
}

func compact(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
