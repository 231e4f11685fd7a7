package compiler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// compileSet compiles src (with parents) and returns the snapshots by
// name.
func compileSet(t *testing.T, src string, parents ...*snapshot.Snapshot) (map[string]*snapshot.Snapshot, *compiler.Result) {
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

// sealed reseals s and returns its file form.
func sealed(t *testing.T, s *snapshot.Snapshot) []byte {
	t.Helper()
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decide(t *testing.T, s *snapshot.Snapshot, r *normalize.Normalized) string {
	t.Helper()
	p, err := decision.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := p.Evaluate(r)
	return d.Disposition
}

// hasCode reports whether diags holds an error of code at line (0: any).
func hasCode(diags diag.List, code string, line int) bool {
	for _, d := range diags.Errors() {
		if d.Code == code && (line == 0 || d.Pos.Line == line) {
			return true
		}
	}
	return false
}

// TestParentSnapshotMixedShellRefused: a subprocess allow rule carries the
// policy's shell setting, and a hand-made parent snapshot (valid digest)
// could give different rules different settings: "a" may use shell
// control, "rm *" may not. snapshot.Parse accepted it and raise took the
// first allow rule's setting as the whole policy's, so a child that
// changed nothing inherited shell "allow" for every command and allowed
// "a; rm -rf x", which the parent denies, without an expansion. Parse (and
// Compile, for a parent given through the API) now refuses the parent.
func TestParentSnapshotMixedShellRefused(t *testing.T) {
	snaps, res := compileSet(t, `package p
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
	if _, err := snapshot.Parse(sealed(t, parent)); err == nil || !strings.Contains(err.Error(), "shell") {
		t.Errorf("Parse of subprocess allow rules with two shell settings: %v, want an error about shell", err)
	}
	req := &normalize.Normalized{Principal: "agent:x", Tenant: "acme", Action: "bash", Workspace: "/ws",
		Time: "2026-03-15T12:00:00.000000Z", Commands: [][]string{{"a"}, {"rm", "-rf", "x"}}, ShellControl: true}
	if got := decide(t, parent, req); got != decision.Deny {
		t.Fatalf("test setup: parent decides %s, want deny", got)
	}
	snaps, res = compileSet(t, "package p\npolicies: bot: {version: \"1\", extends: \"org\"}\n", parent)
	if !res.Diagnostics.HasErrors() {
		if got := decide(t, snaps["bot"], req); got != decision.Deny {
			t.Errorf("child of a hand-made parent (no expansion) decides %s for %v with shell control; the parent denies it", got, req.Commands)
		}
		t.Error("Compile accepted a parent whose subprocess allow rules disagree on shell")
	} else if !hasCode(res.Diagnostics, diag.CodeInvalidInput, 0) {
		t.Errorf("refused, but not as invalid_input: %v", res.Diagnostics)
	}
}

// TestParentSnapshotMixedWindowsRefused: budget rules carry the policy's
// window, and a hand-made parent snapshot could give calls no window (a
// lifetime limit) and tokens a 1h window. Parse accepted it; raise kept
// the last rule's window for every budget, so a child that changed
// nothing limited calls per hour, not per lifetime. Parse (and Compile)
// now refuses the parent.
func TestParentSnapshotMixedWindowsRefused(t *testing.T) {
	snaps, res := compileSet(t, `package p
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
	if _, err := snapshot.Parse(sealed(t, parent)); err == nil || !strings.Contains(err.Error(), "window") {
		t.Errorf("Parse of budget rules with two windows: %v, want an error about the window", err)
	}
	snaps, res = compileSet(t, "package p\npolicies: bot: {version: \"1\", extends: \"org\"}\n", parent)
	if !res.Diagnostics.HasErrors() {
		for _, r := range snaps["bot"].CompiledRules {
			if br, ok := r.(*snapshot.BudgetRule); ok && br.BudgetKind == "calls" && br.WindowMicroseconds != nil {
				t.Errorf("child of a parent limiting calls to 5 over its lifetime limits them to 5 per %dµs (compiled without an expansion)", *br.WindowMicroseconds)
			}
		}
		t.Error("Compile accepted a parent whose budget rules disagree on the window")
	} else if !hasCode(res.Diagnostics, diag.CodeInvalidInput, 0) {
		t.Errorf("refused, but not as invalid_input: %v", res.Diagnostics)
	}
}

// denyAllRequest is a request every policy of these tests but the widest
// denies.
var denyAllRequest = &normalize.Normalized{Principal: "agent:x", Tenant: "acme", Action: "bash", Workspace: "/ws",
	Time: "2026-03-15T12:00:00.000000Z", Commands: [][]string{{"rm", "-rf", "/"}},
	Paths: []normalize.PathAccess{}, Hosts: []string{}, Env: []string{}, Secrets: []string{}}

// opaDecides decides req for policy (a name or policy_id) with the Rego
// bundle in OPA.
func opaDecides(t *testing.T, bundle []byte, policy string, req *normalize.Normalized) decision.Decision {
	t.Helper()
	eng, err := regoeval.New(context.Background(), bundle)
	if err != nil {
		t.Fatal(err)
	}
	d, err := eng.Evaluate(context.Background(), policy, req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDuplicatePolicyIDRefused: polc compile accepted two policies with the
// same uuid — here a child declaring its parent's uuid. The bundle's index
// from policy_id to name (data.polc.ids) kept one of them (the parent), and
// the Rego decision, which takes "a name or policy_id", decided the
// child's id with the parent's rules: `rm -rf /`, which the child denies
// natively, was allowed by OPA. The compile set is now refused
// (duplicate_policy at both uuids), and a bundle cannot be written for two
// snapshots of one id compiled apart.
func TestDuplicatePolicyIDRefused(t *testing.T) {
	const org = `policies: org: {
	version: "1"
	uuid: "11111111-1111-4111-8111-111111111111"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["bash", "read_file"]
	subprocess: mode: "allow"
}
`
	const bot = `policies: bot: {
	version: "1"
	uuid: "11111111-1111-4111-8111-111111111111"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["read_file"]
}
`
	snaps, res := compileSet(t, "package p\n"+org+bot)
	if !res.Diagnostics.HasErrors() {
		child := snaps["bot"]
		native := decide(t, child, denyAllRequest)
		if d := opaDecides(t, res.Files["bundle.tar.gz"], child.PolicyID, denyAllRequest); d.Disposition != native {
			t.Errorf("policy %s (%s): native %s, OPA by policy_id %s (rule ids %v): two policies share the id and the bundle keeps one", child.PolicyID, child.Name, native, d.Disposition, d.RuleIDs)
		}
		t.Fatal("two policies with one uuid compiled")
	}
	if !hasCode(res.Diagnostics, diag.CodeDuplicatePolicy, 4) || !hasCode(res.Diagnostics, diag.CodeDuplicatePolicy, 12) {
		t.Errorf("want duplicate_policy at both uuids (lines 4 and 12): %v", res.Diagnostics)
	}
	// Compiled apart, each is valid; together they are no bundle.
	o, _ := compileSet(t, "package p\n"+org)
	b, _ := compileSet(t, "package p\n"+bot)
	if _, err := compiler.WriteBundle([]*snapshot.Snapshot{o["org"], b["bot"]}, nil); err == nil {
		t.Error("WriteBundle accepted two snapshots with one policy_id")
	}
}

// TestPolicyNameNotUUID: the Rego decision looks input.policy up as a name
// first and as a policy_id second, and a policy could be named like
// another policy's id (a UUID was a valid name): a policy named after
// bot's derived id took over every OPA query for bot by id. Such a name is
// now invalid_value, and a bundle cannot be written for a (hand-made)
// snapshot named like another's id.
func TestPolicyNameNotUUID(t *testing.T) {
	id := compiler.DerivedPolicyID("bot")
	const bot = `policies: bot: {version: "1", principals: ["agent:*"], tenants: ["acme"], actions: allow: ["read_file"]}
`
	snaps, res := compileSet(t, "package p\n"+bot+`policies: "`+id+`": {version: "1", principals: ["*"], tenants: ["*"], actions: allow: ["*"], subprocess: mode: "allow"}
`)
	if !res.Diagnostics.HasErrors() {
		b := snaps["bot"]
		native := decide(t, b, denyAllRequest)
		if d := opaDecides(t, res.Files["bundle.tar.gz"], b.PolicyID, denyAllRequest); d.Disposition != native {
			t.Errorf("policy bot (id %s): native %s, OPA by policy_id %s: a policy named %q shadows the id", b.PolicyID, native, d.Disposition, id)
		}
		t.Fatal("a policy named like a UUID compiled")
	}
	if !hasCode(res.Diagnostics, diag.CodeInvalidValue, 3) {
		t.Errorf("want invalid_value at the name (line 3): %v", res.Diagnostics)
	}
	b, _ := compileSet(t, "package p\n"+bot)
	w, _ := compileSet(t, "package p\npolicies: wide: {version: \"1\", principals: [\"*\"], tenants: [\"*\"], actions: allow: [\"*\"]}\n")
	wide := w["wide"]
	wide.Name = id
	if _, err := snapshot.Parse(sealed(t, wide)); err != nil {
		t.Fatalf("test setup: a hand-made snapshot named %q: %v", id, err)
	}
	if _, err := compiler.WriteBundle([]*snapshot.Snapshot{b["bot"], wide}, nil); err == nil {
		t.Errorf("WriteBundle accepted a snapshot named %q next to the policy of that id", id)
	}
}

// TestParentsOfOneNameRefused: of two parent snapshots of one name given
// to Compile, the last silently won, so a child was checked against (and
// inherited from) whichever came last. Both the CLI (at both files,
// polc_compile_parent_twice) and Compile refuse them.
func TestParentsOfOneNameRefused(t *testing.T) {
	a, _ := compileSet(t, "package a\npolicies: org: {version: \"1\", filesystem: read: [\"/ws/**\"]}\n")
	b, _ := compileSet(t, "package b\npolicies: org: {version: \"2\", filesystem: read: [\"/**\"]}\n")
	snaps, res := compileSet(t, "package c\npolicies: bot: {version: \"1\", extends: \"org\", filesystem: read: [\"/etc/**\"]}\n", a["org"], b["org"])
	if !res.Diagnostics.HasErrors() {
		t.Fatalf("two parents named org compiled; bot reads %v", snaps["bot"].CompiledRules)
	}
	if !hasCode(res.Diagnostics, diag.CodeDuplicatePolicy, 0) {
		t.Errorf("want duplicate_policy: %v", res.Diagnostics)
	}
}

// TestDiffParentPolicyIDChange: a parent that keeps its name but not its
// policy_id is another policy. polc diff reports the change as a widening
// of extends (with the new id, which an expansion naming it approves) and
// approves nothing as within that parent.
func TestDiffParentPolicyIDChange(t *testing.T) {
	v1, res := compileSet(t, `package p
policies: org: {version: "1", uuid: "44444444-4444-4444-8444-444444444444", filesystem: read: ["/workspace/**"]}
policies: bot: {version: "1", extends: "org", filesystem: read: ["/workspace/a/**"]}
`)
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	v2, res := compileSet(t, `package p
policies: org: {version: "1", uuid: "55555555-5555-4555-8555-555555555555", filesystem: read: ["/workspace/**"]}
policies: bot: {version: "2", extends: "org"}
`)
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	changes := compiler.DiffSets([]*snapshot.Snapshot{v1["org"], v1["bot"]}, []*snapshot.Snapshot{v2["org"], v2["bot"]})
	var moved, read *compiler.Change
	for i, c := range changes {
		switch {
		case c.Policy == "bot" && c.Path == "extends":
			moved = &changes[i]
		case c.Policy == "bot" && c.Path == "filesystem.read" && c.Kind == "widened":
			read = &changes[i]
		}
	}
	if moved == nil || moved.Kind != "widened" || moved.Value != "55555555-5555-4555-8555-555555555555" || !moved.Unapproved() {
		t.Errorf("extends change: %+v, want an unapproved widening to the new id (changes %v)", moved, changes)
	}
	if read == nil || !read.Unapproved() {
		t.Errorf("filesystem.read widening: %+v, want unapproved: the new org approves nothing of the old one's child (changes %v)", read, changes)
	}
	v3, res := compileSet(t, `package p
policies: org: {version: "1", uuid: "55555555-5555-4555-8555-555555555555", filesystem: read: ["/workspace/**"]}
policies: bot: {version: "2", extends: "org", filesystem: read: ["/workspace/a/**"], expansions: [{path: "extends", values: ["55555555-5555-4555-8555-555555555555"], authority: "sec", evidence: "SEC-5"}]}
`)
	if res.Diagnostics.HasErrors() || len(res.Diagnostics) > 0 {
		t.Fatalf("an extends expansion naming the parent's id: %v", res.Diagnostics)
	}
	for _, c := range compiler.DiffSets([]*snapshot.Snapshot{v1["org"], v1["bot"]}, []*snapshot.Snapshot{v3["org"], v3["bot"]}) {
		if c.Policy == "bot" && c.Unapproved() {
			t.Errorf("with the extends expansion: unapproved %v", c)
		}
	}
}
