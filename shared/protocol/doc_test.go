package protocol

import (
	"os"
	"strings"
	"testing"
)

// docs/protocol.md's transition table is the table, rendered: a
// transition added, changed or dropped here and not there fails.
func TestDocsHoldTheTable(t *testing.T) {
	raw, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- transitions: generated from shared/protocol.Table by DocTable -->\n", "<!-- /transitions -->"
	doc := string(raw)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/protocol.md has no %q … %q section", strings.TrimSpace(begin), end)
	}
	if got, want := doc[i+len(begin):j], DocTable(); got != want {
		t.Errorf("docs/protocol.md's transition table is out of date; put this between the markers:\n%s", want)
	}
}
