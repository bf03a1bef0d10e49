package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

func TestHelpAGuideForNewUsers(t *testing.T) {
	r := runWith(t, nil, "--help")
	r.wantCode(t, 0)
	for _, want := range []string{"upload", "status", "verify", "replay-dlq", "gen", "SLUICE_BUCKET", "AWS_ENDPOINT_URL", "make demo", "--env-file"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("sluice --help lacks %q", want)
		}
	}
	for _, cmd := range []string{"upload", "status", "verify", "replay-dlq", "gen"} {
		r := runWith(t, nil, cmd, "--help")
		r.wantCode(t, 0)
		if !strings.HasPrefix(r.stdout, "Usage: sluice "+cmd) || !strings.Contains(r.stdout, "Flags:") && cmd != "replay-dlq" {
			t.Errorf("sluice %s --help:\n%s", cmd, r.stdout)
		}
		if h := runWith(t, nil, "help", cmd); h.stdout != r.stdout {
			t.Errorf("sluice help %s differs from sluice %s --help", cmd, cmd)
		}
	}
	runWith(t, nil).wantCode(t, 2)
}

func TestBadCommandLines(t *testing.T) {
	r := runWith(t, nil, "uplaod")
	r.wantCode(t, 2)
	r.wantOneLineError(t, `unknown command "uplaod"`)
	r = runWith(t, nil, "status", "--jsno")
	r.wantCode(t, 2)
	r.wantOneLineError(t, "flag provided but not defined: -jsno")
}

func TestGenCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blocks")
	r := runWith(t, nil, "gen", dir, "--blocks", "3", "--rf", "2", "--series", "10", "--tenant", "team-a", "--start", "2025-03-01")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "wrote 6 block(s)") || !strings.Contains(r.stdout, "2025-03-01 00:00 → 2025-03-01 06:00") ||
		!strings.Contains(r.stdout, "sluice upload --tenant team-a "+dir+"/*") {
		t.Errorf("output:\n%s", r.stdout)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 6 {
		t.Fatalf("%d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		if _, err := CheckBlockDir(filepath.Join(dir, e.Name())); err != nil {
			t.Errorf("generated block is not one: %v", err)
		}
		m, err := blockmeta.ReadDir(filepath.Join(dir, e.Name()))
		if err != nil || m.Stats.NumSeries != 10 || m.Thanos == nil || len(m.Thanos.Files) == 0 {
			t.Errorf("meta %+v %v", m, err)
		}
	}
	// The same flags write the same blocks.
	again := filepath.Join(t.TempDir(), "again")
	runWith(t, nil, "gen", again, "--blocks", "3", "--rf", "2", "--series", "10", "--tenant", "team-a", "--start", "2025-03-01").wantCode(t, 0)
	entries2, _ := os.ReadDir(again)
	for i := range entries {
		if entries[i].Name() != entries2[i].Name() {
			t.Errorf("block %d: %s, then %s", i, entries[i].Name(), entries2[i].Name())
		}
	}

	// Two Prometheus replicas of one cluster, as a Thanos bucket holds them.
	t.Run("external labels", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "east")
		runWith(t, nil, "gen", dir, "--blocks", "1", "--rf", "2", "--series", "5", "--label", "cluster=east", "--label", "env=prod", "--replica-label", "replica").wantCode(t, 0)
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 2 {
			t.Fatalf("%d entries, %v", len(entries), err)
		}
		replicas := map[string]bool{}
		for _, e := range entries {
			m, err := blockmeta.ReadDir(filepath.Join(dir, e.Name()))
			if err != nil || m.Thanos == nil {
				t.Fatalf("meta %+v %v", m, err)
			}
			if l := m.Thanos.Labels; l["cluster"] != "east" || l["env"] != "prod" || len(l) != 3 {
				t.Errorf("%s: thanos.labels %v", e.Name(), l)
			}
			replicas[m.Thanos.Labels["replica"]] = true
		}
		if !replicas["0"] || !replicas["1"] {
			t.Errorf("replica labels %v, want 0 and 1", replicas)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, bad := range []string{"cluster", "=east", "1x=y"} {
			r := runWith(t, nil, "gen", dir, "--label", bad)
			r.wantCode(t, 2)
			r.wantOneLineError(t, "-label")
		}
		r := runWith(t, nil, "gen", dir, "--tenant", "team a")
		r.wantCode(t, 2)
		r.wantOneLineError(t, "invalid tenant id")
		r = runWith(t, nil, "gen", dir, "--start", "yesterday")
		r.wantCode(t, 2)
		r.wantOneLineError(t, "--start")
		file := filepath.Join(t.TempDir(), "f")
		os.WriteFile(file, nil, 0o644)
		r = runWith(t, nil, "gen", file)
		r.wantCode(t, 1)
		r.wantOneLineError(t, "is not a directory")
		runWith(t, nil, "gen").wantCode(t, 2)
	})
}

// TestCommonFlagsBeforeTheCommand: the common flags may come before the
// command, as README and the demo print them; other flags may not.
func TestCommonFlagsBeforeTheCommand(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		flags, rest []string
	}{
		{[]string{"--env-file", ".sluice/demo.env", "verify"}, []string{"--env-file", ".sluice/demo.env"}, []string{"verify"}},
		{[]string{"--env-file=x", "-bucket", "b", "status", "--json"}, []string{"--env-file=x", "-bucket", "b"}, []string{"status", "--json"}},
		{[]string{"status", "--env-file", "x"}, nil, []string{"status", "--env-file", "x"}},
		{[]string{"--json", "status"}, nil, []string{"--json", "status"}},
		{[]string{"--endpoint"}, []string{"--endpoint"}, nil},
	} {
		flags, rest := leadingCommonFlags(tc.args)
		if !slices.Equal(flags, tc.flags) || !slices.Equal(rest, tc.rest) {
			t.Errorf("leadingCommonFlags(%q) = %q, %q; want %q, %q", tc.args, flags, rest, tc.flags, tc.rest)
		}
	}
	var out, errb strings.Builder
	if code := Main(context.Background(), IO{Stdout: &out, Stderr: &errb}, []string{"--bucket", "b", "gen", t.TempDir()}); code != ExitUsage {
		t.Errorf("a common flag before a command without them: exit %d, want %d (%s)", code, ExitUsage, errb.String())
	}
}
