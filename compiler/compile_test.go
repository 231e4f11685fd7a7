package compiler

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/internal/testutil"
	"polc.dev/polc/snapshot"
)

func compileExamples(t testing.TB) *Result {
	t.Helper()
	res := Compile(Config{Dir: ".."}, []string{"examples"})
	if len(res.Diagnostics) > 0 {
		t.Fatalf("examples: %v", res.Diagnostics)
	}
	return res
}

// TestExamples compiles the shipped examples cleanly and validates every
// snapshot against the JSON Schema and snapshot.Parse.
func TestExamples(t *testing.T) {
	res := compileExamples(t)
	if len(res.Snapshots) != 5 { // org, payments, payments-reviewer, demo-agent, build-agent
		t.Fatalf("got %d snapshots", len(res.Snapshots))
	}
	for name, data := range res.Files {
		if !strings.HasPrefix(name, "snapshots/") || strings.HasSuffix(name, ".srcmap.json") {
			continue
		}
		if err := testutil.CheckSnapshot(data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	reviewer := res.Files["snapshots/payments-reviewer.json"]
	s, err := snapshot.Parse(reviewer)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Lineage) != 2 || s.Lineage[0].Name != "org" || s.Lineage[1].Name != "payments" {
		t.Errorf("lineage = %+v", s.Lineage)
	}
	if len(s.Expansions) != 1 || s.Expansions[0].Path != "network.allow" {
		t.Errorf("expansions = %+v", s.Expansions)
	}
}

// TestRaiseLowerRoundTrip checks that lowering is lossless: raising a
// snapshot and lowering it again reproduces it byte for byte.
func TestRaiseLowerRoundTrip(t *testing.T) {
	res := compileExamples(t)
	byName := map[string]*snapshot.Snapshot{}
	for _, s := range res.Snapshots {
		byName[s.Name] = s
	}
	for _, s := range res.Snapshots {
		var parent *snapshot.Snapshot
		if n := len(s.Lineage); n > 0 {
			parent = byName[s.Lineage[n-1].Name]
		}
		l, err := lower(raise(s, nil), parent)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := s.Marshal()
		got, _ := l.snap.Marshal()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: raise∘lower differs:\n%s", s.Name, cmp.Diff(string(want), string(got)))
		}
	}
}

// TestUnsetInheritsNonDefault shows the unset-versus-default trap is
// avoided (docs/design-notes.md "Unset is not the default"): a child that
// leaves a field unset gets the parent's value, which differs from the root
// default, for every inheritable section.
func TestUnsetInheritsNonDefault(t *testing.T) {
	dir := t.TempDir()
	src := `package p
policies: parent: {
	version: "1"
	principals: ["p:*"]
	tenants: ["t"]
	actions: {allow: ["bash"], approve: [{pattern: "bash:make *", approver: "lead", expires_after: "1h"}]}
	filesystem: {read: ["/r/**"], write: ["/w/**"], execute: ["/x/*"]}
	network: {mode: "allow"}
	subprocess: {mode: "allowlist", allow: ["make *"], shell: "allow"}
	mcp: servers: [{server: "gh", tools: ["*"], resources: ["repo/**"]}]
	environment: {read: ["HOME"], inject: ["GOFLAGS"]}
	secrets: [{namespace: "ci/*", exposure: "inject"}]
	budgets: {calls: 7, window: "1h"}
	expires_at: "2030-01-01T00:00:00Z"
	gates: [{id: "adv", level: "advisory", rules: ["network.*"]}]
}
policies: child: {version: "2", extends: "parent"}
`
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := Compile(Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	var parent, child *snapshot.Snapshot
	for _, s := range res.Snapshots {
		if s.Name == "parent" {
			parent = s
		} else {
			child = s
		}
	}
	ids := func(s *snapshot.Snapshot) []string {
		var out []string
		for _, r := range s.CompiledRules {
			out = append(out, r.Base().RuleID)
		}
		return out
	}
	if diff := cmp.Diff(ids(parent), ids(child)); diff != "" {
		t.Errorf("child rules differ from parent's:\n%s", diff)
	}
	if len(child.CompiledRules) < 14 {
		t.Fatalf("only %d rules: %v", len(child.CompiledRules), ids(child))
	}
	if diff := cmp.Diff(parent.GateBindings, child.GateBindings); diff != "" {
		t.Errorf("gates differ:\n%s", diff)
	}
	if diff := cmp.Diff(parent.PrincipalScope, child.PrincipalScope); diff != "" {
		t.Errorf("principals differ:\n%s", diff)
	}
	// A root with the same unset fields gets the most restrictive defaults.
	rootOnly := writeAndCompile(t, `package p
policies: bare: version: "1"
`)
	bare := rootOnly.Snapshots[0]
	if len(bare.CompiledRules) != 0 || len(bare.PrincipalScope) != 0 || len(bare.GateBindings) != 1 {
		t.Errorf("bare root is not maximally restrictive: %d rules, scope %v, %d gates", len(bare.CompiledRules), bare.PrincipalScope, len(bare.GateBindings))
	}
}

func writeAndCompile(t testing.TB, src string) *Result {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := Compile(Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	return res
}

// genSet writes a 20-policy inheritance chain declaring about n patterns
// in total, each child narrowing its parent and adding denies.
func genSet(dir string, n int) error {
	const policies = 20
	per := n / policies
	var b strings.Builder
	b.WriteString("package bench\n\n")
	for i := range policies {
		fmt.Fprintf(&b, "policies: p%02d: {\n\tversion: \"1\"\n", i)
		if i > 0 {
			fmt.Fprintf(&b, "\textends: \"p%02d\"\n", i-1)
		}
		k := per / 5
		list := func(field string, f func(j int) string) {
			fmt.Fprintf(&b, "\t%s: [", field)
			for j := range k {
				if j > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%q", f(j))
			}
			b.WriteString("]\n")
		}
		depth := strings.Repeat("/d", i)
		list("filesystem: read", func(j int) string { return fmt.Sprintf("/repo/m%d%s/**", j, depth) })
		list("filesystem: deny", func(j int) string { return fmt.Sprintf("/repo/m%d%s/secret%d", j, depth, i) })
		if i == 0 {
			b.WriteString("\tnetwork: mode: \"allowlist\"\n\tsubprocess: mode: \"allowlist\"\n")
		}
		list("network: allow", func(j int) string {
			return "*." + strings.Repeat("a.", i) + fmt.Sprintf("l%d.example.com:443", j)
		})
		list("subprocess: allow", func(j int) string { return fmt.Sprintf("tool%d%s *", j, strings.Repeat(" s", i)) })
		list("actions: deny", func(j int) string { return fmt.Sprintf("bash:tool%d danger%d *", j, i) })
		b.WriteString("}\n")
	}
	return os.WriteFile(filepath.Join(dir, "bench.cue"), []byte(b.String()), 0o644)
}

// BenchmarkCompile compiles a generated 20-policy inheritance set of about
// 500, 2000 and 8000 declared patterns. ns/rule should stay flat.
func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{500, 2000, 8000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			if err := genSet(dir, n); err != nil {
				b.Fatal(err)
			}
			res := Compile(Config{Dir: dir}, []string{"bench.cue"})
			if res.Diagnostics.HasErrors() {
				b.Fatal(res.Diagnostics[:min(5, len(res.Diagnostics))])
			}
			rules := 0
			for _, s := range res.Snapshots {
				rules += len(s.CompiledRules)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				Compile(Config{Dir: dir}, []string{"bench.cue"})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/declared-rule")
			b.ReportMetric(float64(rules), "snapshot-rules")
		})
	}
}

func TestBenchSetCompiles(t *testing.T) {
	dir := t.TempDir()
	if err := genSet(dir, 500); err != nil {
		t.Fatal(err)
	}
	res := Compile(Config{Dir: dir}, []string{"bench.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	if len(res.Snapshots) != 20 {
		t.Fatalf("got %d snapshots", len(res.Snapshots))
	}
}
