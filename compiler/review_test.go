package compiler

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/snapshot"
)

// TestEmptyPolicyParses: the most restrictive root (every field unset)
// compiles to a snapshot without rules, which must still be a snapshot that
// snapshot.Parse accepts (compiled_rules is [], never null), so that it can
// be evaluated and used as a --parent.
func TestEmptyPolicyParses(t *testing.T) {
	res := writeAndCompile(t, `package p
policies: bare: version: "1"
`)
	data := res.Files["snapshots/bare.json"]
	if data == nil {
		t.Fatalf("no snapshot emitted: %v", sortedKeys(res.Files))
	}
	s, err := snapshot.Parse(data)
	if err != nil {
		t.Fatalf("snapshot.Parse of an emitted snapshot: %v\n%s", err, data)
	}
	if s.Digest != res.Snapshots[0].Digest {
		t.Errorf("digest %s, emitted %s", s.Digest, res.Snapshots[0].Digest)
	}
}

// TestInSetParentEqualsSnapshotParent: a child compiles to the same snapshot
// whether its parent is in the compile set or given as its snapshot
// (--parent), including for parent state the snapshot cannot carry (a list
// without effect, a shell setting without commands, a window without limits)
// and for a budget window's provenance.
func TestInSetParentEqualsSnapshotParent(t *testing.T) {
	cases := []struct{ name, parent, child string }{
		{"window provenance, child window",
			`budgets: {calls: 10, window: "1h"}`,
			`budgets: window: "2h"`},
		{"window provenance, child limit",
			`budgets: {calls: 10, window: "1h"}`,
			`budgets: tokens: 5`},
		{"window without limits",
			`budgets: window: "1h"`,
			`budgets: calls: 5`},
		{"list without effect under mode deny",
			`network: {mode: "deny", allow: ["evil.example:443"]}`,
			`network: mode: "allowlist"
			expansions: [{path: "network.mode", values: ["allowlist"], authority: "a", evidence: "e"}]`},
		{"list without effect under mode allow",
			`network: {mode: "allow", allow: ["a.example:443"]}`,
			`network: mode: "allowlist"`},
		{"allowlist of everything",
			`network: {mode: "allowlist", allow: ["*"]}`,
			`network: allow: ["a.example:443"]`},
		{"shell without commands",
			`subprocess: {mode: "deny", shell: "allow"}`,
			`subprocess: {mode: "allowlist", allow: ["ls"]}
			expansions: [{path: "subprocess.allow", values: ["ls"], authority: "a", evidence: "e"}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, src string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("parent.cue", "package p\npolicies: parent: {\n\tversion: \"1\"\n\t"+c.parent+"\n}\n")
			write("child.cue", "package p\npolicies: child: {\n\tversion: \"2\"\n\textends: \"parent\"\n\t"+c.child+"\n}\n")
			together := Compile(Config{Dir: dir}, []string{"parent.cue", "child.cue"})
			if together.Diagnostics.HasErrors() {
				t.Fatal(together.Diagnostics)
			}
			ps, err := snapshot.Parse(together.Files["snapshots/parent.json"])
			if err != nil {
				t.Fatal(err)
			}
			apart := Compile(Config{Dir: dir, Parents: []*snapshot.Snapshot{ps}}, []string{"child.cue"})
			if apart.Diagnostics.HasErrors() {
				t.Fatal(apart.Diagnostics)
			}
			want, got := string(apart.Files["snapshots/child.json"]), string(together.Files["snapshots/child.json"])
			if got != want {
				t.Errorf("child compiled with its parent in the set differs from the child compiled with --parent:\n%s", cmp.Diff(want, got))
			}
		})
	}
}

// TestWindowProvenanceFromSnapshotParent: a child that declares its own
// budget window replaces the parent's, so the parent's budgets.window is no
// longer an origin of the child's budget rules — also when the parent is a
// --parent snapshot, where raise must split the window's origins back out of
// the budget rules.
func TestWindowProvenanceFromSnapshotParent(t *testing.T) {
	parent := writeAndCompile(t, `package p
policies: parent: {version: "1", budgets: {calls: 10, window: "1h"}}
`)
	ps, err := snapshot.Parse(parent.Files["snapshots/parent.json"])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := "package p\npolicies: child: {version: \"2\", extends: \"parent\", budgets: window: \"2h\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "child.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := Compile(Config{Dir: dir, Parents: []*snapshot.Snapshot{ps}}, []string{"child.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	want := []snapshot.Origin{{Policy: "child", Field: "budgets.window"}, {Policy: "parent", Field: "budgets.calls"}}
	for _, r := range res.Snapshots[0].CompiledRules {
		if r.Base().RuleID == "budget.calls" {
			if diff := cmp.Diff(want, r.Base().Provenance); diff != "" {
				t.Errorf("budget.calls provenance (-want +got):\n%s", diff)
			}
			return
		}
	}
	t.Fatal("no budget.calls rule")
}

// TestIntegersBeyondDoublePrecision: snapshots are RFC 8785 JSON, whose
// numbers are IEEE doubles. A budget above 2^53-1 used to compile and be
// rounded in the snapshot file (2^53+1 and 2^53 got the same digest), and
// one near 2^63 compiled to a snapshot that snapshot.Parse rejects. Such
// values are errors at their position (a window, being a duration, is
// invalid_value like a duration string too long: docs/errors.md); 2^53-1
// survives exactly.
func TestIntegersBeyondDoublePrecision(t *testing.T) {
	for _, c := range []struct{ field, value, code string }{
		{"budgets: cost_microunits", "9007199254740993", "schema_violation"},
		{"budgets: tokens", "9223372036854775807", "schema_violation"},
		{"budgets: window", "9007199254740993", "invalid_value"},
	} {
		dir := t.TempDir()
		src := "package p\npolicies: p: {\n\tversion: \"1\"\n\tbudgets: calls: 1\n\t" + c.field + ": " + c.value + "\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		res := Compile(Config{Dir: dir}, []string{"p.cue"})
		if !res.Diagnostics.HasErrors() {
			t.Errorf("%s: %s compiled: %s", c.field, c.value, res.Files["snapshots/p.json"])
			continue
		}
		d := res.Diagnostics[0]
		if d.Code != c.code || d.Pos.File != "p.cue" || d.Pos.Line != 5 {
			t.Errorf("%s: %s: got %v, want %s at p.cue:5", c.field, c.value, res.Diagnostics, c.code)
		}
	}
	res := writeAndCompile(t, "package p\npolicies: p: {version: \"1\", budgets: calls: 9007199254740991}\n")
	s, err := snapshot.Parse(res.Files["snapshots/p.json"])
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := s.CompiledRules[0].(*snapshot.BudgetRule); !ok || b.Limit != 9007199254740991 {
		t.Errorf("rule = %#v", s.CompiledRules[0])
	}
}

// TestDurationsBeyondDoublePrecision: a duration of more than 2^53-1
// microseconds (about 285 years) would be rounded in the snapshot.
func TestDurationsBeyondDoublePrecision(t *testing.T) {
	for _, field := range []string{
		`budgets: {calls: 1, window: "2560000h"}`,
		`actions: approve: [{pattern: "bash", approver: "lead", expires_after: "2560000h"}]`,
	} {
		dir := t.TempDir()
		src := "package p\npolicies: p: {\n\tversion: \"1\"\n\t" + field + "\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		res := Compile(Config{Dir: dir}, []string{"p.cue"})
		if !res.Diagnostics.HasErrors() {
			t.Errorf("%s compiled: %s", field, res.Files["snapshots/p.json"])
			continue
		}
		if d := res.Diagnostics[0]; d.Code != "invalid_value" || d.Pos.Line != 4 {
			t.Errorf("%s: got %v, want invalid_value at line 4", field, res.Diagnostics)
		}
	}
}

// TestDiffApprovalValidity: an approval that stays valid longer is a
// widening polc diff must report (the compiler already keeps the shorter
// expires_after when a child re-declares an approval).
func TestDiffApprovalValidity(t *testing.T) {
	src := `package p
policies: p: {version: "1", actions: {allow: ["bash"], approve: [{pattern: "bash", approver: "lead", expires_after: "%s"}]}}
`
	short := writeAndCompile(t, fmt.Sprintf(src, "1h")).Snapshots
	long := writeAndCompile(t, fmt.Sprintf(src, "720h")).Snapshots
	changes := DiffSets(short, long)
	if len(changes) != 1 || changes[0].Kind != "widened" || !changes[0].Unapproved() || changes[0].Path != "actions.approve" {
		t.Errorf("1h → 720h: changes = %v, want one unapproved widening of actions.approve", changes)
	}
	changes = DiffSets(long, short)
	if len(changes) != 1 || changes[0].Kind != "narrowed" {
		t.Errorf("720h → 1h: changes = %v, want one narrowing", changes)
	}
}
