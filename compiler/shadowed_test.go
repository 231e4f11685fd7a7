package compiler_test

import (
	"strings"
	"testing"
	"time"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// shadowedPolicy is a policy scoped to anyone, with extra sections.
func shadowedPolicy(extra map[string]any) map[string]any {
	p := map[string]any{"version": "1", "principals": []string{"*"}, "tenants": []string{"*"}}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// TestAllowShadowedGates: allow_shadowed says an allow one deny covers
// can go ("deny dominates"). It must not say so of an allow whose removal
// changes a decision, though every value it allows is denied: the only
// blocking grant of its facet (the facet's "not allowed" takes the
// strictest gate holding one of its grants: without it, path_read is
// advisory), an allow whose covering deny is at an advisory gate (it
// denies nothing), and the last subprocess grant allowing shell control
// (a command of shell control alone needs one). Each premise is checked
// on the engine: the request decided differently with and without the
// allow. An allow covered by a blocking deny that sets no gate is still
// reported.
func TestAllowShadowedGates(t *testing.T) {
	read := func(path string) normalize.ActionRequest {
		return normalize.ActionRequest{Action: "read_file", Arguments: map[string]any{"path": path}}
	}
	for _, c := range []struct {
		name          string
		with, without map[string]any
		allow         string // the allow's pattern as the warning quotes it
		req           normalize.ActionRequest
		warn          bool
	}{
		{
			name: "only hard grant of its facet",
			with: map[string]any{"actions": map[string]any{"allow": []string{"read_file"}},
				"filesystem": map[string]any{"read": []string{"/a/**", "/b/**"}, "deny": []string{"/a/**"}},
				"gates":      []any{map[string]any{"id": "adv", "level": "advisory", "rules": []string{"filesystem.read:/b/*"}}}},
			without: map[string]any{"actions": map[string]any{"allow": []string{"read_file"}},
				"filesystem": map[string]any{"read": []string{"/b/**"}, "deny": []string{"/a/**"}},
				"gates":      []any{map[string]any{"id": "adv", "level": "advisory", "rules": []string{"filesystem.read:/b/*"}}}},
			allow: `filesystem.read "/a/**"`, req: read("/etc/passwd"),
		},
		{
			name: "deny at an advisory gate",
			with: map[string]any{"actions": map[string]any{"allow": []string{"read_file"}},
				"filesystem": map[string]any{"read": []string{"/a/**"}, "deny": []string{"/a/**"}},
				"gates":      []any{map[string]any{"id": "adv", "level": "advisory", "rules": []string{"filesystem.deny:*"}}}},
			without: map[string]any{"actions": map[string]any{"allow": []string{"read_file"}},
				"filesystem": map[string]any{"read": []string{}, "deny": []string{"/a/**"}},
				"gates":      []any{map[string]any{"id": "adv", "level": "advisory", "rules": []string{"filesystem.deny:*"}}}},
			allow: `filesystem.read "/a/**"`, req: read("/a/x"),
		},
		{
			name: "last shell grant",
			with: map[string]any{"actions": map[string]any{"allow": []string{"bash"}},
				"subprocess": map[string]any{"mode": "allowlist", "shell": "allow", "allow": []string{"true"}, "deny": []string{"true"}}},
			without: map[string]any{"actions": map[string]any{"allow": []string{"bash"}},
				"subprocess": map[string]any{"mode": "allowlist", "shell": "allow", "allow": []string{}, "deny": []string{"true"}}},
			allow: `subprocess.allow "true"`,
			req:   normalize.ActionRequest{Action: "bash", Arguments: map[string]any{"command": "> /dev/null"}},
		},
		{
			name: "covered, no gate of its own",
			with: map[string]any{"actions": map[string]any{"allow": []string{"read_file"}},
				"filesystem": map[string]any{"read": []string{"/a/**", "/b/**"}, "deny": []string{"/a/**"}}},
			without: map[string]any{"actions": map[string]any{"allow": []string{"read_file"}},
				"filesystem": map[string]any{"read": []string{"/b/**"}, "deny": []string{"/a/**"}}},
			allow: `filesystem.read "/a/**"`, req: read("/etc/passwd"), warn: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := compiletest.Decls(t, map[string]any{"with": shadowedPolicy(c.with), "without": shadowedPolicy(c.without)})
			if res.Diagnostics.HasErrors() {
				t.Fatal(res.Diagnostics)
			}
			decide := func(name string) string {
				for _, s := range res.Snapshots {
					if s.Name == name {
						return decideOne(t, s, c.req)
					}
				}
				t.Fatalf("no snapshot %s", name)
				return ""
			}
			dw, dwo := decide("with"), decide("without")
			if changes := dw != dwo; changes == c.warn {
				t.Fatalf("premise: removing %s changes the decision: %v (%s, %s)", c.allow, changes, dw, dwo)
			}
			warned := false
			for _, d := range res.Diagnostics {
				if d.Code == diag.CodeAllowShadowed && strings.Contains(d.Message, `policy "with": `+c.allow) {
					warned = true
				}
			}
			if warned != c.warn {
				t.Errorf("allow_shadowed for %s: %v, want %v (%v)", c.allow, warned, c.warn, res.Diagnostics)
			}
		})
	}
}

func decideOne(t *testing.T, s *snapshot.Snapshot, req normalize.ActionRequest) string {
	t.Helper()
	req.Principal, req.Tenant, req.Workspace = "agent:x", "acme", "/ws"
	n, nerr := (&normalize.Normalizer{Now: func() time.Time { return time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC) }}).Normalize(req)
	if nerr != nil {
		t.Fatal(nerr)
	}
	p, err := decision.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return p.Decide(n).Disposition
}
