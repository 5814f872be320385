package funclen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// allowed are the functions that may exceed MaxLines, keyed by package
// directory and name, with the length they may reach and why. An entry that
// is no longer needed (the function gone or back under MaxLines) fails the
// test too, so the list stays true.
var allowed = map[string]struct {
	lines int
	why   string
}{
	// Flat declaration lists: one metric after another, each a few lines of
	// name and help; cutting them would only scatter the list.
	"edge.newMetrics": {126, "flat metric declaration list"},

	// Temporary: each is being cut on its owner's branch; the coordinator
	// removes the entry when that branch merges (the test then says so).
}

// fn is one function over MaxLines.
type fn struct {
	key   string // package dir and name: "slicer.(*Slicer).writeSlot"
	pos   string // file:line
	lines int
}

func TestFunctionLength(t *testing.T) {
	root := repoRoot(t)
	long, err := longFunctions(root, MaxLines)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range long {
		seen[f.key] = true
		a, ok := allowed[f.key]
		switch {
		case !ok:
			t.Errorf("%s: %s is %d lines, over %d: cut it into steps (a flat declaration list may be allowlisted in %s, with why)", f.pos, f.key, f.lines, MaxLines, "internal/funclen/funclen_test.go")
		case f.lines > a.lines:
			t.Errorf("%s: %s grew to %d lines; its allowance is %d (%s)", f.pos, f.key, f.lines, a.lines, a.why)
		}
	}
	for key := range allowed {
		if !seen[key] {
			t.Errorf("allowlist: %s is no longer over %d lines (or is gone): remove its entry", key, MaxLines)
		}
	}
}

// repoRoot is the directory holding the repository's go.mod.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no repository root (.git beside go.mod) above the working directory")
		}
		dir = parent
	}
}

// longFunctions parses every non-test, non-generated Go file under root
// (nested modules included: the repository is one build) and returns the
// functions over max lines, longest first.
func longFunctions(root string, max int) ([]fn, error) {
	var out []fn
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > max {
				out = append(out, fn{key: dir + "." + funcName(fd), pos: fmt.Sprintf("%s:%d", filepath.ToSlash(rel), start.Line), lines: n})
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].lines > out[j].lines })
	return out, err
}

// funcName is fd's name as a reader writes it: "F", "(T).M" or "(*T).M".
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ, star := fd.Recv.List[0].Type, ""
	if s, ok := typ.(*ast.StarExpr); ok {
		typ, star = s.X, "*"
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	id, _ := typ.(*ast.Ident)
	if id == nil {
		return fd.Name.Name
	}
	return "(" + star + id.Name + ")." + fd.Name.Name
}

// TestFunctionLengthReport logs every function over MaxLines, allowlisted or
// not (go test -v -run Report ./internal/funclen).
func TestFunctionLengthReport(t *testing.T) {
	long, err := longFunctions(repoRoot(t), MaxLines)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range long {
		t.Logf("%4d %s (%s)", f.lines, f.key, f.pos)
	}
}
