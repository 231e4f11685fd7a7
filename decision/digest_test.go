package decision_test

import (
	"testing"

	"polc.dev/polc/decision"
)

// TestDecisionDigest checks that absent and empty lists digest alike,
// that Digest leaves the decision alone, and that each member counts.
func TestDecisionDigest(t *testing.T) {
	approver := "lead"
	full := decision.Decision{Disposition: decision.Deny, RuleIDs: []string{"r1"}, Reasons: []string{"x"},
		Gates: []decision.GateResult{{GateID: "g", Level: "hard", Decision: decision.Deny, ReasonCode: "x", RuleIDs: []string{"r1"}}}}
	sparse := decision.Decision{Disposition: decision.Allow, Gates: []decision.GateResult{{GateID: "g"}}}
	empty := decision.Decision{Disposition: decision.Allow, RuleIDs: []string{}, Reasons: []string{}, Gates: []decision.GateResult{{GateID: "g", RuleIDs: []string{}}}}
	if sparse.Digest() != empty.Digest() {
		t.Error("absent and empty lists digest differently")
	}
	if sparse.RuleIDs != nil || sparse.Gates[0].RuleIDs != nil {
		t.Error("Digest modified the decision")
	}
	seen := map[string]bool{full.Digest(): true}
	for _, mutate := range []func(*decision.Decision){
		func(d *decision.Decision) { d.Disposition = decision.Allow },
		func(d *decision.Decision) { d.RuleIDs = []string{"r2"} },
		func(d *decision.Decision) { d.Reasons = nil },
		func(d *decision.Decision) { d.Gates[0].Level = "soft" },
		func(d *decision.Decision) { d.ApproverClass = &approver },
	} {
		c := full
		c.Gates = []decision.GateResult{full.Gates[0]}
		mutate(&c)
		if seen[c.Digest()] {
			t.Errorf("mutation did not change the digest: %+v", c)
		}
		seen[c.Digest()] = true
	}
}
