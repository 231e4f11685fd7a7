package decision_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/policygen"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// The differential test generates random policies over a small vocabulary
// (so that patterns and request values collide often), compiles them with
// the real compiler, and checks that the native evaluator and the Rego
// bundle in OPA return identical decisions — disposition, rule ids,
// reasons, gates and approver class — for random requests.

type gen struct{ policygen.Gen }

// vocab is the differential tests' vocabulary.
var vocab = policygen.Vocab{Segs: segs, Tokens: tokens, Labels: labels, Servers: servers, Tools: tools, Envs: envs,
	Principals: princ, Tenants: tenantsV, Actions: actions, AnyPrincipal: []string{"*", "agent:*", "*"},
	WriteMax: 2, InjectMax: 1, Absolute: 0.75, Fill: []string{"", "a", "x.go", "b"},
	GateRules: []string{"network.*", "action.deny:*", "subprocess.*", "filesystem.*", "approval*", "*", "mcp.*", "budget.*", "expiry", "environment.*", "secret.*"}}

func newGen(seed, stream uint64) gen { return gen{policygen.New(&vocab, seed, stream)} }

// nsPattern is a secret namespace pattern: a glob of a namespace, or one
// with a "**" segment.
func (g gen) nsPattern() string {
	if g.Chance(0.3) {
		return g.Pick(nsDeep[:3]...)
	}
	return g.Glob(g.Pick(ns...))
}

var (
	actions = []string{"bash", "read_file", "write_file", "edit_file", "http_get", "mcp", "search"}
	// U+FFFD written as such is text like any other: both engines must
	// agree on it (invalid UTF-8 is refused before either: corrupt).
	segs    = []string{"ws", "src", "a", "B", ".env", "x.go", "secret", "etc", "\ufffd", "é"}
	tokens  = []string{"git", "push", "status", "rm", "-rf", "Git", "go", "test", "./...", "\ufffd", "É"}
	labels  = []string{"a", "b", "x", "com", "A"}
	servers = []string{"gh", "fs"}
	tools   = []string{"create_issue", "delete_x", "read"}
	envs    = []string{"HOME", "GOFLAGS", "AWS_KEY", "aws_key"}
	ns      = []string{"ci/a", "ci/b", "prod/x", "CI/a"}
	// nsDeep are namespace patterns with "**" segments and values of
	// other depths, mixed into ns's.
	nsDeep   = []string{"ci/**", "**", "prod/**/x", "ci", "ci/a/b", "prod/x/y/x"}
	princ    = []string{"agent:a", "agent:b", "user:x", "Agent:a"}
	tenantsV = []string{"t1", "t2"}
	times    = []string{"2026-01-01T00:00:00.000000Z", "2026-06-01T00:00:00.000000Z", "2027-01-01T00:00:00.000000Z"}
)

func (g gen) path(abs bool) string {
	var parts []string
	for range 1 + g.R.IntN(3) {
		parts = append(parts, g.Pick(segs...))
	}
	if abs {
		if g.Chance(0.7) {
			return "/ws/" + strings.Join(parts, "/")
		}
		return "/" + strings.Join(parts, "/")
	}
	return strings.Join(parts, "/")
}

func (g gen) argv() []string {
	var out []string
	for range 1 + g.R.IntN(3) {
		out = append(out, g.Pick(tokens...))
	}
	return out
}

func (g gen) host() string {
	var ls []string
	for range 1 + g.R.IntN(3) {
		ls = append(ls, g.Pick(labels...))
	}
	return strings.Join(ls, ".") + ":" + g.Pick("443", "80")
}

func (g gen) qualified() string {
	a := g.Pick("bash", "read_file", "write_file", "http_get", "mcp")
	if g.Chance(0.3) {
		return g.Glob(g.Pick(actions...))
	}
	switch a {
	case "bash":
		return a + ":" + g.CmdPattern()
	case "http_get":
		return a + ":" + g.HostPattern()
	case "mcp":
		return a + ":" + g.MCPPattern()
	}
	return a + ":" + g.PathPattern()
}

// policy draws a policy of the differential tests, secrets included.
func (g gen) policy() map[string]any { return g.Policy(g.qualified, g.nsPattern) }

// fromPolicy draws a value for a declared list of the policy, or "".
func (g gen) fromPolicy(pol map[string]any, section, field string) string {
	sec, _ := pol[section].(map[string]any)
	list, _ := sec[field].([]string)
	if len(list) == 0 {
		return ""
	}
	return g.Instantiate(list[g.R.IntN(len(list))])
}

// requestFor draws a request shaped like a real one for a random action,
// with values taken from the policy's patterns half of the time.
func (g gen) requestFor(pol map[string]any) *normalize.Normalized {
	r := g.request()
	r.Paths, r.Commands, r.Hosts, r.MCP = []normalize.PathAccess{}, [][]string{}, []string{}, nil
	r.ShellControl = g.Chance(0.15)
	r.Time = g.Pick(times[1], times[1], times[0], times[2])
	if g.Chance(0.8) {
		r.Env, r.Secrets = []string{}, []string{}
	}
	if g.Chance(0.5) {
		r.Principal, r.Tenant = "agent:a", "t1"
	}
	switch r.Action {
	case "bash":
		argv := g.argv()
		if v := g.fromPolicy(pol, "subprocess", "allow"); v != "" && g.Chance(0.6) && !strings.Contains(v, "  ") {
			argv = strings.Fields(v)
			if len(argv) == 0 {
				argv = []string{"x"}
			}
		}
		r.Commands = append(r.Commands, argv)
		if g.Chance(0.3) {
			r.Commands = append(r.Commands, g.argv())
		}
	case "read_file", "write_file", "edit_file":
		path := g.path(true)
		if v := g.fromPolicy(pol, "filesystem", g.Pick("read", "write")); v != "" && g.Chance(0.6) {
			if !strings.HasPrefix(v, "/") {
				v = r.Workspace + "/" + v
			}
			path = strings.ReplaceAll(v, "//", "/")
		}
		access := map[string]string{"read_file": "read", "write_file": "write", "edit_file": g.Pick("read", "write")}[r.Action]
		r.Paths = append(r.Paths, normalize.PathAccess{Path: path, Access: access})
	case "http_get":
		h := g.host()
		if v := g.fromPolicy(pol, "network", "allow"); v != "" && g.Chance(0.6) {
			h = strings.ReplaceAll(v, "*.", "a.")
			if !strings.Contains(h, ":") {
				h += ":443"
			}
		}
		r.Hosts = append(r.Hosts, h)
	case "mcp":
		r.MCP = &normalize.MCPTarget{Server: g.Pick(servers...), Tool: g.Pick(tools...)}
		if g.Chance(0.3) {
			res := g.Pick("repo/a", "repo/a/b", "file:///x", "x")
			r.MCP.Resource = &res
		}
	}
	if g.Chance(0.1) {
		r.Hosts = append(r.Hosts, g.host())
	}
	return r
}

func (g gen) request() *normalize.Normalized {
	r := &normalize.Normalized{
		Principal: g.Pick(princ...), Tenant: g.Pick(tenantsV...), Action: g.Pick(actions...), Workspace: g.Pick("/ws", "/ws", "/"),
		Time: g.Pick(times...), Paths: []normalize.PathAccess{}, Commands: [][]string{}, Hosts: []string{},
		Env: []string{}, Secrets: []string{}, ShellControl: g.Chance(0.3),
		Usage: normalize.Usage{Calls: int64(g.R.IntN(4)), Tokens: int64(g.R.IntN(120))},
	}
	for range g.R.IntN(2) {
		r.Paths = append(r.Paths, normalize.PathAccess{Path: g.path(true), Access: g.Pick("read", "write", "execute")})
	}
	for range g.R.IntN(2) {
		r.Commands = append(r.Commands, g.argv())
	}
	for range g.R.IntN(2) {
		r.Hosts = append(r.Hosts, g.host())
	}
	if g.Chance(0.3) {
		r.Env = append(r.Env, g.Pick(envs...))
	}
	if g.Chance(0.3) {
		r.Secrets = append(r.Secrets, g.Pick(slices.Concat(ns, nsDeep[3:])...))
	}
	if g.Chance(0.4) {
		m := &normalize.MCPTarget{Server: g.Pick(servers...), Tool: g.Pick(tools...)}
		if g.Chance(0.5) {
			res := g.Pick("repo/a", "repo/a/b", "file:///x", "x")
			m.Resource = &res
		}
		r.MCP = m
	}
	return r
}

// differential compiles nPolicies random policies and checks nRequests
// random requests against each with both engines.
func differential(t *testing.T, seed uint64, nPolicies, nRequests int) {
	g := newGen(seed, seed^0x9e3779b97f4a7c15)
	decls, res := policygen.Compile(t, nPolicies, g.policy)
	ctx := context.Background()
	eng := compiletest.OPA(t, res.Snapshots)
	pairs, failures, noText, fffd := 0, 0, 0, 0
	counts, reasons, fffdCounts := map[string]int{}, map[string]int{}, map[string]int{}
	for i, s := range res.Snapshots {
		pol, err := decision.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			checkPatternTextRefused(t, g, decls[s.Name])
			checkSnapshotTextRefused(t, g, s)
		}
		for j := range nRequests {
			req := g.request()
			if j%4 != 0 {
				req = g.requestFor(decls[s.Name])
			}
			if j%5 == 4 {
				// Besides the pair: the same request made no text.
				checkTextRefused(t, g, eng, s.Name, req)
				noText++
			}
			nat, _ := pol.Evaluate(req)
			opa, err := eng.Evaluate(ctx, s.Name, req)
			if err != nil {
				t.Fatalf("opa: %v", err)
			}
			pairs++
			if holdsFFFD(req) {
				fffd++
				fffdCounts[nat.Disposition]++
			}
			counts[nat.Disposition]++
			for _, r := range nat.Reasons {
				reasons[strings.SplitN(r, ":", 2)[0]+":"+strings.SplitN(r+":", ":", 3)[1]]++
			}
			if diff := cmp.Diff(nat, opa, cmpopts.EquateEmpty()); diff != "" {
				failures++
				if failures <= 3 {
					snap, _ := s.Marshal()
					rb, _ := json.Marshal(req)
					t.Errorf("engines disagree (-native +opa):\n%s\npolicy: %s\nrequest: %s", diff, snap, rb)
				}
			}
		}
	}
	t.Logf("%d pairs, %d disagreements; %d requests made no text, all refused; %d pairs with U+FFFD (%v); dispositions %v; reasons %v", pairs, failures, noText, fffd, fffdCounts, counts, reasons)
	if failures > 0 {
		t.Fatalf("%d of %d pairs disagree", failures, pairs)
	}
	for _, d := range []string{decision.Allow, decision.Deny, decision.Escalate} {
		if counts[d] == 0 {
			t.Errorf("the generator produced no %s decision", d)
		}
	}
	if fffdCounts[decision.Allow] == 0 || fffdCounts[decision.Deny] == 0 {
		t.Errorf("the generator produced no allow or no deny of a request holding U+FFFD: %v", fffdCounts)
	}
}

// TestDifferential is the short run of the default suite.
func TestDifferential(t *testing.T) {
	differential(t, 1, 40, 40)
}

// TestDifferentialLong checks ≥ 100,000 pairs. It runs only when POLC_LONG
// is set: POLC_LONG=1 go test -run TestDifferentialLong ./decision
func TestDifferentialLong(t *testing.T) {
	if os.Getenv("POLC_LONG") == "" {
		t.Skip("set POLC_LONG=1 to run the 100,000-pair differential test")
	}
	for seed := uint64(100); seed < 105; seed++ {
		differential(t, seed, 200, 100)
	}
}

var _ = snapshot.Format
