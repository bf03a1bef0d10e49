package blockkey

import (
	"errors"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

const id = "01JDQ2Z3Y4X5W6V7T8S9R0QPNM"

func TestParse(t *testing.T) {
	multi := Layout{}
	thanos := Layout{SingleTenant: "fake"}
	prefixed := Layout{Prefix: "/blocks/"}
	tests := []struct {
		name   string
		key    string
		layout Layout
		tenant string
		file   string
		prefix string
	}{
		{"meta", "team-a/" + id + "/meta.json", multi, "team-a", MetaFile, "team-a/" + id + "/"},
		{"index", "team-a/" + id + "/index", multi, "team-a", IndexFile, "team-a/" + id + "/"},
		{"chunk", "team-a/" + id + "/chunks/000001", multi, "team-a", "chunks/000001", "team-a/" + id + "/"},
		{"deletion mark", "t/" + id + "/deletion-mark.json", multi, "t", DeletionMarkFile, "t/" + id + "/"},
		{"no-compact mark", "t/" + id + "/no-compact-mark.json", multi, "t", NoCompactMarkFile, "t/" + id + "/"},
		{"odd but valid tenant", "a!b-c_d.e*f'g(h)/" + id + "/meta.json", multi, "a!b-c_d.e*f'g(h)", MetaFile, "a!b-c_d.e*f'g(h)/" + id + "/"},
		{"thanos single tenant", id + "/meta.json", thanos, "fake", MetaFile, id + "/"},
		{"thanos chunk", id + "/chunks/000002", thanos, "fake", "chunks/000002", id + "/"},
		{"prefixed", "blocks/t1/" + id + "/meta.json", prefixed, "t1", MetaFile, "blocks/t1/" + id + "/"},
		{"prefixed thanos", "p/q/" + id + "/index", Layout{Prefix: "p/q", SingleTenant: "x"}, "x", IndexFile, "p/q/" + id + "/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Parse(tc.key, tc.layout)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.key, err)
			}
			if k.Tenant != tc.tenant || k.File != tc.file || k.Block.String() != id {
				t.Fatalf("Parse(%q) = tenant %q block %s file %q; want %q %s %q", tc.key, k.Tenant, k.Block, k.File, tc.tenant, id, tc.file)
			}
			if got := k.BlockPrefix(); got != tc.prefix {
				t.Errorf("BlockPrefix() = %q, want %q", got, tc.prefix)
			}
			if got := k.String(); got != tc.key {
				t.Errorf("String() = %q, want the parsed key %q", got, tc.key)
			}
			if got, want := k.Object(MetaFile), tc.prefix+MetaFile; got != want {
				t.Errorf("Object(meta.json) = %q, want %q", got, want)
			}
			if got, want := k.BlockKey(), tc.tenant+"/"+id; got != want {
				t.Errorf("BlockKey() = %q, want %q", got, want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name   string
		key    string
		layout Layout
		want   string
	}{
		{"empty", "", Layout{}, "want <tenant>/<ULID>/<file>"},
		{"cortex bucket index", "team-a/bucket-index.json.gz", Layout{}, "want <ULID>/<file>"},
		{"cortex global marker", "team-a/markers/" + id + "-deletion-mark.json", Layout{}, "block id"},
		{"tenant only", "team-a", Layout{}, "want <tenant>/<ULID>/<file>"},
		{"no file", "team-a/" + id, Layout{}, "want <ULID>/<file>"},
		{"directory marker", "team-a/" + id + "/", Layout{}, "no file"},
		{"empty segment", "team-a/" + id + "/chunks//000001", Layout{}, "empty path segment"},
		{"dot dot", "team-a/" + id + "/../x", Layout{}, `".." path segment`},
		{"lowercase ulid", "team-a/" + strings.ToLower(id) + "/meta.json", Layout{}, "canonical"},
		{"short ulid", "team-a/01JDQ2Z3Y4/meta.json", Layout{}, "block id"},
		{"tenant with space", "team a/" + id + "/meta.json", Layout{}, "invalid tenant id"},
		{"dot tenant", "./" + id + "/meta.json", Layout{}, "invalid tenant id"},
		{"empty tenant", "/" + id + "/meta.json", Layout{}, "invalid tenant id"},
		{"long tenant", strings.Repeat("a", 151) + "/" + id + "/meta.json", Layout{}, "at most 150"},
		{"multi-tenant key in thanos bucket", "t/" + id + "/meta.json", Layout{SingleTenant: "x"}, "block id"},
		{"outside prefix", "other/t/" + id + "/meta.json", Layout{Prefix: "blocks"}, "not under prefix"},
		{"prefix without slash", "blockst/" + id + "/meta.json", Layout{Prefix: "blocks"}, "not under prefix"},
		{"invalid single tenant", id + "/meta.json", Layout{SingleTenant: "a/b"}, "layout single tenant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Parse(tc.key, tc.layout)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", tc.key, k)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q) error %q does not say %q", tc.key, err, tc.want)
			}
			if !strings.HasPrefix(tc.name, "invalid single tenant") && !errors.Is(err, ErrOutsideLayout) {
				t.Errorf("Parse(%q) error %q is not ErrOutsideLayout", tc.key, err)
			}
		})
	}
}

func TestValidateTenant(t *testing.T) {
	tests := []struct {
		tenant string
		ok     bool
	}{
		{"a", true},
		{"fake", true},
		{"Team_1.prod-(eu)*'!", true},
		{strings.Repeat("x", 150), true},
		{strings.Repeat("x", 151), false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"a/b", false},
		{"a b", false},
		{"a+b", false},
		{"ä", false},
		{"a%2Fb", false},
	}
	for _, tc := range tests {
		err := ValidateTenant(tc.tenant)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateTenant(%q) = %v, want ok=%v", tc.tenant, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidTenant) {
			t.Errorf("ValidateTenant(%q) = %v, not ErrInvalidTenant", tc.tenant, err)
		}
	}
}

func TestLayoutBlock(t *testing.T) {
	u := ulid.MustParse(id)
	k, err := Layout{Prefix: "blocks"}.Block("t1", u)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := k.Object(MetaFile), "blocks/t1/"+id+"/meta.json"; got != want {
		t.Errorf("Object = %q, want %q", got, want)
	}
	if got, want := k.String(), "blocks/t1/"+id+"/"; got != want {
		t.Errorf("String of a block key = %q, want its prefix %q", got, want)
	}
	k, err = Layout{SingleTenant: "solo"}.Block("", u)
	if err != nil {
		t.Fatal(err)
	}
	if k.Tenant != "solo" || k.Object(IndexFile) != id+"/index" || k.BlockKey() != "solo/"+id {
		t.Errorf("single-tenant block key = %+v", k)
	}
	if _, err := (Layout{SingleTenant: "solo"}).Block("other", u); err == nil {
		t.Error("a foreign tenant in a single-tenant layout was accepted")
	}
	if _, err := (Layout{}).Block("a/b", u); !errors.Is(err, ErrInvalidTenant) {
		t.Errorf("Block with tenant a/b: %v, want ErrInvalidTenant", err)
	}
	if _, err := (Layout{Prefix: "a/../b"}).Block("t", u); err == nil {
		t.Error("a prefix with .. was accepted")
	}
}

// FuzzParse checks that whatever Parse accepts round-trips to the same key,
// names a valid tenant, and that Parse never panics.
func FuzzParse(f *testing.F) {
	f.Add("team-a/"+id+"/meta.json", "", "")
	f.Add(id+"/chunks/000001", "", "fake")
	f.Add("blocks/t/"+id+"/index", "/blocks/", "")
	f.Add("t/"+strings.ToLower(id)+"/meta.json", "", "")
	f.Add("t/"+id+"/../meta.json", "", "")
	f.Fuzz(func(t *testing.T, key, prefix, single string) {
		l := Layout{Prefix: prefix, SingleTenant: single}
		k, err := Parse(key, l)
		if err != nil {
			return
		}
		if got := k.String(); got != key {
			t.Fatalf("Parse(%q, %+v).String() = %q", key, l, got)
		}
		if err := ValidateTenant(k.Tenant); err != nil {
			t.Fatalf("Parse(%q, %+v) accepted tenant %q: %v", key, l, k.Tenant, err)
		}
		again, err := Parse(k.Object(k.File), l)
		if err != nil || again != k {
			t.Fatalf("re-parse of %q = %+v, %v; want %+v", key, again, err, k)
		}
	})
}

// TestGlobalMarkers: the planner tells a tenant's global markers (which
// the bucket notifies, as they end in -mark.json) from a key outside the
// layout, so it can pass over them quietly.
func TestGlobalMarkers(t *testing.T) {
	under := Layout{Prefix: "blocks"}
	if got, want := under.GlobalMarker("team-a", id, "deletion-mark.json"), "blocks/team-a/markers/"+id+"-deletion-mark.json"; got != want {
		t.Errorf("GlobalMarker = %q, want %q", got, want)
	}
	cases := []struct {
		key    string
		layout Layout
		want   bool
	}{
		{"team-a/markers/" + id + "-deletion-mark.json", Layout{}, true},
		{"team-a/markers/" + id + "-no-compact-mark.json", Layout{}, true},
		{"blocks/team-a/markers/" + id + "-deletion-mark.json", under, true},
		{"team-a/markers/" + id + "-deletion-mark.json", under, false},
		{"team-a/" + id + "/deletion-mark.json", Layout{}, false},
		{"team-a/markers/", Layout{}, false},
		{"markers/" + id + "-deletion-mark.json", Layout{}, false},
		{"team-a/markers/x/" + id + "-deletion-mark.json", Layout{}, false},
		{"markers/" + id + "-deletion-mark.json", Layout{SingleTenant: "prod"}, false},
	}
	for _, c := range cases {
		if got := c.layout.IsGlobalMarker(c.key); got != c.want {
			t.Errorf("%+v.IsGlobalMarker(%q) = %v, want %v", c.layout, c.key, got, c.want)
		}
	}
}
