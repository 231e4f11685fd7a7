package prove_test

import (
	"testing"
	"time"

	"polc.dev/polc/decision"
	. "polc.dev/polc/internal/prove"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// decideNative normalizes an action request (built-in catalog, or cat)
// and decides it with the native engine: the ground truth a property
// speaks of.
func decideNative(t *testing.T, s *snapshot.Snapshot, cat *normalize.Catalog, req normalize.ActionRequest) string {
	t.Helper()
	if cat == nil {
		cat = normalize.BuiltinCatalog()
	}
	if req.Time == nil {
		ts := "2026-03-15T12:00:00.000000Z"
		req.Time = &ts
	}
	n, nerr := (&normalize.Normalizer{Catalog: cat, Now: func() time.Time { return scriptNow }}).Normalize(req)
	if nerr != nil {
		t.Fatalf("normalize %v: %v", req.Arguments, nerr)
	}
	p, err := decision.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return p.Decide(n).Disposition
}

func snapNamed(t *testing.T, snaps []*snapshot.Snapshot, name string) *snapshot.Snapshot {
	t.Helper()
	for _, s := range snaps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no snapshot %s", name)
	return nil
}

func bashReq(cmd string) normalize.ActionRequest {
	return normalize.ActionRequest{Action: "bash", Principal: "agent:x", Tenant: "acme", Workspace: "/ws",
		Arguments: map[string]any{"command": cmd}}
}

// TestAttackProveShellOnlyBash: a bash command that runs no program and
// opens no file ("> /dev/null", "2>&1") has shell control and no other
// facet. Under a policy with any shell-allowing subprocess grant, it is
// allowed (even under actions.deny "bash:*", which reads argvs), yet no
// shape of prove models it: `never: bash` is reported as holding.
func TestAttackProveShellOnlyBash(t *testing.T) {
	snaps := compileDecls(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"bash"}, "deny": []string{"bash:*"}},
		"subprocess": map[string]any{"mode": "allowlist", "allow": []string{"true"}, "shell": "allow"},
	})})
	s := snapNamed(t, snaps, "p")
	for _, cmd := range []string{"> /dev/null", "2>&1"} {
		if d := decideNative(t, s, nil, bashReq(cmd)); d != decision.Allow {
			t.Fatalf("premise: %q decided %s, want allow", cmd, d)
		}
	}
	pr := prover(t, snaps)
	if r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "bash")}); r.Status == Holds {
		t.Errorf("never bash: holds, but bash %q is allowed", "> /dev/null")
	}
	if r := check(t, pr, Property{Policy: "p", Kind: AlwaysEscalates, Pattern: pat(t, "bash")}); r.Status == Holds {
		t.Errorf("always_escalates bash: holds, but bash %q is allowed", "> /dev/null")
	}
}

// TestAttackProveShellOnlyBeyondAndVet: the same gap in the two-policy
// question and in vet. With the shell-allowing grant, "> /dev/null" is
// allowed; without it, denied (not_allowed:shell). So the grant decides a
// request (vet must not call it never effective), and the policy with it
// allows beyond the one without it.
func TestAttackProveShellOnlyBeyondAndVet(t *testing.T) {
	with := base(map[string]any{
		"actions":    map[string]any{"allow": []string{"bash"}, "deny": []string{"bash:*"}},
		"subprocess": map[string]any{"mode": "allowlist", "allow": []string{"true"}, "shell": "allow"},
	})
	without := base(map[string]any{
		"actions":    map[string]any{"allow": []string{"bash"}, "deny": []string{"bash:*"}},
		"subprocess": map[string]any{"mode": "allowlist", "allow": []string{}, "shell": "allow"},
	})
	snaps := compileDecls(t, map[string]any{"with": with, "without": without})
	if d := decideNative(t, snapNamed(t, snaps, "with"), nil, bashReq("> /dev/null")); d != decision.Allow {
		t.Fatalf("premise: with decided %s", d)
	}
	if d := decideNative(t, snapNamed(t, snaps, "without"), nil, bashReq("> /dev/null")); d != decision.Deny {
		t.Fatalf("premise: without decided %s", d)
	}
	pr := prover(t, snaps)
	if r := check(t, pr, Property{Policy: "with", Kind: NeverAllowsBeyond, Other: "without"}); r.Status == Holds {
		t.Errorf("with never_allows_beyond without: holds, but %q is allowed by with and denied by without", "> /dev/null")
	}
	fs, err := pr.Lint(pr.Policies["with"], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.RuleID == "subprocess.allow:true" {
			t.Errorf("vet: %s %s: %s — but removing it changes the decision of bash %q", f.Code, f.RuleID, f.Message, "> /dev/null")
		}
	}
}

// TestAttackProveRedundantGrantSetsFacetGate: a facet's "not allowed"
// belongs to the strictest gate holding one of its grants. A grant covered
// by an advisory one is the only hard one of its facet: vet calls it
// redundant, yet removing it moves path_read to the advisory gate, and a
// read of /etc/passwd goes from deny to allow.
func TestAttackProveRedundantGrantSetsFacetGate(t *testing.T) {
	pol := func(reads ...string) map[string]any {
		return base(map[string]any{
			"actions":    map[string]any{"allow": []string{"read_file"}},
			"filesystem": map[string]any{"read": reads},
			"gates":      []any{map[string]any{"id": "adv", "level": "advisory", "rules": []string{"filesystem.read:/a/??"}}},
		})
	}
	snaps := compileDecls(t, map[string]any{"with": pol("/a/**", "/a/b/**"), "without": pol("/a/**")})
	req := normalize.ActionRequest{Action: "read_file", Principal: "agent:x", Tenant: "acme", Workspace: "/ws",
		Arguments: map[string]any{"path": "/etc/passwd"}}
	dw := decideNative(t, snapNamed(t, snaps, "with"), nil, req)
	dwo := decideNative(t, snapNamed(t, snaps, "without"), nil, req)
	if dw == dwo {
		t.Fatalf("premise: removing the grant changes nothing (%s)", dw)
	}
	pr := prover(t, snaps)
	fs, err := pr.Lint(pr.Policies["with"], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.RuleID == "filesystem.read:/a/b/**" && f.Code == CodeRedundant {
			t.Errorf("vet: %s — but removing it turns read_file /etc/passwd from %s into %s", f.Message, dw, dwo)
		}
	}
}
