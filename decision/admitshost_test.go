package decision_test

import (
	"slices"
	"testing"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/policygen"
	"polc.dev/polc/snapshot"
)

// TestAdmitsHostIsTheHostFacet: on random policies and requests with one
// host, AdmitsHost says yes exactly when Explain finds no network deny
// rule matching and the host facet allowed: the egress proxy of a
// containing backend admits what the decision engine would.
func TestAdmitsHostIsTheHostFacet(t *testing.T) {
	g := newGen(11, 12)
	decls, res := policygen.Compile(t, 12, g.policy)
	checked, admitted := 0, 0
	for _, s := range res.Snapshots {
		pol, err := decision.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		netDeny := map[string]bool{}
		for _, r := range s.CompiledRules {
			if r.Kind() == snapshot.KindNetwork && r.Base().Effect == snapshot.EffectDeny {
				netDeny[r.Base().RuleID] = true
			}
		}
		for j := range 60 {
			req := g.request()
			if j%2 == 0 {
				req = g.requestFor(decls[s.Name])
			}
			if len(req.Hosts) == 0 {
				req.Hosts = []string{g.host()}
			}
			req.Hosts = req.Hosts[:1]
			_, ex, _ := pol.Explain(req)
			_, hostNotAllowed := ex.NotAllowed["host"]
			want := !hostNotAllowed && !slices.ContainsFunc(ex.DenyMatches, func(id string) bool { return netDeny[id] })
			got := pol.AdmitsHost(req.Hosts[0])
			if got != want {
				t.Fatalf("%s: AdmitsHost(%q) = %v; the decision's host facet says %v (%+v)", s.Name, req.Hosts[0], got, want, ex)
			}
			checked++
			if got {
				admitted++
			}
		}
	}
	if admitted == 0 || admitted == checked {
		t.Fatalf("%d of %d hosts admitted: the generator must produce both", admitted, checked)
	}
}
