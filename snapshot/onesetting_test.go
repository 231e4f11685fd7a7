package snapshot_test

import (
	"encoding/json"
	"strings"
	"testing"

	"polc.dev/polc/snapshot"
)

// TestParseOnePolicySetting: the shell setting of subprocess allow rules
// and the window of budget rules are settings of the whole policy, copied
// into each rule. Parse accepted a snapshot (valid digest) whose rules
// disagree, and the compiler, raising it as a parent, kept one rule's
// setting for all (TestParentSnapshotMixedShellRefused,
// TestParentSnapshotMixedWindowsRefused in the compiler). Parse refuses it
// now, at the rule that disagrees; every rule changed alike still parses.
func TestParseOnePolicySetting(t *testing.T) {
	for _, c := range []struct {
		name, kind, member, want string
		value                    any
		only                     string // the rule changed; "" for all of the kind
	}{
		{"one shell allow", "subprocess", "shell", "shell", "allow", "subprocess.allow:go test *"},
		{"one window null", "budget", "window_microseconds", "window", nil, "budget.tokens"},
		{"one window shorter", "budget", "window_microseconds", "window", json.Number("3600000000"), "budget.wall_microseconds"},
		{"every shell allow", "subprocess", "shell", "", "allow", ""},
		{"every window null", "budget", "window_microseconds", "", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := mutant(t, valid(t), true, func(m map[string]any) {
				for _, r := range m["compiled_rules"].([]any) {
					r := r.(map[string]any)
					if r["kind"] == c.kind && r["effect"] != "deny" && (c.only == "" || r["rule_id"] == c.only) {
						r[c.member] = c.value
					}
				}
			})
			_, err := snapshot.Parse(data)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("every rule alike: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.only)):
				t.Errorf("Parse: %v, want an error about the %s naming %s", err, c.want, c.only)
			}
		})
	}
}
