package etl_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestAPINeedsNoInternalPackage: a host sets up, runs and watches a
// pipeline with etl and the contract packages only. No exported
// function, method, type or variable of etl mentions package engine
// (the cgo binding) or internal/runner in its signature: a host never
// has to import them (schema policies are etl.Policy values).
func TestAPINeedsNoInternalPackage(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]bool{"engine": true, "runner": true}
	check := func(where string, n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && forbidden[x.Name] && sel.Sel.IsExported() {
					t.Errorf("%s: %s mentions %s.%s: a host would have to import it", fset.Position(n.Pos()), where, x.Name, sel.Sel.Name)
				}
			}
			return true
		})
	}
	for _, f := range pkgs["etl"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				check(d.Name.Name, d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									if n.IsExported() {
										check(s.Name.Name+"."+n.Name, fl.Type)
									}
								}
							}
							continue
						}
						check(s.Name.Name, s.Type)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && s.Type != nil {
								check(n.Name, s.Type)
							}
						}
					}
				}
			}
		}
	}
}

func exportedRecv(fl *ast.FieldList) bool {
	t := fl.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
