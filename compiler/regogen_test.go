package compiler_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
)

// TestBundleGrantsOfEveryGate: on the allow path the generated Rego lists
// each gate's grants. Budgets and expiry are grants too (while within
// them), though their rules are not allow rules: the first generated
// bundle left them out of a gate of their own (the gate listed no rule
// ids, the native evaluator listed the budget rules).
func TestBundleGrantsOfEveryGate(t *testing.T) {
	snaps := compileSrc(t, `package p
policies: a: {
	version: "1"
	principals: ["*"]
	tenants: ["*"]
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["git *"]}
	budgets: {calls: 10, tokens: 100}
	not_before: "2026-01-01T00:00:00Z"
	expires_at: "2027-01-01T00:00:00Z"
	gates: [{id: "spend", level: "hard", rules: ["budget.*"]}]
}
`)
	bb, err := compiler.WriteBundle(snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eng, err := regoeval.New(ctx, bb)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := decision.Compile(snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd   []string
		calls int64
		time  string
	}{
		{[]string{"git", "status"}, 0, "2026-06-01T00:00:00.000000Z"},
		{[]string{"git", "status"}, 10, "2026-06-01T00:00:00.000000Z"},
		{[]string{"ls"}, 0, "2026-06-01T00:00:00.000000Z"},
		{[]string{"git", "log"}, 0, "2027-06-01T00:00:00.000000Z"},
	} {
		req := &normalize.Normalized{Principal: "u", Tenant: "t", Action: "bash", Workspace: "/ws", Time: tc.time,
			Paths: []normalize.PathAccess{}, Commands: [][]string{tc.cmd}, Hosts: []string{}, Env: []string{}, Secrets: []string{},
			Usage: normalize.Usage{Calls: tc.calls}}
		want, _ := pol.Evaluate(req)
		got, err := eng.Evaluate(ctx, "a", req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%v, %d calls, %s: engines disagree (-native +opa):\n%s", tc.cmd, tc.calls, tc.time, diff)
		}
	}
}
