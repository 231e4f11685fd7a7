package executor_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/normalize"
)

// TestExplainDecisionEqualsEvaluate: Explain's decision is Evaluate's,
// down to its JSON (a gate without matched rules printed "rule_ids": null
// with --explain and [] without).
func TestExplainDecisionEqualsEvaluate(t *testing.T) {
	p := reviewPolicy(t, `
	actions: {allow: ["bash"], approve: [{pattern: "bash:git push *", approver: "lead", expires_after: "1h"}]}
	subprocess: {mode: "allowlist", allow: ["ls *"]}`)
	for _, cmd := range []string{"ls", "git push", "rm x"} {
		n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
			Action: "bash", Arguments: map[string]any{"command": cmd}, Principal: "agent:a", Tenant: "acme", Workspace: "/ws",
		})
		if nerr != nil {
			t.Fatal(nerr)
		}
		want, _ := p.Evaluate(n)
		got, _, _ := p.Explain(n)
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if diff := cmp.Diff(string(wj), string(gj)); diff != "" {
			t.Errorf("%q: Explain's decision differs from Evaluate's (-want +got):\n%s", cmd, diff)
		}
	}
}
