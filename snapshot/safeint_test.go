package snapshot_test

import (
	"encoding/json"
	"strings"
	"testing"

	"polc.dev/polc/snapshot"
)

// TestIntegersBeyond2p53: canonical JSON numbers are doubles, so an integer
// member beyond 2^53-1 has no exact canonical form. A snapshot whose budget
// limit is 2^53 and one whose limit is 2^53+1 used to validate and seal to
// the same digest (two policies, one digest), and Parse accepted such
// values when they happened to be exact doubles. Validate and Parse bound
// every integer rule member to [0, 2^53-1], as the schema's #SafeInt and
// the compiler do.
func TestIntegersBeyond2p53(t *testing.T) {
	s, err := snapshot.Parse(valid(t))
	if err != nil {
		t.Fatal(err)
	}
	var budget *snapshot.BudgetRule
	var budgets []*snapshot.BudgetRule // a policy has one window: set it on all
	var approval *snapshot.ApprovalRule
	for _, r := range s.CompiledRules {
		switch r := r.(type) {
		case *snapshot.BudgetRule:
			budgets = append(budgets, r)
			if budget == nil && r.WindowMicroseconds != nil {
				budget = r
			}
		case *snapshot.ApprovalRule:
			if approval == nil && r.ExpiresAfterMicroseconds != nil {
				approval = r
			}
		}
	}
	if budget == nil || approval == nil {
		t.Fatal("testdata/valid.json has no budget rule with a window or approval rule with an expiry")
	}
	const safe = 1<<53 - 1
	digest := func() string {
		d, err := s.ComputeDigest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	orig := budget.Limit
	budget.Limit = 1 << 53
	d1 := digest()
	budget.Limit = 1<<53 + 1
	if d2 := digest(); d1 != d2 {
		t.Fatalf("premise: 2^53 and 2^53+1 have different digests %s %s", d1, d2)
	}
	budget.Limit = orig
	for name, set := range map[string]func(n int64){
		"limit": func(n int64) { budget.Limit = n },
		"window_microseconds": func(n int64) {
			for _, b := range budgets {
				b.WindowMicroseconds = &n
			}
		},
		"expires_after_microseconds": func(n int64) { approval.ExpiresAfterMicroseconds = &n },
	} {
		limit, window, expires := budget.Limit, *budget.WindowMicroseconds, *approval.ExpiresAfterMicroseconds
		set(safe)
		if err := s.Validate(); err != nil {
			t.Errorf("%s = 2^53-1: %v", name, err)
		}
		for _, n := range []int64{1 << 53, 1<<53 + 1, 1<<53 + 2, 1 << 62} {
			set(n)
			if err := s.Validate(); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s = %d: Validate gives %v, want an error about %s", name, n, err, name)
			}
		}
		budget.Limit, approval.ExpiresAfterMicroseconds = limit, &expires
		for _, b := range budgets {
			b.WindowMicroseconds = &window
		}
	}

	// A file whose limit is an exact double beyond 2^53-1 (so canonical,
	// and resealed so the digest matches) is refused too.
	bad := mutant(t, valid(t), true, func(m map[string]any) {
		for _, r := range m["compiled_rules"].([]any) {
			if r := r.(map[string]any); r["kind"] == "budget" {
				r["limit"] = json.Number("9007199254740994")
				return
			}
		}
	})
	if _, err := snapshot.Parse(bad); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Parse of a limit of 2^53+2: %v, want an error about limit", err)
	}
}
