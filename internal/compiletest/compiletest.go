// Package compiletest compiles policies built in tests: the packages that
// test against compiled snapshots (decision, executor) share one way to
// write declarations to a file and compile them.
package compiletest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/compiler"
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
