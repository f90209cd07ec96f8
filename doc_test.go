package fencedlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// exportedNames returns the exported names of the package in dir, methods
// as "Type.Method", without test files.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						names = append(names, d.Name.Name)
						continue
					}
					typ := d.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
						names = append(names, id.Name+"."+d.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								names = append(names, s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									names = append(names, n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

// The package documentation's index lists every exported name, each with
// a line on why a user needs it, and nothing that is not exported.
func TestDocIndexListsEveryExport(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, index, found := strings.Cut(string(src), "// # Index\n")
	if !found {
		t.Fatal("doc.go has no \"# Index\" section")
	}
	// Every entry is a bullet that names exports and then says, after a
	// colon, why a user needs them.
	for _, entry := range strings.Split(index, "//   - ")[1:] {
		entry = strings.Join(strings.Fields(strings.ReplaceAll(entry, "//", " ")), " ")
		_, why, ok := strings.Cut(entry, "]: ")
		if !ok || len(strings.Fields(why)) < 3 {
			t.Errorf("doc.go's index entry %q does not say why, after a colon, in a few words", entry)
		}
	}
	listed := make(map[string]bool)
	for _, m := range regexp.MustCompile(`\[\*?([A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)?)\]`).FindAllStringSubmatch(index, -1) {
		listed[m[1]] = true
	}
	exported := make(map[string]bool)
	for _, n := range exportedNames(t, ".") {
		exported[n] = true
		if !listed[n] {
			t.Errorf("doc.go's index does not list %s", n)
		}
	}
	for n := range listed {
		if !exported[n] {
			t.Errorf("doc.go's index lists %s, which the package does not export", n)
		}
	}
	t.Logf("%d exported names", len(exported))
}
