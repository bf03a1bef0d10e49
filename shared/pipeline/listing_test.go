package pipeline

import (
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/records"
)

func listing(latest []records.ObjectVersion, older ...records.ObjectVersion) blockListing {
	l := blockListing{latest: map[string]records.ObjectVersion{}}
	for _, v := range latest {
		l.latest[v.RelPath] = v
		l.versions = append(l.versions, v)
	}
	l.versions = append(l.versions, older...)
	return l
}

func TestBlockListingFiles(t *testing.T) {
	k, err := blockkey.Layout{}.Block("acme", ulid.MustParse("01ARZ3NDEKTSV4RRFFQ69G5FAV"))
	if err != nil {
		t.Fatal(err)
	}
	meta := func(files ...blockmeta.File) *blockmeta.Meta {
		m := &blockmeta.Meta{}
		if files != nil {
			m.Thanos = &blockmeta.Thanos{Files: files}
		}
		return m
	}
	cur := []records.ObjectVersion{
		{RelPath: "meta.json", VersionID: "m2", Size: 300},
		{RelPath: "index", VersionID: "i2", Size: 100},
		{RelPath: "chunks/000001", VersionID: "c2", Size: 200},
		{RelPath: "no-compact-mark.json", VersionID: "n1", Size: 10},
	}
	for _, tc := range []struct {
		name    string
		meta    *blockmeta.Meta
		latest  []records.ObjectVersion
		want    string // rel@vid, comma-separated, or the error's substring
		wantErr bool
	}{
		{name: "thanos files at their sizes", meta: meta(blockmeta.File{RelPath: "chunks/000001", SizeBytes: 200}, blockmeta.File{RelPath: "index", SizeBytes: 100}, blockmeta.File{RelPath: "meta.json"}),
			latest: cur, want: "chunks/000001@c2,index@i2"},
		{name: "thanos file of another size", meta: meta(blockmeta.File{RelPath: "index", SizeBytes: 99}),
			latest: cur, want: "acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/index (size 100, meta.json says 99)", wantErr: true},
		{name: "thanos file missing", meta: meta(blockmeta.File{RelPath: "index"}, blockmeta.File{RelPath: "chunks/000002"}),
			latest: cur, want: "block file missing: acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/chunks/000002", wantErr: true},
		{name: "plain prometheus: every current object but meta.json and marks", meta: meta(),
			latest: cur, want: "chunks/000001@c2,index@i2"},
		{name: "no index", meta: meta(), latest: cur[2:], want: "block file missing: acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/index", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := listing(tc.latest).files(k, tc.meta)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, f.RelPath+"@"+f.VersionID)
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("files %v, want %s", got, tc.want)
			}
		})
	}
}

// The versions another upload left — older or newer, delete markers too —
// are what the record does not name; marks and the recorded versions stay.
func TestBlockListingNotNamedBy(t *testing.T) {
	b := records.Block{MetaVersionID: "m2", Files: []records.ObjectVersion{{RelPath: "index", VersionID: "i2"}, {RelPath: "chunks/000001", VersionID: "c2"}}}
	l := listing(
		[]records.ObjectVersion{{RelPath: "meta.json", VersionID: "m3"}, {RelPath: "index", VersionID: "i2"}, {RelPath: "chunks/000001", VersionID: "c2"}, {RelPath: "deletion-mark.json", VersionID: "d1"}},
		records.ObjectVersion{RelPath: "meta.json", VersionID: "m2"},
		records.ObjectVersion{RelPath: "meta.json", VersionID: "m1"},
		records.ObjectVersion{RelPath: "index", VersionID: "i1"},
		records.ObjectVersion{RelPath: "chunks/000001", VersionID: "marker"},
		records.ObjectVersion{RelPath: "deletion-mark.json", VersionID: "d0"},
	)
	var got []string
	for _, v := range l.notNamedBy(b) {
		got = append(got, v.RelPath+"@"+v.VersionID)
	}
	if want := "meta.json@m3,meta.json@m1,index@i1,chunks/000001@marker"; strings.Join(got, ",") != want {
		t.Fatalf("not named: %v, want %s", got, want)
	}
}
