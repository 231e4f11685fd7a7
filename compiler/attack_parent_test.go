package compiler_test

import (
	"context"

	"os"
	"path/filepath"
	"polc.dev/polc/internal/regoeval"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/snapshot"
)

// attackCompile compiles src (with parents) and returns the snapshots by
// name, failing on errors.
func attackCompile(t *testing.T, src string, parents ...*snapshot.Snapshot) (map[string]*snapshot.Snapshot, *compiler.Result) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir, Parents: parents}, []string{"p.cue"})
	out := map[string]*snapshot.Snapshot{}
	for _, s := range res.Snapshots {
		out[s.Name] = s
	}
	return out, res
}

// reparse seals s and parses it as a --parent file would be read.
func reparse(t *testing.T, s *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p, err := snapshot.Parse(b)
	if err != nil {
		t.Fatalf("crafted parent refused by Parse (the attack needs it accepted): %v", err)
	}
	return p
}

func decide(t *testing.T, s *snapshot.Snapshot, r *executor.Normalized) string {
	t.Helper()
	p, err := executor.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := p.Evaluate(r)
	return d.Disposition
}

// TestAttackParentSnapshotMixedShell: a subprocess allow rule carries its
// own shell setting, and a hand-made parent snapshot (valid digest,
// accepted by snapshot.Parse and runnable) may give different rules
// different settings: "a" may use shell control, "rm *" may not. raise
// takes the first allow rule's setting as the whole policy's, so a child
// that changes nothing inherits shell "allow" for every command, and
// "a; rm -rf x" (which the parent denies: rm may not run under shell
// control) is allowed by the child, compiled without an expansion.
func TestAttackParentSnapshotMixedShell(t *testing.T) {
	snaps, res := attackCompile(t, `package p
policies: org: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["a", "rm *"]}
}
`)
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	parent := snaps["org"]
	for _, r := range parent.CompiledRules {
		if sr, ok := r.(*snapshot.SubprocessRule); ok && sr.Pattern == "a" {
			allow := "allow"
			sr.Shell = &allow
		}
	}
	parent = reparse(t, parent)
	req := &executor.Normalized{Principal: "agent:x", Tenant: "acme", Action: "bash", Workspace: "/ws",
		Time: "2026-03-15T12:00:00.000000Z", Commands: [][]string{{"a"}, {"rm", "-rf", "x"}}, ShellControl: true}
	if got := decide(t, parent, req); got != executor.Deny {
		t.Fatalf("test setup: parent decides %s, want deny", got)
	}
	snaps, res = attackCompile(t, `package p
policies: bot: {version: "1", extends: "org"}
`, parent)
	if res.Diagnostics.HasErrors() {
		return // refused: held
	}
	if got := decide(t, snaps["bot"], req); got != executor.Deny {
		t.Errorf("child of a hand-made parent (no expansion) decides %s for %v with shell control; the parent denies it", got, req.Commands)
	}
}

// TestAttackParentSnapshotMixedWindows: budget rules carry their own
// window, and a hand-made parent snapshot may give calls no window (a
// lifetime limit) and tokens a 1h window. snapshot.Parse accepts it (the
// executor refuses to run it); raise keeps the last rule's window for
// every budget, so a child that changes nothing limits calls per hour, not
// per lifetime.
func TestAttackParentSnapshotMixedWindows(t *testing.T) {
	snaps, res := attackCompile(t, `package p
policies: org: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["work"]
	budgets: {calls: 5, tokens: 1000, window: "1h"}
}
`)
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	parent := snaps["org"]
	for _, r := range parent.CompiledRules {
		if br, ok := r.(*snapshot.BudgetRule); ok && br.BudgetKind == "calls" {
			br.WindowMicroseconds = nil
		}
	}
	parent = reparse(t, parent)
	snaps, res = attackCompile(t, `package p
policies: bot: {version: "1", extends: "org"}
`, parent)
	if res.Diagnostics.HasErrors() {
		return // refused: held
	}
	for _, r := range snaps["bot"].CompiledRules {
		if br, ok := r.(*snapshot.BudgetRule); ok && br.BudgetKind == "calls" && br.WindowMicroseconds != nil {
			t.Errorf("child of a parent limiting calls to 5 over its lifetime limits them to 5 per %dµs (compiled without an expansion)", *br.WindowMicroseconds)
		}
	}
}

// TestAttackDuplicatePolicyID: polc compile accepts two policies with the
// same uuid — here a child that declares its parent's uuid. The bundle's
// index from policy_id to name (data.polc.ids) then keeps one of them (the
// last by name, the parent), and the Rego decision, which takes "a name or
// policy_id" (compiler/rego/decision.rego), decides the child's policy id
// with the parent's rules: `rm -rf /`, which the child's own snapshot
// denies natively, is allowed by OPA.
func TestAttackDuplicatePolicyID(t *testing.T) {
	snaps, res := attackCompile(t, `package p
policies: org: {
	version: "1"
	uuid: "11111111-1111-4111-8111-111111111111"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["bash", "read_file"]
	subprocess: mode: "allow"
}
policies: bot: {
	version: "1"
	extends: "org"
	uuid: "11111111-1111-4111-8111-111111111111"
	actions: allow: ["read_file"]
}
`)
	if res.Diagnostics.HasErrors() {
		return // refused: held
	}
	child := snaps["bot"]
	req := &executor.Normalized{Principal: "agent:x", Tenant: "acme", Action: "bash", Workspace: "/ws",
		Time: "2026-03-15T12:00:00.000000Z", Commands: [][]string{{"rm", "-rf", "/"}},
		Paths: []executor.PathAccess{}, Hosts: []string{}, Env: []string{}, Secrets: []string{}}
	native := decide(t, child, req)
	eng, err := regoeval.New(context.Background(), res.Files["bundle.tar.gz"])
	if err != nil {
		t.Fatal(err)
	}
	d, err := eng.Evaluate(context.Background(), child.PolicyID, req)
	if err != nil {
		t.Fatal(err)
	}
	if d.Disposition != native {
		t.Errorf("policy %s (%s): native %s, OPA by policy_id %s (rule ids %v): two policies share the id and the bundle keeps one", child.PolicyID, child.Name, native, d.Disposition, d.RuleIDs)
	}
}

// TestAttackPolicyNameShadowsID: the Rego decision looks input.policy up
// as a name first and as a policy_id second, and a policy may be named
// like another policy's id (a UUID is a valid name). A policy named after
// "bot"'s derived id takes over every OPA query for bot by id.
func TestAttackPolicyNameShadowsID(t *testing.T) {
	id := compiler.DerivedPolicyID("bot")
	snaps, res := attackCompile(t, `package p
policies: bot: {version: "1", principals: ["agent:*"], tenants: ["acme"], actions: allow: ["read_file"]}
policies: "`+id+`": {version: "1", principals: ["*"], tenants: ["*"], actions: allow: ["*"], subprocess: mode: "allow"}
`)
	if res.Diagnostics.HasErrors() {
		return // refused: held
	}
	bot := snaps["bot"]
	req := &executor.Normalized{Principal: "agent:x", Tenant: "acme", Action: "bash", Workspace: "/ws",
		Time: "2026-03-15T12:00:00.000000Z", Commands: [][]string{{"rm", "-rf", "/"}},
		Paths: []executor.PathAccess{}, Hosts: []string{}, Env: []string{}, Secrets: []string{}}
	native := decide(t, bot, req)
	eng, err := regoeval.New(context.Background(), res.Files["bundle.tar.gz"])
	if err != nil {
		t.Fatal(err)
	}
	d, err := eng.Evaluate(context.Background(), bot.PolicyID, req)
	if err != nil {
		t.Fatal(err)
	}
	if d.Disposition != native {
		t.Errorf("policy bot (id %s): native %s, OPA by policy_id %s: a policy named %q shadows the id", bot.PolicyID, native, d.Disposition, id)
	}
}
