package protocol

import (
	"fmt"
	"strings"
)

// DocTable renders Table as the Markdown table docs/protocol.md holds
// between its "transitions" markers; a test keeps the two the same.
func DocTable() string {
	var b strings.Builder
	b.WriteString("| transition | item | from → to | requires | with, in the same transaction | code |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, t := range Table() {
		from := strings.Join(t.From, " \\| ")
		if t.Has(Absent) {
			from = "absent"
		}
		to := t.To
		switch {
		case t.Check:
			to = "(checked, not written)"
		case to == "":
			to = "(unchanged)"
		}
		var req []string
		for _, r := range t.Requires {
			if r != Absent {
				req = append(req, string(r))
			}
		}
		var with []string
		for _, w := range t.With {
			with = append(with, string(w))
		}
		fmt.Fprintf(&b, "| %s | %s | %s → %s | %s | %s | `%s` |\n", t.Name, t.Item, from, to,
			orDash(strings.Join(req, ", ")), orDash(strings.Join(with, ", ")), t.Code)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
