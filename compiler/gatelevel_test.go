package compiler

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

// gateParent is a parent that enforces, at its default (hard) gate, its
// command, write, host, budget and expiry checks and a deny, and puts its
// approval under its soft approval gate.
const gateParent = `package p

policies: parent: {
	version:    "1"
	principals: ["*"]
	tenants:    ["*"]
	actions: {
		allow:   ["bash", "write_file", "http_get"]
		deny:    ["bash:rm -rf *"]
		approve: [{pattern: "bash:git push *", approver: "lead", expires_after: "1h"}]
	}
	subprocess: {mode: "allowlist", allow: ["ls *", "git *"]}
	filesystem: {read: ["**"], write: ["out/**"]}
	network: {mode: "allowlist", allow: ["*.test:443"]}
	budgets: calls: 10
	expires_at: "2027-01-01T00:00:00Z"
}
`

// compileChild compiles gateParent (plus extra parent fields) and a child,
// once with the parent in the compile set and once with the parent given
// as a snapshot, and returns both results' diagnostics for the child.
func compileChild(t *testing.T, parentExtra, child string) []diag.List {
	t.Helper()
	dir := t.TempDir()
	parent := gateParent
	if parentExtra != "" {
		parent = strings.Replace(parent, "\tversion:    \"1\"\n", "\tversion:    \"1\"\n\t"+parentExtra+"\n", 1)
	}
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("parent.cue", parent)
	write("child.cue", "package p\n\npolicies: child: {\n\tversion: \"2\"\n\textends: \"parent\"\n"+child+"\n}\n")
	cfg := Config{Dir: dir, Now: func() time.Time { return time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC) }}
	alone := Compile(cfg, []string{"parent.cue"})
	ps, err := snapshot.Parse(alone.Files["snapshots/parent.json"])
	if err != nil {
		t.Fatalf("parent: %v (%v)", err, alone.Diagnostics)
	}
	together := Compile(cfg, []string{"parent.cue", "child.cue"})
	cfg.Parents = []*snapshot.Snapshot{ps}
	apart := Compile(cfg, []string{"child.cue"})
	return []diag.List{together.Diagnostics, apart.Diagnostics}
}

// TestGateLevelRoutes: every route by which a child could apply a check its
// parent enforces at a lower level is refused, positioned at the child's
// gate (or, for a gate it inherits, at its own rule the gate takes), and an
// expansion naming the gate allows it; children that lower nothing the
// parent enforces compile.
func TestGateLevelRoutes(t *testing.T) {
	cases := []struct {
		name, parent, child string
		// want is "" for a child that compiles, else the position
		// ("line:col" in child.cue) and substrings of the refusal.
		pos  string
		want []string
	}{
		{name: "narrowed allows under an advisory gate of the child",
			child: `	subprocess: allow: ["ls -l *"]
	filesystem: write: ["out/tmp/**"]
	network: allow: ["api.test:443"]
	gates: [{id: "quiet", level: "advisory", rules: ["subprocess.allow:*", "filesystem.write:*", "network.allow:*"]}]`,
			pos:  "9:10",
			want: []string{`gate "quiet" (advisory)`, "not_allowed:command (hard in parent)", "not_allowed:shell (hard in parent)", "not_allowed:path_write (hard in parent)", "not_allowed:host (hard in parent)"}},
		{name: "narrowed allows under a soft gate (hard > soft)",
			child: `	subprocess: allow: ["ls -l *"]
	gates: [{id: "review", level: "soft", rules: ["subprocess.allow:*"]}]`,
			pos:  "7:10",
			want: []string{`gate "review" (soft)`, "not_allowed:command (hard in parent)"}},
		{name: "an inherited gate takes the child's narrowed allows",
			parent: `gates: [{id: "pre", level: "advisory", rules: ["subprocess.allow:ls -l *"]}]`,
			child:  `	subprocess: allow: ["ls -l *"]`,
			pos:    "6:22",
			want:   []string{`gate "pre" (advisory)`, "not_allowed:command (hard in parent)"}},
		{name: "a parent gate id redeclared at a lower level",
			parent: `gates: [{id: "strict", level: "hard", rules: ["action.deny:*"]}]`,
			child:  `	gates: [{id: "strict", level: "advisory", rules: ["action.deny:*"]}]`,
			pos:    "6:10",
			want:   []string{`gate "strict" (advisory)`, "action.deny:bash:rm -rf * (hard in parent)"}},
		{name: "a child gate captures the parent's denies",
			child: `	gates: [{id: "lenient", level: "advisory", rules: ["action.deny:*"]}]`,
			pos:   "6:10",
			want:  []string{"action.deny:bash:rm -rf * (hard in parent)"}},
		{name: "approvals moved to an advisory gate",
			child: `	gates: [{id: "lenient", level: "advisory", rules: ["approval*"]}]`,
			pos:   "6:10",
			want:  []string{"approval[lead]:bash:git push * (soft in parent)"}},
		{name: "approvals the parent makes hard fall back to the soft default",
			parent: `gates: [{id: "never", level: "hard", rules: ["approval*"]}]`,
			child:  `	gates: []`,
			pos:    "6:2",
			want:   []string{`gate "polc.approval" (soft)`, "approval[lead]:bash:git push * (hard in parent)"}},
		{name: "budgets under an advisory gate",
			child: `	budgets: calls: 5
	gates: [{id: "lenient", level: "advisory", rules: ["budget.*"]}]`,
			pos:  "7:10",
			want: []string{"budget.calls (hard in parent)", "not_allowed:budget (hard in parent)"}},
		{name: "expiry under an advisory gate",
			child: `	expires_at: "2026-12-01T00:00:00Z"
	gates: [{id: "lenient", level: "advisory", rules: ["expiry"]}]`,
			pos:  "7:10",
			want: []string{"expiry (hard in parent)", "not_allowed:expiry (hard in parent)"}},
		{name: "every rule under one advisory gate",
			child: `	gates: [{id: "all", level: "advisory", rules: ["*"]}]`,
			pos:   "6:10",
			want:  []string{"not_allowed:action (hard in parent)", "action.deny:bash:rm -rf * (hard in parent)"}},
		{name: "an expansion naming the gate allows it",
			child: `	subprocess: allow: ["ls -l *"]
	gates: [{id: "quiet", level: "advisory", rules: ["subprocess.allow:*"]}]
	expansions: [{path: "gates", values: ["quiet"], authority: "security-review", evidence: "SEC-7"}]`},
		{name: "the parent's check is advisory already",
			parent: `gates: [{id: "quiet", level: "advisory", rules: ["subprocess.allow:*"]}]`,
			child: `	subprocess: allow: ["ls -l *"]
	gates: [{id: "quiet", level: "advisory", rules: ["subprocess.allow:*"]}]`},
		{name: "a stricter gate",
			child: `	subprocess: allow: ["ls -l *"]
	gates: [{id: "firm", level: "hard", rules: ["*"]}]`},
		{name: "the child's own denies under an advisory gate",
			child: `	subprocess: deny: ["ls -l /etc"]
	gates: [{id: "note", level: "advisory", rules: ["subprocess.deny:*"]}]`},
		{name: "one of the facet's allow rules stays hard",
			child: `	subprocess: allow: ["ls -l *", "git status"]
	gates: [{id: "note", level: "advisory", rules: ["subprocess.allow:ls*"]}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, diags := range compileChild(t, c.parent, c.child) {
				how := []string{"parent in the set", "parent as a snapshot"}[i]
				var errs []*diag.Diagnostic
				for _, d := range diags {
					if d.Severity == diag.Error {
						errs = append(errs, d)
					}
				}
				if c.want == nil {
					if len(errs) > 0 {
						t.Errorf("%s: want it compiled, got %v", how, errs)
					}
					continue
				}
				if len(errs) != 1 {
					t.Fatalf("%s: want one error, got %v", how, diags)
				}
				d := errs[0]
				if got := d.Pos.String(); d.Code != diag.CodeExpansionUnauth || got != "child.cue:"+c.pos {
					t.Errorf("%s: got %s %s, want child.cue:%s %s", how, got, d.Code, c.pos, diag.CodeExpansionUnauth)
				}
				for _, w := range c.want {
					if !strings.Contains(d.Message, w) {
						t.Errorf("%s: message %q lacks %q", how, d.Message, w)
					}
				}
			}
		})
	}
}

// TestGateLevelExpansionRecorded: the expansion that allows a gate to apply
// a parent's check lower is recorded in the snapshot, so polc diff approves
// the lowering by it.
func TestGateLevelExpansionRecorded(t *testing.T) {
	res := writeAndCompile(t, gateParent+`
policies: child: {
	version: "2"
	extends: "parent"
	subprocess: allow: ["ls -l *"]
	gates: [{id: "quiet", level: "advisory", rules: ["subprocess.allow:*"]}]
	expansions: [{path: "gates", values: ["quiet"], authority: "security-review", evidence: "SEC-7"}]
}
`)
	for _, s := range res.Snapshots {
		if s.Name != "child" {
			continue
		}
		if len(s.Expansions) != 1 || s.Expansions[0].Path != "gates" || !slices.Equal(s.Expansions[0].Values, []any{"quiet"}) {
			t.Errorf("expansions = %+v", s.Expansions)
		}
	}
}

// TestDiffGateLevelLowering: polc diff reports a facet check applied at a
// lower level as a widening of the gate that now applies it, for OLD vs
// NEW of one policy and against NEW's parent: a child snapshot that lowers
// its parent's check (as one compiled before the compiler refused it, or
// with its expansion stripped) is not "within parent".
func TestDiffGateLevelLowering(t *testing.T) {
	oldSet := writeAndCompile(t, gateParent+`
policies: child: {version: "2", extends: "parent", subprocess: allow: ["ls -l *"]}
`).Snapshots
	newSet := writeAndCompile(t, gateParent+`
policies: child: {
	version: "3"
	extends: "parent"
	subprocess: allow: ["ls -l *"]
	gates: [{id: "quiet", level: "advisory", rules: ["subprocess.allow:*"]}]
	expansions: [{path: "gates", values: ["quiet"], authority: "security-review", evidence: "SEC-7"}]
}
`).Snapshots
	find := func(cs []Change, note string) *Change {
		for i, c := range cs {
			if c.Policy == "child" && c.Path == "gates" && c.Note == note {
				return &cs[i]
			}
		}
		return nil
	}
	changes := DiffSets(oldSet, newSet)
	c := find(changes, "not_allowed:command: hard → advisory")
	if c == nil || c.Kind != "widened" || c.Value != "quiet" || c.Approved == nil || c.Approved.Authority != "security-review" {
		t.Fatalf("with the expansion: changes = %v", changes)
	}
	// The same child without its expansion.
	for i, s := range newSet {
		if s.Name == "child" {
			stripped := *s
			stripped.Expansions = []snapshot.Expansion{}
			if err := stripped.Seal(); err != nil {
				t.Fatal(err)
			}
			newSet[i] = &stripped
		}
	}
	changes = DiffSets(oldSet, newSet)
	for _, note := range []string{"not_allowed:command: hard → advisory", "not_allowed:shell: hard → advisory", "subprocess.allow:ls -l *: hard → advisory"} {
		if c := find(changes, note); c == nil || !c.Unapproved() {
			t.Errorf("without the expansion, %q: got %v in %v, want an unapproved widening (not within the parent)", note, c, changes)
		}
	}
	// And back: the facet is hard again, a narrowing.
	if c := find(DiffSets(newSet, oldSet), "not_allowed:command: advisory → hard"); c == nil || c.Kind != "narrowed" {
		t.Errorf("NEW → OLD: got %v, want a narrowing", c)
	}
}
