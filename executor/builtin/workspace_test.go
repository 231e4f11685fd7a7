package builtin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/snapshot"
)

// TestWorkspaceIsTheJudgedOne: the policy resolves a relative path
// against the trusted context's workspace. Callables built for workspace
// B used to write a call judged in workspace A to B/notes/x (succeeded);
// now such a call fails workspace_mismatch and writes nothing, and
// callables built without a workspace use each call's.
func TestWorkspaceIsTheJudgedOne(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.cue"), []byte(`package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["write_file"]
	filesystem: write: ["notes/**"]
}
`), 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	snap := res.Snapshots[0]
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, ws := range []string{a, b} {
		os.MkdirAll(filepath.Join(ws, "notes"), 0o755)
	}
	run := func(o builtin.Options) executor.Outcome {
		t.Helper()
		reg := executor.NewRegistry()
		if err := builtin.Register(reg, o); err != nil {
			t.Fatal(err)
		}
		e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}})
		if err != nil {
			t.Fatal(err)
		}
		ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
			Tenant: "t", Workspace: a, Backend: "inprocess", Profile: executor.ProfileMinimal,
			Policy: executor.SnapshotRef{PolicyID: snap.PolicyID, Version: snap.Version, Digest: snap.Digest}}
		return e.Execute(context.Background(), executor.ExecutionRequest{RequestID: "r", Action: "write_file",
			Arguments: map[string]any{"path": "notes/x", "content": "hi"}, Scope: ec.Scope}, ec)
	}

	out := run(builtin.Options{Workspace: b})
	f, ok := out.(*executor.Failed)
	if !ok || f.Class != "workspace_mismatch" {
		t.Fatalf("callables for another workspace: %s %+v, want failed workspace_mismatch", out.Kind(), out.Base())
	}
	for _, ws := range []string{a, b} {
		if _, err := os.Stat(filepath.Join(ws, "notes", "x")); err == nil {
			t.Errorf("%s/notes/x was written", ws)
		}
	}

	if out := run(builtin.Options{}); out.Kind() != executor.KindSucceeded {
		t.Fatalf("callables without a workspace: %s %+v", out.Kind(), out.Base())
	}
	if b, err := os.ReadFile(filepath.Join(a, "notes", "x")); err != nil || string(b) != "hi" {
		t.Errorf("the judged path a/notes/x: %q %v", b, err)
	}
}
