package prove_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/cputime"
	. "polc.dev/polc/internal/prove"
)

// bigPolicy declares a policy of about n rules over every facet: grants,
// denies and approvals that overlap in the ways real policies do (roots
// with denied subtrees, command families with denied flags).
func bigPolicy(n int, extra map[string]any) map[string]any {
	k := n / 20
	var read, write, fsDeny, hosts, hostDeny, cmds, cmdDeny, deny, inject, envDeny []string
	var approve []map[string]any
	for i := range 4 * k {
		read = append(read, fmt.Sprintf("/srv/app%d/**", i))
		write = append(write, fmt.Sprintf("/srv/app%d/data/**", i))
		cmds = append(cmds, fmt.Sprintf("tool%d *", i))
	}
	for i := range 2 * k {
		fsDeny = append(fsDeny, fmt.Sprintf("/srv/app%d/secrets/**", i))
		cmdDeny = append(cmdDeny, fmt.Sprintf("tool%d --danger *", i))
		hosts = append(hosts, fmt.Sprintf("svc%d.internal:443", i), fmt.Sprintf("*.region%d.example.com", i))
	}
	for i := range k {
		hostDeny = append(hostDeny, fmt.Sprintf("admin.region%d.example.com", i))
		deny = append(deny, fmt.Sprintf("bash:rm -rf /srv/app%d/*", i), fmt.Sprintf("write_file:/srv/app%d/**/.env", i))
		approve = append(approve, map[string]any{"pattern": fmt.Sprintf("bash:deploy svc%d *", i), "approver": "release", "expires_after": "1h"})
		inject = append(inject, fmt.Sprintf("APP%d_*", i))
		envDeny = append(envDeny, fmt.Sprintf("APP%d_SECRET*", i))
	}
	pol := map[string]any{
		"version":    "1",
		"principals": []string{"agent:team-*"},
		"tenants":    []string{"acme"},
		"actions": map[string]any{
			"allow":   []string{"bash", "read_file", "write_file", "edit_file", "http_get", "mcp"},
			"deny":    deny,
			"approve": approve,
		},
		"filesystem":  map[string]any{"read": read, "write": write, "deny": fsDeny},
		"network":     map[string]any{"mode": "allowlist", "allow": hosts, "deny": hostDeny},
		"subprocess":  map[string]any{"mode": "allowlist", "allow": append(cmds, "deploy *"), "deny": cmdDeny},
		"environment": map[string]any{"inject": inject, "deny": envDeny},
	}
	for k, v := range extra {
		pol[k] = v
	}
	return pol
}

func bigProver(t testing.TB, n int) (*Prover, int) {
	t.Helper()
	dir := t.TempDir()
	child := bigPolicy(n, map[string]any{"extends": "big"})
	// The child narrows: half its read roots and one more deny.
	fs := child["filesystem"].(map[string]any)
	fs["read"] = fs["read"].([]string)[:len(fs["read"].([]string))/2]
	fs["deny"] = append(fs["deny"].([]string), "/srv/app1/**/*.key")
	decls := map[string]any{"policies": map[string]any{"big": bigPolicy(n, nil), "child": child}}
	b, _ := json.Marshal(decls)
	if err := os.WriteFile(filepath.Join(dir, "big.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	res := compiler.Vet(compiler.Config{Dir: dir, Now: func() time.Time { return now }}, []string{"big.json"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	eng := compiletest.OPA(t, res.Snapshots)
	pr := &Prover{Policies: map[string]*Policy{}, OPA: eng, Now: now}
	rules := 0
	for _, s := range res.Snapshots {
		p, err := NewPolicy(s)
		if err != nil {
			t.Fatal(err)
		}
		pr.Policies[s.Name] = p
		if s.Name == "big" {
			rules = len(s.CompiledRules)
		}
	}
	return pr, rules
}

func bigProperties(t testing.TB) []Property {
	pat := func(s string) RequestPattern {
		rp, err := ParseRequestPattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return rp
	}
	return []Property{
		{Policy: "big", Kind: Never, Pattern: pat("write:/srv/app7/secrets/**")},
		{Policy: "big", Kind: Never, Pattern: pat("write:/etc/**")},
		{Policy: "big", Kind: AlwaysEscalates, Pattern: pat("bash:deploy svc3 *")},
		{Policy: "big", Kind: Never, Pattern: pat("host:admin.region3.example.com")},
		{Policy: "child", Kind: NeverAllowsBeyond, Other: "big"},
		{Policy: "big", Kind: NeverAllowsBeyond, Other: "child"},
	}
}

// TestBigPolicyAnswers: every property on a 2,000-rule policy is
// answered (holds or fails, never undecided), each by a fresh prover (no
// automaton cached from another question). How long each takes is
// BenchmarkProve's to measure (bench/prove.sh prints it against the
// budget of docs/prove.md); the CPU time is only logged here, so that a
// loaded machine cannot fail the suite.
func TestBigPolicyAnswers(t *testing.T) {
	_, rules := bigProver(t, 2000)
	if rules < 2000 {
		t.Fatalf("the policy has %d rules, want at least 2000", rules)
	}
	for _, prop := range bigProperties(t) {
		pr, _ := bigProver(t, 2000)
		cpu0, _ := cputime.Process()
		start := time.Now()
		r, err := pr.Check(context.Background(), prop)
		if err != nil {
			t.Fatal(err)
		}
		cpu1, _ := cputime.Process()
		t.Logf("%s: %s in %v (CPU %v)", prop, r.Status, time.Since(start), cpu1-cpu0)
		if r.Status == Undecided {
			t.Errorf("%s: undecided: %s", prop, r.Reason)
		}
	}
}

// BenchmarkProve answers each property of bigProperties on a 2,000-rule
// policy, with a fresh prover per answer (bench/prove.sh).
func BenchmarkProve(b *testing.B) {
	for i, prop := range bigProperties(b) {
		b.Run(fmt.Sprintf("%d-%s", i, prop.Kind), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				pr, _ := bigProver(b, 2000)
				b.StartTimer()
				if _, err := pr.Check(context.Background(), prop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBigPolicyLint: polc vet's findings on a 2,000-rule policy are
// computed (the time is logged; BenchmarkLint measures it).
func TestBigPolicyLint(t *testing.T) {
	n := 2000
	if s := os.Getenv("POLC_LINT_RULES"); s != "" {
		fmt.Sscan(s, &n)
	}
	pr, _ := bigProver(t, n)
	start := time.Now()
	fs, err := pr.Lint(pr.Policies["child"], pr.Policies["big"])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d findings in %v", len(fs), time.Since(start))
}

// BenchmarkLint computes polc vet's findings for a child narrowing a
// 2,000-rule policy, a fresh prover per run (bench/prove.sh).
func BenchmarkLint(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		pr, _ := bigProver(b, 2000)
		b.StartTimer()
		if _, err := pr.Lint(pr.Policies["child"], pr.Policies["big"]); err != nil {
			b.Fatal(err)
		}
	}
}
