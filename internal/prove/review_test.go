package prove_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
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

// TestShellControlOnlyBash: a bash command that runs no program and
// opens no file ("> /dev/null", "2>&1") has shell control and no other
// facet. Under a policy with any shell-allowing subprocess grant, it is
// allowed (even under actions.deny "bash:*", which reads argvs), so
// `never: bash` and `always_escalates: bash` fail: the prover models such
// requests as a shape of their own (shell control and no value), which
// it once lacked and answered both as holding.
func TestShellControlOnlyBash(t *testing.T) {
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

// TestShellControlOnlyBeyondAndVet: shell control alone in the
// two-policy question and in vet. With the shell-allowing grant, "> /dev/null" is
// allowed; without it, denied (not_allowed:shell). So the grant decides a
// request (vet must not call it never effective, though every argv it
// allows is denied), and the policy with it allows beyond the one
// without it.
func TestShellControlOnlyBeyondAndVet(t *testing.T) {
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

// TestLintRedundantGrantSetsFacetGate: a facet's "not allowed" belongs
// to the strictest gate holding one of its grants. A grant covered by an
// advisory one is the only hard one of its facet: removing it moves
// path_read to the advisory gate, and a read of /etc/passwd goes from
// deny to allow, so vet must not call it redundant (it once did).
func TestLintRedundantGrantSetsFacetGate(t *testing.T) {
	pol := func(reads ...string) map[string]any {
		return base(map[string]any{
			"actions":    map[string]any{"allow": []string{"read_file"}},
			"filesystem": map[string]any{"read": reads},
			"gates":      []any{map[string]any{"id": "adv", "level": "advisory", "rules": []string{"filesystem.read:/a/??"}}},
		})
	}
	snaps := compileDecls(t, map[string]any{"with": pol("/a/**", "/a/b/**"), "without": pol("/a/**")})
	lintSparesGateGrant(t, snaps, "filesystem.read:/a/b/**", CodeRedundant)
}

// TestLintRedundantMutual: two denies of different spelling and one
// meaning (a clean path has no empty segment, so "/x/*" and "/x/?*" match
// the same paths). vet once reported each redundant, each naming the
// other: an author who followed both warnings removed the deny. At most
// one of them may be reported, as of two rules of one pattern.
func TestLintRedundantMutual(t *testing.T) {
	pol := func(denies ...string) map[string]any {
		return base(map[string]any{
			"actions":    map[string]any{"allow": []string{"write_file"}},
			"filesystem": map[string]any{"write": []string{"/**"}, "deny": denies},
		})
	}
	snaps := compileDecls(t, map[string]any{"p": pol("/x/*", "/x/?*"), "none": pol("/y")})
	req := normalize.ActionRequest{Action: "write_file", Principal: "agent:x", Tenant: "acme", Workspace: "/ws",
		Arguments: map[string]any{"path": "/x/a"}}
	if a, b := decideNative(t, snapNamed(t, snaps, "p"), nil, req), decideNative(t, snapNamed(t, snaps, "none"), nil, req); a == b {
		t.Fatalf("premise: both decide %s", a)
	}
	pr := prover(t, snaps)
	fs, err := pr.Lint(pr.Policies["p"], nil)
	if err != nil {
		t.Fatal(err)
	}
	var red []string
	for _, f := range fs {
		if f.Code == CodeRedundant {
			red = append(red, f.Message)
		}
	}
	if len(red) > 1 {
		t.Errorf("every deny reported redundant, removing them all widens write_file /x/a: %q", red)
	}
}

// TestLintRedundantNamesCovers: the message says "every value it matches
// is matched by A, B, C": the rules named must cover. It once named the
// first rules that overlap, which need not: /x/a is matched by none of
// /x/!*, /x/#* and /x/%*, only by /x/**.
func TestLintRedundantNamesCovers(t *testing.T) {
	snaps := compileDecls(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file"}},
		"filesystem": map[string]any{"write": []string{"/**"}, "deny": []string{"/x/*", "/x/!*", "/x/#*", "/x/%*", "/x/**"}},
	})})
	pr := prover(t, snaps)
	fs, err := pr.Lint(pr.Policies["p"], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.RuleID == "filesystem.deny:/x/*" && f.Code == CodeRedundant && !strings.Contains(f.Message, "filesystem.deny:/x/**") {
			t.Errorf("message names rules whose union does not cover /x/a: %s", f.Message)
		}
	}
}

// TestLintNeverEffectiveGrantSetsFacetGate: the same root as
// TestLintRedundantGrantSetsFacetGate for rule_never_effective: a grant
// two denies cover together can allow nothing, yet it is the only hard
// grant of path_read, and removing it makes path_read advisory:
// read_file /etc/passwd goes from deny to allow, so vet must not report
// it.
func TestLintNeverEffectiveGrantSetsFacetGate(t *testing.T) {
	pol := func(reads ...string) map[string]any {
		return base(map[string]any{
			"actions":    map[string]any{"allow": []string{"read_file"}},
			"filesystem": map[string]any{"read": reads, "deny": []string{"/a", "/a/*/**"}},
			"gates":      []any{map[string]any{"id": "adv", "level": "advisory", "rules": []string{"filesystem.read:/b/*"}}},
		})
	}
	snaps := compileDecls(t, map[string]any{"with": pol("/a/**", "/b/**"), "without": pol("/b/**")})
	lintSparesGateGrant(t, snaps, "filesystem.read:/a/**", CodeNeverEffective)
}

// lintSparesGateGrant checks the premise that policy "with" and "without"
// (it without the grant id) decide read_file /etc/passwd differently, on
// the engine, then that vet does not report the grant with code.
func lintSparesGateGrant(t *testing.T, snaps []*snapshot.Snapshot, id, code string) {
	t.Helper()
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
		if f.RuleID == id && f.Code == code {
			t.Errorf("vet: %s — but removing it turns read_file /etc/passwd from %s into %s", f.Message, dw, dwo)
		}
	}
}

// blowupDenies are 25 filesystem denies of the form "/**/*x*y*/**"
// (random short words): each is a small automaton, but deciding whether
// one is covered by the union of the others explores their product.
var blowupDenies = []string{"/**/*a*ie*/**", "/**/*a*ok*/**", "/**/*b*bb*/**", "/**/*c*l*/**", "/**/*d*a*/**", "/**/*d*b*/**",
	"/**/*dj*pa*/**", "/**/*e*a*/**", "/**/*em*ke*/**", "/**/*f*amb*/**", "/**/*f*fe*/**", "/**/*fnm*loi*/**", "/**/*gpl*cka*/**",
	"/**/*hc*kda*/**", "/**/*hd*eih*/**", "/**/*ii*nae*/**", "/**/*ip*loo*/**", "/**/*ipj*nj*/**", "/**/*j*gb*/**", "/**/*lf*a*/**",
	"/**/*lfo*ll*/**", "/**/*nf*fhh*/**", "/**/*ob*me*/**", "/**/*of*oh*/**", "/**/*op*hkf*/**"}

// TestLintBoundedOnAdversarialDenies: vet's findings for a policy of 25
// such denies took about 20 s before the antichain search and the work
// budget (50 denies: over 30 s and 0.8 GB; 200: over 4 minutes and 10 GB
// before being killed); docs/prove.md promises a bounded search that
// answers "undecided" rather than running away. The lint runs in a child
// process so that a run past the limit is killed, not leaked, and checks
// its peak memory there.
func TestLintBoundedOnAdversarialDenies(t *testing.T) {
	snaps := compileDecls(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file"}},
		"filesystem": map[string]any{"write": []string{"/**"}, "deny": blowupDenies},
	})})
	if os.Getenv("POLC_ATTACK_LINT_CHILD") == "1" {
		pr := prover(t, snaps)
		if _, err := pr.Lint(pr.Policies["p"], nil); err != nil {
			t.Fatal(err)
		}
		if rss := peakRSS(t); rss > maxRSS {
			t.Fatalf("peak RSS %d MB, over %d MB", rss>>20, maxRSS>>20)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLintBoundedOnAdversarialDenies$", "-test.count=1")
	cmd.Env = append(os.Environ(), "POLC_ATTACK_LINT_CHILD=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("Lint of %d denies still running after %v (killed)", len(blowupDenies), time.Since(start).Round(time.Second))
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
