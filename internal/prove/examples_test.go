package prove_test

import (
	"context"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	. "polc.dev/polc/internal/prove"
	"polc.dev/polc/internal/regoeval"
)

func examplesProver(t *testing.T) *Prover {
	t.Helper()
	res := compiler.Vet(compiler.Config{Dir: "../..", Now: func() time.Time { return time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC) }}, []string{"examples"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	bb, err := compiler.WriteBundle(res.Snapshots, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := regoeval.New(context.Background(), bb)
	if err != nil {
		t.Fatal(err)
	}
	pr := &Prover{Policies: map[string]*Policy{}, OPA: eng, Now: time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)}
	for _, s := range res.Snapshots {
		p, err := NewPolicy(s)
		if err != nil {
			t.Fatal(err)
		}
		pr.Policies[s.Name] = p
	}
	return pr
}

func TestExamplesTmp(t *testing.T) {
	pr := examplesProver(t)
	for _, c := range []struct{ policy, kind, pat, other string }{
		{"payments", Never, "write:/workspace/payments/secrets/**", ""},
		{"org", Never, "write:/**/.env", ""},
		{"org", AlwaysEscalates, "bash:git push *", ""},
		{"demo-agent", AlwaysEscalates, "bash:git push *", ""},
		{"build-agent", Never, "write:secrets/**", ""},
		{"payments-reviewer", NeverAllowsBeyond, "", "payments"},
		{"payments", NeverAllowsBeyond, "", "org"},
		{"org", NeverAllowsBeyond, "", "payments"},
	} {
		prop := Property{Policy: c.policy, Kind: c.kind, Other: c.other}
		if c.pat != "" {
			rp, err := ParseRequestPattern(c.pat)
			if err != nil {
				t.Fatal(err)
			}
			prop.Pattern = rp
		}
		start := time.Now()
		r, err := pr.Check(context.Background(), prop)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s %s (%v)", prop, r.Status, r.Reason, time.Since(start))
		if r.Counterexample != nil {
			t.Logf("   %+v %+v", r.Counterexample.Request, r.Counterexample.Decisions)
		}
	}
}
