// Package layout holds the repository's layering to what README says: the
// product (functions/, shared/, cmd/) never imports the local platform
// (localstack/) or the tests (tests/), and the local platform never
// imports the tests; every package of the product and the platform says in
// its doc comment what it owns.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sluice-dev/sluice/"

// below lists, for each layer, the layers it must not import.
var below = map[string][]string{
	"functions":  {"localstack", "tests"},
	"shared":     {"localstack", "tests"},
	"cmd":        {"localstack", "tests"},
	"localstack": {"tests"},
}

type pkg struct {
	dir     string
	imports map[string]bool
	doc     bool
}

// packages parses every non-test Go file under the repository root (one
// level up from tests/) and groups them by directory.
func packages(t *testing.T) map[string]*pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*pkg{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "cdk.out", ".git", ".sluice", "testdata", "infra":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		p := out[rel]
		if p == nil {
			p = &pkg{dir: filepath.ToSlash(rel), imports: map[string]bool{}}
			out[rel] = p
		}
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package ") || f.Doc != nil && f.Name.Name == "main" {
			p.doc = true
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			p.imports[path] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found %d packages under %s: not the repository", len(out), root)
	}
	return out
}

func TestNoPackageImportsALayerAboveIt(t *testing.T) {
	for _, p := range packages(t) {
		layer, _, _ := strings.Cut(p.dir, "/")
		for im := range p.imports {
			rest, ok := strings.CutPrefix(im, module)
			if !ok {
				continue
			}
			target, _, _ := strings.Cut(rest, "/")
			for _, banned := range below[layer] {
				if target == banned {
					t.Errorf("%s imports %s: %s must not depend on %s/", p.dir, im, layer, banned)
				}
			}
		}
	}
}

func TestEveryPackageSaysWhatItOwns(t *testing.T) {
	for _, p := range packages(t) {
		layer, _, _ := strings.Cut(p.dir, "/")
		if _, ok := below[layer]; !ok {
			continue // tests/: their doc comments live in _test files
		}
		if !p.doc {
			t.Errorf("%s has no package doc comment", p.dir)
		}
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat("../../go.mod"); err != nil {
		panic("tests/layout must run from its own directory inside the repository")
	}
	os.Exit(m.Run())
}
