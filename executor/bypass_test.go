package executor_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// TestNoExportedPathToACallable is the static half of the bypass matrix:
// no exported function, method, variable or struct field of the executor
// packages returns or exposes a Callable (or any function value), so code
// outside the package can reach an action's implementation only through
// Execute. Registry.Register is the one exported place that takes one.
func TestNoExportedPathToACallable(t *testing.T) {
	for _, dir := range []string{".", "builtin", "statestore"} {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			for name, f := range pkg.Files {
				for _, decl := range f.Decls {
					switch d := decl.(type) {
					case *ast.FuncDecl:
						if !d.Name.IsExported() || d.Type.Results == nil {
							continue
						}
						for _, r := range d.Type.Results.List {
							if exposesFunc(r.Type) {
								t.Errorf("%s: exported %s returns a function value (%s)", filepath.Join(dir, filepath.Base(name)), d.Name.Name, types(r.Type))
							}
						}
					case *ast.GenDecl:
						for _, spec := range d.Specs {
							switch s := spec.(type) {
							case *ast.TypeSpec:
								st, ok := s.Type.(*ast.StructType)
								if !ok || !s.Name.IsExported() {
									continue
								}
								for _, fld := range st.Fields.List {
									for _, n := range fld.Names {
										if n.IsExported() && types(fld.Type) == "Callable" {
											t.Errorf("%s: exported field %s.%s holds a Callable", dir, s.Name.Name, n.Name)
										}
									}
								}
							case *ast.ValueSpec:
								for _, n := range s.Names {
									if n.IsExported() && s.Type != nil && types(s.Type) == "Callable" {
										t.Errorf("%s: exported variable %s is a Callable", dir, n.Name)
									}
								}
							}
						}
					}
				}
			}
		}
	}
	// Reflection: the registry has no exported field to reach through.
	rt := reflect.TypeFor[executor.Registry]()
	for i := range rt.NumField() {
		if rt.Field(i).IsExported() {
			t.Errorf("Registry has exported field %s", rt.Field(i).Name)
		}
	}
	for i := range reflect.TypeFor[*executor.Registry]().NumMethod() {
		m := reflect.TypeFor[*executor.Registry]().Method(i)
		for o := range m.Type.NumOut() {
			if m.Type.Out(o).Kind() == reflect.Func {
				t.Errorf("Registry.%s returns a function", m.Name)
			}
		}
	}
}

func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + types(e.X)
	case *ast.SelectorExpr:
		return types(e.X) + "." + e.Sel.Name
	case *ast.FuncType:
		return "func"
	}
	return ""
}

// exposesFunc reports whether a result type is a callable or a function.
func exposesFunc(e ast.Expr) bool {
	switch t := types(e); {
	case t == "Callable", t == "*Callable", t == "func":
		return true
	}
	return false
}

// TestEveryRouteEntersExecuteOnce is the runtime half: concurrent callers,
// every governed profile and every outcome path; each invocation of the
// callable carries an attempt id that Execute minted, no attempt invokes
// twice, and the callable ran exactly as often as outcomes say it did.
func TestEveryRouteEntersExecuteOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	r := newRig(t, chain.NewMemStore(), func(c *executor.Config) {
		c.IDs = executor.NewUUID
		c.Registry.Register(normalize.ActionDescriptor{ID: "probe", Version: "1", Arguments: []byte(`{"type":"object"}`)},
			func(ctx context.Context, _ map[string]any) (any, error) {
				id, ok := executor.AttemptFromContext(ctx)
				if !ok {
					t.Error("callable reached without an attempt id: not through Execute")
				}
				mu.Lock()
				seen[id]++
				mu.Unlock()
				return nil, nil
			})
	})
	b, _ := r.exec.OpenBoundary(r.ref(), false)
	var wg sync.WaitGroup
	var executed sync.Map
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				for _, profile := range []executor.Profile{executor.ProfileMinimal, executor.ProfileGoverned} {
					var bd *executor.TaskBoundary
					if profile == executor.ProfileGoverned {
						bd = b
					}
					out := r.exec.Execute(context.Background(), req(strings.Repeat("x", g+1)+string(rune('a'+i)), "probe", nil), r.ctx(profile, bd))
					executed.Store(out.Base().AttemptID, out.Base().CallExecuted)
				}
			}
		}()
	}
	wg.Wait()
	calls := 0
	executed.Range(func(k, v any) bool {
		if v.(bool) {
			calls++
			if seen[k.(string)] != 1 {
				t.Errorf("attempt %s invoked %d times", k, seen[k.(string)])
			}
		} else if seen[k.(string)] != 0 {
			t.Errorf("attempt %s says not executed but invoked %d times", k, seen[k.(string)])
		}
		return true
	})
	if len(seen) != calls || calls != 320 {
		t.Fatalf("%d invocations, %d outcomes with call_executed, want 320", len(seen), calls)
	}
	if !exposesFunc(&ast.Ident{Name: "Callable"}) || !exposesFunc(&ast.FuncType{}) || exposesFunc(&ast.Ident{Name: "Outcome"}) {
		t.Fatal("exposesFunc does not recognise function results")
	}
}
