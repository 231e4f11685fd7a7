// Package compiletest compiles policies built in tests: the packages that
// test against compiled snapshots (decision, executor, internal/prove)
// share one way to write declarations to a file and compile them, and to
// load their Rego bundle into OPA.
package compiletest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/snapshot"
)

// Decls compiles declarations given as JSON-shaped values, by policy
// name, from a policies.json in a temporary directory of t's.
func Decls(t testing.TB, policies map[string]any) *compiler.Result {
	t.Helper()
	dir := t.TempDir()
	src, err := json.Marshal(map[string]any{"policies": policies})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies.json"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	return compiler.Compile(compiler.Config{Dir: dir}, []string{"policies.json"})
}

// OPA loads the Rego bundle of snaps into OPA, the native engine's twin,
// for a test to compare decisions with.
func OPA(t testing.TB, snaps []*snapshot.Snapshot) *regoeval.Engine {
	t.Helper()
	bb, err := compiler.WriteBundle(snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := regoeval.New(context.Background(), bb)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}
