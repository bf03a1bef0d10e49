package logattr_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/sluice-dev/sluice/shared/logattr"
	"github.com/sluice-dev/sluice/shared/planning"
)

// TestAttributesSitAtTheTopLevel: a logger carrying a subject writes its
// attributes at the top level of each JSON line, under the same names
// whichever helper made them, and leaves out what the subject lacks.
func TestAttributesSitAtTheTopLevel(t *testing.T) {
	g := planning.GroupKey{Stream: "0a1b2c3d4e5f6071", Level: 1, RangeStart: 1764547200000}
	cases := []struct {
		name string
		attr slog.Attr
		want map[string]any
	}{
		{"block", logattr.Block("acme", "01J"), map[string]any{"tenant": "acme", "block": "01J"}},
		{"group", logattr.Group("acme", g), map[string]any{"tenant": "acme", "stream": g.Stream, "group": g.String()}},
		{"version", logattr.Version("acme", g, 3), map[string]any{"tenant": "acme", "stream": g.Stream, "group": g.String(), "version": 3.0}},
		{"partition 0", logattr.Partition("acme", g, 3, 0), map[string]any{"tenant": "acme", "stream": g.Stream, "group": g.String(), "version": 3.0, "partition": 0.0}},
		{"block in a group", logattr.GroupBlock("acme", g, "01J"), map[string]any{"tenant": "acme", "stream": g.Stream, "group": g.String(), "block": "01J"}},
		{"tenant", logattr.Tenant("acme"), map[string]any{"tenant": "acme"}},
		{"block in a version", logattr.VersionBlock("acme", g, 3, "01J"), map[string]any{"tenant": "acme", "stream": g.Stream, "group": g.String(), "version": 3.0, "block": "01J"}},
		{"version only", logattr.InVersion(g, 3), map[string]any{"stream": g.Stream, "group": g.String(), "version": 3.0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).With(c.attr).Info("hello", "extra", 1)
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v (line %s)", k, line[k], v, buf.String())
				}
			}
			for _, k := range []string{"tenant", "stream", "group", "version", "partition", "block"} {
				if _, ok := c.want[k]; !ok {
					if _, there := line[k]; there {
						t.Errorf("%s is on the line, and the subject has none: %s", k, buf.String())
					}
				}
			}
			if line["extra"] != 1.0 || line["msg"] != "hello" || line["level"] != "INFO" {
				t.Errorf("the line lost its own attributes: %s", buf.String())
			}
		})
	}
}
