package prove_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	. "polc.dev/polc/internal/prove"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

var scriptNow = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)

// opaCLI decides with the real opa binary (POLC_OPA, built by
// scripts/opa.sh), one `opa eval` per request: a prover given it confirms
// every counterexample on the OPA that deployments run.
type opaCLI struct {
	bin, bundle, dir string
	n                int
}

func (o *opaCLI) Evaluate(_ context.Context, policy string, req *normalize.Normalized) (decision.Decision, error) {
	o.n++
	in, err := json.Marshal(map[string]any{"policy": policy, "request": req})
	if err != nil {
		return decision.Decision{}, err
	}
	inPath := filepath.Join(o.dir, fmt.Sprintf("in%d.json", o.n))
	if err := os.WriteFile(inPath, in, 0o644); err != nil {
		return decision.Decision{}, err
	}
	out, err := exec.Command(o.bin, "eval", "-b", o.bundle, "-i", inPath, "--format", "json", "data.polc.decision").Output()
	if err != nil {
		return decision.Decision{}, fmt.Errorf("opa eval: %v", err)
	}
	var rs struct {
		Result []struct {
			Expressions []struct{ Value json.RawMessage } `json:"expressions"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out, &rs); err != nil || len(rs.Result) != 1 || len(rs.Result[0].Expressions) != 1 {
		return decision.Decision{}, fmt.Errorf("opa eval output %s: %v", out, err)
	}
	var d decision.Decision
	return d, json.Unmarshal(rs.Result[0].Expressions[0].Value, &d)
}

// prover prepares the snapshots, with the real opa CLI as the second
// engine when POLC_OPA names it (.ci/run sets it), else OPA in process.
func prover(t *testing.T, snaps []*snapshot.Snapshot) *Prover {
	t.Helper()
	bb, err := compiler.WriteBundle(snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	var eng Engine
	if bin := os.Getenv("POLC_OPA"); bin != "" {
		dir := t.TempDir()
		path := filepath.Join(dir, "bundle.tar.gz")
		if err := os.WriteFile(path, bb, 0o644); err != nil {
			t.Fatal(err)
		}
		eng = &opaCLI{bin: bin, bundle: path, dir: dir}
	} else {
		if eng, err = regoeval.New(context.Background(), bb); err != nil {
			t.Fatal(err)
		}
	}
	pr := &Prover{Policies: map[string]*Policy{}, OPA: eng, Now: scriptNow}
	for _, s := range snaps {
		p, err := NewPolicy(s)
		if err != nil {
			t.Fatal(err)
		}
		pr.Policies[s.Name] = p
	}
	return pr
}

func compileDecls(t *testing.T, policies map[string]any) []*snapshot.Snapshot {
	t.Helper()
	res := compiletest.Decls(t, policies)
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	return res.Snapshots
}

func pat(t *testing.T, s string) RequestPattern {
	t.Helper()
	rp, err := ParseRequestPattern(s)
	if err != nil {
		t.Fatal(err)
	}
	return rp
}

func check(t *testing.T, pr *Prover, prop Property) Result {
	t.Helper()
	r, err := pr.Check(context.Background(), prop)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExamples decides the properties declared next to the shipped
// examples: the questions of the issue (can a payments agent write under
// its secrets, does every git push need approval, did the reviewer's
// version let anything new through) and the gap in the org baseline.
func TestExamples(t *testing.T) {
	res := compiler.Vet(compiler.Config{Dir: "../..", Now: func() time.Time { return scriptNow }}, []string{"examples"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	pr := prover(t, res.Snapshots)
	want := []string{Holds, Holds, Holds, Holds, Holds, Holds, Fails, Fails}
	if len(res.Properties) != len(want) {
		t.Fatalf("%d properties declared, want %d", len(res.Properties), len(want))
	}
	for i, pd := range res.Properties {
		r := check(t, pr, pd.Property)
		if r.Status != want[i] {
			t.Errorf("%s: %s %s, want %s", pd.Property, r.Status, r.Reason, want[i])
		}
		if r.Counterexample != nil {
			b, _ := json.Marshal(r.Counterexample.Request)
			t.Logf("%s: %s", pd.Property, b)
		}
	}
	// The reviewer's widening is its approved expansion; the baseline's
	// gap is edit_file, which its write_file deny does not name.
	r := check(t, pr, res.Properties[6].Property)
	if got := r.Counterexample.Request.Arguments["url"]; got != "http://ci-status.acme.internal:443/" {
		t.Errorf("reviewer counterexample reaches %v", got)
	}
	r = check(t, pr, res.Properties[7].Property)
	if r.Counterexample.Request.Action != "edit_file" {
		t.Errorf("org .env counterexample is %s", r.Counterexample.Request.Action)
	}
}

func base(extra map[string]any) map[string]any {
	p := map[string]any{"version": "1", "principals": []string{"agent:*"}, "tenants": []string{"acme"}}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// TestRegisteredAction: an action no built-in names is one a runtime may
// register, with or without hints; a policy that allows every action id
// allows it.
func TestRegisteredAction(t *testing.T) {
	pr := prover(t, compileDecls(t, map[string]any{"p": base(map[string]any{"actions": map[string]any{"allow": []string{"*"}}})}))
	r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "deploy*")})
	if r.Status != Fails || r.Counterexample.Registered == nil || !strings.HasPrefix(r.Counterexample.Request.Action, "deploy") {
		t.Fatalf("got %+v", r)
	}
	// Under an allow list of built-ins, none is allowed.
	pr = prover(t, compileDecls(t, map[string]any{"p": base(map[string]any{"actions": map[string]any{"allow": []string{"bash", "read_file"}}})}))
	if r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "deploy*")}); r.Status != Holds {
		t.Fatalf("got %+v", r)
	}
}

// TestDenyCaseInsensitive: deny patterns match case-insensitively, so a
// write under SECRET is denied by a deny of secret; the property's own
// pattern is case-sensitive.
func TestDenyCaseInsensitive(t *testing.T) {
	pr := prover(t, compileDecls(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file"}, "deny": []string{"write_file:/ws/secret/**"}},
		"filesystem": map[string]any{"write": []string{"/ws/**"}},
	})}))
	if r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:/ws/SECRET/**")}); r.Status != Holds {
		t.Fatalf("got %+v", r)
	}
	r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:/ws/**")})
	if r.Status != Fails {
		t.Fatalf("got %+v", r)
	}
}

// TestAssignmentBeforeCommand: "X=1 cmd" presents the environment name
// without shell control, so a policy that forbids shell still lets a
// granted command set an injectable name.
func TestAssignmentBeforeCommand(t *testing.T) {
	pr := prover(t, compileDecls(t, map[string]any{"p": base(map[string]any{
		"actions":     map[string]any{"allow": []string{"bash"}},
		"subprocess":  map[string]any{"mode": "allowlist", "allow": []string{"ls *"}, "shell": "forbid"},
		"environment": map[string]any{"inject": []string{"AWS_*"}},
	})}))
	r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "env:AWS_*")})
	if r.Status != Fails {
		t.Fatalf("got %+v", r)
	}
	if cmd := r.Counterexample.Request.Arguments["command"].(string); !strings.Contains(cmd, "=x ls") {
		t.Errorf("counterexample command %q", cmd)
	}
}

// TestWorkspaceRelative: relative rules judge paths under the workspace,
// whatever it is; absolute paths outside it are judged by absolute rules
// alone.
func TestWorkspaceRelative(t *testing.T) {
	pr := prover(t, compileDecls(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file"}},
		"filesystem": map[string]any{"write": []string{"**", "/tmp/**"}, "deny": []string{"secrets/**"}},
	})}))
	if r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:secrets/**")}); r.Status != Holds {
		t.Fatalf("got %+v", r)
	}
	r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:/etc/**")})
	if r.Status != Fails || r.Counterexample.Request.Workspace == "" {
		t.Fatalf("got %+v", r)
	}
	// /etc/x is written as a path under a workspace /etc (a relative "**"
	// grants it there): the workspace is the request's.
	if !strings.HasPrefix(r.Counterexample.Request.Arguments["path"].(string), "/etc") {
		t.Errorf("counterexample %+v", r.Counterexample.Request)
	}
}

// TestTimeAndBudget: a policy that expires earlier, or has a smaller
// budget, denies what the other allows at the instant after its end, or
// once its budget is spent.
func TestTimeAndBudget(t *testing.T) {
	pr := prover(t, compileDecls(t, map[string]any{
		"long":  base(map[string]any{"actions": map[string]any{"allow": []string{"bash"}}, "subprocess": map[string]any{"mode": "allow"}, "budgets": map[string]any{"calls": 20}}),
		"short": base(map[string]any{"actions": map[string]any{"allow": []string{"bash"}}, "subprocess": map[string]any{"mode": "allow"}, "budgets": map[string]any{"calls": 10}, "expires_at": "2026-06-01T00:00:00Z"}),
	}))
	r := check(t, pr, Property{Policy: "long", Kind: NeverAllowsBeyond, Other: "short"})
	if r.Status != Fails {
		t.Fatalf("got %+v", r)
	}
	req := r.Counterexample.Request
	if *req.Time != "2026-06-01T00:00:00.000000Z" && (req.Usage == nil || req.Usage.Calls != 10) {
		t.Errorf("counterexample neither after expiry nor with the budget spent: %+v", req)
	}
	if r := check(t, pr, Property{Policy: "short", Kind: NeverAllowsBeyond, Other: "long"}); r.Status != Holds {
		t.Fatalf("got %+v", r)
	}
}

// TestApprovalAtGates: an approval escalates at a soft gate, denies at a
// hard one and does nothing at an advisory one.
func TestApprovalAtGates(t *testing.T) {
	mk := func(level string) map[string]any {
		p := base(map[string]any{
			"actions":    map[string]any{"allow": []string{"bash"}, "approve": []any{map[string]any{"pattern": "bash:git push *", "approver": "lead", "expires_after": "1h"}}},
			"subprocess": map[string]any{"mode": "allowlist", "allow": []string{"git *"}},
		})
		if level != "" {
			p["gates"] = []any{map[string]any{"id": "g", "level": level, "rules": []string{"approval*"}}}
		}
		return p
	}
	pr := prover(t, compileDecls(t, map[string]any{"soft": mk(""), "hard": mk("hard"), "advisory": mk("advisory")}))
	push := pat(t, "bash:git push *")
	for _, c := range []struct{ policy, kind, want string }{
		{"soft", AlwaysEscalates, Holds}, {"soft", Never, Fails},
		{"hard", Never, Holds},
		{"advisory", AlwaysEscalates, Fails},
	} {
		if r := check(t, pr, Property{Policy: c.policy, Kind: c.kind, Pattern: push}); r.Status != c.want {
			t.Errorf("%s %s: %s, want %s", c.policy, c.kind, r.Status, c.want)
		}
	}
}

// TestParseRequestPattern: the string forms and their refusals.
func TestParseRequestPattern(t *testing.T) {
	for s, want := range map[string]RequestPattern{
		"bash:git push *":  {Action: "bash:git push *"},
		"write:secrets/**": {Write: "secrets/**"},
		"host:*.x.com:443": {Host: "*.x.com:443"},
		"deploy*":          {Action: "deploy*"},
	} {
		got, err := ParseRequestPattern(s)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"write:/a/../b", "search:x", "host:HTTPS://x", "bash:"} {
		if _, err := ParseRequestPattern(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	rp := RequestPattern{Write: "a/**", Host: "x"}
	if err := rp.Validate(); err == nil {
		t.Error("two targets accepted")
	}
}
