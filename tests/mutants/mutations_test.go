package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMutationsHitWhatTheyName: every mutation's pattern occurs exactly
// once in its file, so `make mutants` applies it; and a mutation of
// protocol.Table's requirements names the entry it changes, and its
// pattern lies inside that entry. (Claim's requirement list once read
// exactly as Expire's; when Claim gained a requirement, the two claim
// mutations went on removing Expire's guards, and the kill table reported
// on the claim.)
func TestMutationsHitWhatTheyName(t *testing.T) {
	const entryStart = "{Name: "
	for _, m := range mutations() {
		t.Run(m.ID, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", m.File))
			if err != nil {
				t.Fatal(err)
			}
			src := string(raw)
			if n := strings.Count(src, m.Old); n != 1 {
				t.Fatalf("%s holds the pattern %d times, want once", m.File, n)
			}
			if m.Old == m.New {
				t.Fatal("the mutation changes nothing")
			}
			if strings.HasSuffix(m.File, "shared/protocol/protocol.go") != (m.Entry != "") {
				t.Fatalf("a mutation names a table entry (%q) exactly when it changes shared/protocol/protocol.go", m.Entry)
			}
			if m.Entry == "" {
				return
			}
			at := strings.Index(src, m.Old)
			start := strings.LastIndex(src[:at], entryStart)
			if start < 0 {
				t.Fatalf("the pattern is in no table entry")
			}
			name := src[start+len(entryStart):]
			name = name[:strings.IndexAny(name, ",}")]
			if name != m.Entry {
				t.Errorf("the pattern lies in the entry of %s, not %s", name, m.Entry)
			}
			if next := strings.Index(src[start+len(entryStart):], entryStart); next >= 0 && start+len(entryStart)+next < at+len(m.Old) {
				t.Errorf("the pattern runs past the entry of %s", name)
			}
		})
	}
}
