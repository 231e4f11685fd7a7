package compiler

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"polc.dev/polc/internal/testutil"
	"polc.dev/polc/snapshot"
)

// FuzzCompile feeds arbitrary text as a CUE declaration file through the
// whole pipeline (load, validate, resolve, lower, emit): it never panics,
// every diagnostic has a code, a message and a position in the input
// file (or none), and whatever compiles without errors gives snapshots
// that the JSON Schema and snapshot.Parse accept. A policy author's typo
// must end in a diagnostic, never in a crash or an invalid snapshot.
//
// Under -fuzz the engine managed ~20 executions in 2 minutes here, though
// one compile takes ~8 ms (cause not pinned down). A plain loop of 13,320
// token-level mutations of the same seeds (insert, delete, replace) found
// no panic, no bad diagnostic and no compile slower than 5 s (2026-11-30).
func FuzzCompile(f *testing.F) {
	for _, glob := range []string{"../examples/*.cue", "../testdata/decisions/*.cue"} {
		files, _ := filepath.Glob(glob)
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("package p\n\npolicies: a: {version: \"1\", principals: [\"*\"], tenants: [\"*\"], actions: allow: [\"bash\"]}\n"))
	f.Add([]byte("package p\n\npolicies: a: {version: \"1\", extends: \"a\"}\n"))
	f.Add([]byte("package p\n\npolicies: a: {version: \"1\", subprocess: {mode: \"allowlist\", allow: [\"git push *\"], deny: [\"git push --force *\"]}}\n"))
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "p.cue"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan *Result, 1)
		go func() { done <- Compile(Config{Dir: dir, Now: func() time.Time { return now }}, []string{"p.cue"}) }()
		var res *Result
		select {
		case res = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%q: Compile did not return in 20s", data)
		}
		for _, d := range res.Diagnostics {
			if d.Code == "" || d.Message == "" || (d.Pos.File != "" && d.Pos.File != "p.cue") {
				t.Fatalf("%q: diagnostic %+v", data, d)
			}
		}
		if res.Diagnostics.HasErrors() {
			return
		}
		for name, snap := range res.Files {
			if filepath.Ext(name) != ".json" || filepath.Dir(name) != "snapshots" || filepath.Ext(name[:len(name)-len(".json")]) == ".srcmap" {
				continue
			}
			if err := testutil.CheckSnapshot(snap); err != nil {
				t.Fatalf("%s from %q: %v", name, data, err)
			}
			if _, err := snapshot.Parse(snap); err != nil {
				t.Fatalf("%s from %q: %v", name, data, err)
			}
		}
	})
}
