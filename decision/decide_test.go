package decision_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/policygen"
)

// TestDecideIsEvaluate: Decide, the entry point a runtime embeds, gives
// Evaluate's decision on random policies and requests.
func TestDecideIsEvaluate(t *testing.T) {
	g := newGen(7, 8)
	decls, res := policygen.Compile(t, 10, g.policy)
	for _, s := range res.Snapshots {
		pol, err := decision.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 30 {
			req := g.request()
			if j%3 != 0 {
				req = g.requestFor(decls[s.Name])
			}
			want, _ := pol.Evaluate(req)
			if diff := cmp.Diff(want, pol.Decide(req)); diff != "" {
				t.Fatalf("%s: (-Evaluate +Decide)\n%s", s.Name, diff)
			}
		}
	}
}

// TestDecideAllocations: on the benchmark's requests (every facet, at 50
// and 2,000 rules) EvaluateInto with a Scratch of the caller's allocates
// nothing, and Decide allocates only the decision it returns.
func TestDecideAllocations(t *testing.T) {
	for _, size := range []int{50, 2000} {
		pol, err := decision.Compile(benchPolicy(t, size))
		if err != nil {
			t.Fatal(err)
		}
		scratch := pol.NewScratch()
		for _, r := range benchRequests(max(size/20, 1)) {
			if d := pol.Decide(r.req); d.Disposition != r.want {
				t.Fatalf("%d rules, %s: Decide says %s %v, want %s", size, r.class, d.Disposition, d.Reasons, r.want)
			}
			if n := testing.AllocsPerRun(50, func() { pol.Decide(r.req) }); n > 2 {
				t.Errorf("%d rules, %s: Decide allocates %v times, want at most 2", size, r.class, n)
			}
			var d decision.Decision
			pol.EvaluateInto(r.req, scratch, &d) // warm d's lists
			if n := testing.AllocsPerRun(50, func() { pol.EvaluateInto(r.req, scratch, &d) }); n != 0 {
				t.Errorf("%d rules, %s: EvaluateInto allocates %v times, want 0", size, r.class, n)
			}
		}
	}
}
