// Command mutants is `make mutants`: it removes one guard at a time from
// a copy of the tree (mutations.go lists them), runs the protocol's fast
// tier against each copy — the protocol table's properties, the records
// tests, the incident replays, the explorer and the oracles' own tests, on
// the in-memory AWS — and prints which tests killed each mutant: the kill
// table of docs/proofs.md.
//
// A mutant no test kills is a guard the suite does not prove necessary;
// the table says so rather than hiding it. The repository is never
// touched: each mutant lives in its own copy under -work.
//
//	go run ./tests/mutants [-only ID,ID] [-work DIR] [-keep]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// packages are the fast tier that judges every mutant.
var packages = []string{"./shared/protocol", "./shared/records", "./tests/races", "./tests/explore", "./tests/testworld"}

func main() {
	only := flag.String("only", "", "comma-separated mutation ids to run (default: all)")
	work := flag.String("work", "", "where the copies go (default: a temporary directory)")
	keep := flag.Bool("keep", false, "keep the copies")
	flag.Parse()
	if err := run(context.Background(), *only, *work, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

type result struct {
	m       mutation
	killed  bool
	broke   bool // did not build: not a mutant of the behaviour
	failing []string
	took    time.Duration
}

func run(ctx context.Context, only, work string, keep bool) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
	}
	if work == "" {
		if work, err = os.MkdirTemp("", "sluice-mutants-"); err != nil {
			return err
		}
	}
	if !keep {
		defer os.RemoveAll(work)
	}
	want := map[string]bool{}
	for _, id := range strings.Split(only, ",") {
		if id != "" {
			want[id] = true
		}
	}
	var todo []mutation
	for _, m := range mutations() {
		if len(want) == 0 || want[m.ID] {
			todo = append(todo, m)
		}
	}
	if len(todo) == 0 {
		return fmt.Errorf("no mutation matches %q", only)
	}
	fmt.Fprintf(os.Stderr, "mutants: baseline, then %d mutant(s), each against %s (-short, in-memory AWS)\n", len(todo), strings.Join(packages, " "))
	base, err := try(ctx, root, filepath.Join(work, "baseline"), mutation{ID: "baseline"})
	if err != nil {
		return err
	}
	if base.killed || base.broke {
		return fmt.Errorf("the unmutated tree fails: %s", strings.Join(base.failing, ", "))
	}
	fmt.Fprintf(os.Stderr, "mutants: baseline passes (%s)\n", base.took.Round(time.Second))
	var results []result
	for i, m := range todo {
		r, err := try(ctx, root, filepath.Join(work, m.ID), m)
		if err != nil {
			return fmt.Errorf("%s: %w", m.ID, err)
		}
		verdict := "SURVIVED"
		switch {
		case r.broke:
			verdict = "did not build"
		case r.killed:
			verdict = fmt.Sprintf("killed by %d test(s)", len(r.failing))
		}
		fmt.Fprintf(os.Stderr, "mutants: [%d/%d] %s: %s (%s)\n", i+1, len(todo), m.ID, verdict, r.took.Round(time.Second))
		results = append(results, r)
	}
	report(os.Stdout, results)
	for _, r := range results {
		if r.broke {
			return fmt.Errorf("mutant %s does not build: fix its pattern", r.m.ID)
		}
	}
	return nil
}

// try copies the tree, applies m (none for the baseline) and runs the tier.
func try(ctx context.Context, root, dir string, m mutation) (result, error) {
	r := result{m: m}
	if err := copyTree(root, dir); err != nil {
		return r, err
	}
	if m.File != "" {
		p := filepath.Join(dir, m.File)
		src, err := os.ReadFile(p)
		if err != nil {
			return r, err
		}
		if n := bytes.Count(src, []byte(m.Old)); n != 1 {
			return r, fmt.Errorf("%s holds the pattern %d times, want once: the mutation is stale", m.File, n)
		}
		if err := os.WriteFile(p, bytes.Replace(src, []byte(m.Old), []byte(m.New), 1), 0o644); err != nil {
			return r, err
		}
	}
	start := time.Now()
	// The docs' copy of the protocol table differs under every table
	// mutation; that says nothing about behaviour, so it does not count.
	args := append([]string{"test", "-short", "-count=1", "-json", "-timeout", "15m", "-skip", "^TestDocsHoldTheTable$"}, packages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SLUICE_BACKEND=memory")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r.took = time.Since(start)
	r.failing, r.broke = failures(&out)
	r.killed = err != nil && !r.broke
	if err != nil && !r.broke && len(r.failing) == 0 {
		r.failing = []string{"(the run failed: " + lastLine(out.String()) + ")"}
	}
	return r, nil
}

// failures reads go test -json output: the tests that failed, and whether
// a package failed to build.
func failures(out io.Reader) (failing []string, broke bool) {
	seen := map[string]bool{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Action, Package, Test, Output string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			if strings.Contains(sc.Text(), "[build failed]") || strings.Contains(sc.Text(), "setup failed") {
				broke = true
			}
			continue
		}
		if strings.Contains(ev.Output, "[build failed]") {
			broke = true
		}
		if ev.Action == "fail" && ev.Test != "" && !strings.Contains(ev.Test, "/") {
			name := filepath.Base(ev.Package) + "." + ev.Test
			if !seen[name] {
				seen[name] = true
				failing = append(failing, name)
			}
		}
	}
	sort.Strings(failing)
	return failing, broke
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// report prints the kill table as docs/proofs.md holds it.
func report(w io.Writer, results []result) {
	fmt.Fprintln(w, "| invariant | mutation (one guard removed) | killed by |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range results {
		by := "**survived**"
		if r.broke {
			by = "(did not build)"
		}
		if r.killed {
			var shown []string
			for i, f := range r.failing {
				if i == 4 {
					shown = append(shown, fmt.Sprintf("and %d more", len(r.failing)-4))
					break
				}
				shown = append(shown, "`"+f+"`")
			}
			by = strings.Join(shown, ", ")
		}
		fmt.Fprintf(w, "| %s | %s (`%s`) | %s |\n", r.m.Invariant, r.m.What, r.m.ID, by)
	}
}

// copyTree copies the repository's sources (not .git, build output or
// node_modules) from root to dir.
func copyTree(root, dir string) error {
	skip := map[string]bool{".git": true, "node_modules": true, "cdk.out": true, ".sluice": true, "bin": true, "dist": true}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if skip[d.Name()] && rel != "." {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), src, 0o644)
	})
}
