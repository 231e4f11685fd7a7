package decision_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// The differential test generates random policies over a small vocabulary
// (so that patterns and request values collide often), compiles them with
// the real compiler, and checks that the native evaluator and the Rego
// bundle in OPA return identical decisions — disposition, rule ids,
// reasons, gates and approver class — for random requests.

type gen struct{ r *rand.Rand }

func (g gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g gen) chance(p float64) bool    { return g.r.Float64() < p }

// nsPattern is a secret namespace pattern: a glob of a namespace, or one
// with a "**" segment.
func (g gen) nsPattern() string {
	if g.chance(0.3) {
		return g.pick(nsDeep[:3]...)
	}
	return g.glob(g.pick(ns...))
}

// glob turns a literal into a pattern by sometimes replacing part of it.
// It cuts between characters, never inside one: '?' is one character,
// and a pattern holding part of one is no text (refused).
func (g gen) glob(lit string) string {
	r := []rune(lit)
	switch g.r.IntN(6) {
	case 0:
		return "*"
	case 1:
		if len(r) > 1 {
			return string(r[:1+g.r.IntN(len(r)-1)]) + "*"
		}
	case 2:
		if len(r) > 1 {
			i := g.r.IntN(len(r))
			return string(r[:i]) + "?" + string(r[i+1:])
		}
	case 3:
		return "*" + string(r[len(r)/2:])
	}
	return lit
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
	for range 1 + g.r.IntN(3) {
		parts = append(parts, g.pick(segs...))
	}
	if abs {
		if g.chance(0.7) {
			return "/ws/" + strings.Join(parts, "/")
		}
		return "/" + strings.Join(parts, "/")
	}
	return strings.Join(parts, "/")
}

func (g gen) pathPattern() string {
	var parts []string
	for range 1 + g.r.IntN(3) {
		switch g.r.IntN(5) {
		case 0:
			parts = append(parts, "**")
		case 1:
			parts = append(parts, g.glob(g.pick(segs...)))
		default:
			parts = append(parts, g.pick(segs...))
		}
	}
	p := strings.Join(parts, "/")
	if g.chance(0.75) {
		if g.chance(0.6) {
			return "/ws/" + p
		}
		return "/" + p
	}
	return p
}

func (g gen) argv() []string {
	var out []string
	for range 1 + g.r.IntN(3) {
		out = append(out, g.pick(tokens...))
	}
	return out
}

func (g gen) cmdPattern() string {
	var out []string
	for range 1 + g.r.IntN(3) {
		t := g.pick(tokens...)
		if g.chance(0.2) {
			t = g.glob(t)
		}
		out = append(out, t)
	}
	if g.chance(0.5) {
		out = append(out, "*")
	}
	return strings.Join(out, " ")
}

func (g gen) host() string {
	var ls []string
	for range 1 + g.r.IntN(3) {
		ls = append(ls, g.pick(labels...))
	}
	return strings.Join(ls, ".") + ":" + g.pick("443", "80")
}

func (g gen) hostPattern() string {
	if g.chance(0.05) {
		return "*"
	}
	var ls []string
	for range 1 + g.r.IntN(2) {
		ls = append(ls, strings.ToLower(g.pick(labels...)))
	}
	p := strings.Join(ls, ".")
	if g.chance(0.4) {
		p = "*." + p
	}
	if g.chance(0.5) {
		p += ":" + g.pick("443", "80")
	}
	return p
}

// qualifiedKind is the list kind of action deny patterns: an action
// pattern, or a qualified one (pattern.ValidateQualified).
const qualifiedKind pattern.Kind = "qualified"

// list draws n valid patterns.
func (g gen) list(max int, kind pattern.Kind, f func() string) []string {
	out := []string{}
	for range g.r.IntN(max + 1) {
		p := f()
		var err error
		if kind == qualifiedKind {
			_, _, _, err = pattern.ValidateQualified(p)
		} else {
			err = pattern.Validate(kind, p)
		}
		if err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (g gen) qualified() string {
	a := g.pick("bash", "read_file", "write_file", "http_get", "mcp")
	if g.chance(0.3) {
		return g.glob(g.pick(actions...))
	}
	switch a {
	case "bash":
		return a + ":" + g.cmdPattern()
	case "http_get":
		return a + ":" + g.hostPattern()
	case "mcp":
		return a + ":" + g.glob(g.pick(servers...)) + "/" + g.glob(g.pick(tools...))
	}
	return a + ":" + g.pathPattern()
}

func (g gen) policy() map[string]any {
	p := map[string]any{"version": "1"}
	p["principals"] = append(g.list(2, pattern.Principal, func() string { return g.glob(g.pick(princ...)) }), g.pick("*", "agent:*", "*"))
	p["tenants"] = append(g.list(1, pattern.Principal, func() string { return g.glob(g.pick(tenantsV...)) }), g.pick("*", "t1"))
	approvals := []any{}
	for range g.r.IntN(3) {
		q := strings.ToLower(g.qualified())
		if _, _, _, err := pattern.ValidateQualified(q); err != nil {
			continue
		}
		if g.chance(0.2) {
			approvals = append(approvals, map[string]any{"pattern": q, "approver": nil})
		} else {
			approvals = append(approvals, map[string]any{"pattern": q, "approver": g.pick("lead", "ops"), "expires_after": "1h"})
		}
	}
	p["actions"] = map[string]any{
		"allow":   append(g.list(4, pattern.Action, func() string { return g.glob(g.pick(actions...)) }), g.pick(actions...), g.pick("*", "bash", "mcp")),
		"deny":    g.list(2, qualifiedKind, g.qualified),
		"approve": approvals,
	}
	p["filesystem"] = map[string]any{
		"read":    append(g.list(3, pattern.Path, g.pathPattern), g.pick("/ws/**", "/**", "**")),
		"write":   g.list(2, pattern.Path, g.pathPattern),
		"execute": g.list(1, pattern.Path, g.pathPattern),
		"deny":    g.list(2, pattern.Path, g.pathPattern),
	}
	p["network"] = map[string]any{"mode": g.pick("deny", "allowlist", "allowlist", "allow"),
		"allow": g.list(3, pattern.Host, g.hostPattern), "deny": g.list(1, pattern.Host, g.hostPattern)}
	p["subprocess"] = map[string]any{"mode": g.pick("deny", "allowlist", "allowlist", "allow"), "shell": g.pick("forbid", "allow"),
		"allow": g.list(3, pattern.Command, g.cmdPattern), "deny": g.list(2, pattern.Command, g.cmdPattern)}
	servs := []any{}
	for range g.r.IntN(3) {
		servs = append(servs, map[string]any{"server": g.glob(g.pick(servers...)),
			"tools":     g.list(2, pattern.Env, func() string { return g.glob(g.pick(tools...)) }),
			"resources": []string{g.pick("repo/*", "repo/**", "file:///**", "x")}})
	}
	p["mcp"] = map[string]any{"servers": servs, "deny": g.list(1, pattern.MCP, func() string { return g.glob(g.pick(servers...)) + "/" + g.glob(g.pick(tools...)) })}
	p["environment"] = map[string]any{"read": g.list(2, pattern.Env, func() string { return g.glob(g.pick(envs...)) }),
		"inject": g.list(1, pattern.Env, func() string { return g.glob(g.pick(envs...)) }),
		"deny":   g.list(1, pattern.Env, func() string { return g.glob(g.pick(envs...)) })}
	secrets := []any{}
	for range g.r.IntN(3) {
		secrets = append(secrets, map[string]any{"namespace": g.nsPattern(), "exposure": g.pick("forbid", "reference_only", "inject")})
	}
	p["secrets"] = secrets
	if g.chance(0.3) {
		p["budgets"] = map[string]any{"calls": 1 + g.r.IntN(4), "tokens": 100}
	}
	if g.chance(0.25) {
		p["not_before"] = "2026-03-01T00:00:00Z"
		p["expires_at"] = "2026-09-01T00:00:00Z"
	}
	if g.chance(0.4) {
		var gates []any
		for i := range 1 + g.r.IntN(2) {
			gates = append(gates, map[string]any{"id": fmt.Sprintf("g%d", i), "level": g.pick("hard", "soft", "advisory"),
				"rules": []string{g.pick("network.*", "action.deny:*", "subprocess.*", "filesystem.*", "approval*", "*", "mcp.*", "budget.*", "expiry", "environment.*", "secret.*")}})
		}
		p["gates"] = gates
	}
	return p
}

// instantiate returns a value the pattern matches (mostly), so that
// requests hit the policy's rules.
func (g gen) instantiate(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(strings.Repeat("a/", g.r.IntN(2)) + "x")
			i++
		case p[i] == '*':
			b.WriteString(g.pick("", "a", "x.go", "b"))
		case p[i] == '?':
			b.WriteString(g.pick("a", "B"))
		default:
			b.WriteByte(p[i])
		}
	}
	return b.String()
}

// fromPolicy draws a value for a declared list of the policy, or "".
func (g gen) fromPolicy(pol map[string]any, section, field string) string {
	sec, _ := pol[section].(map[string]any)
	list, _ := sec[field].([]string)
	if len(list) == 0 {
		return ""
	}
	return g.instantiate(list[g.r.IntN(len(list))])
}

// requestFor draws a request shaped like a real one for a random action,
// with values taken from the policy's patterns half of the time.
func (g gen) requestFor(pol map[string]any) *normalize.Normalized {
	r := g.request()
	r.Paths, r.Commands, r.Hosts, r.MCP = []normalize.PathAccess{}, [][]string{}, []string{}, nil
	r.ShellControl = g.chance(0.15)
	r.Time = g.pick(times[1], times[1], times[0], times[2])
	if g.chance(0.8) {
		r.Env, r.Secrets = []string{}, []string{}
	}
	if g.chance(0.5) {
		r.Principal, r.Tenant = "agent:a", "t1"
	}
	switch r.Action {
	case "bash":
		argv := g.argv()
		if v := g.fromPolicy(pol, "subprocess", "allow"); v != "" && g.chance(0.6) && !strings.Contains(v, "  ") {
			argv = strings.Fields(v)
			if len(argv) == 0 {
				argv = []string{"x"}
			}
		}
		r.Commands = append(r.Commands, argv)
		if g.chance(0.3) {
			r.Commands = append(r.Commands, g.argv())
		}
	case "read_file", "write_file", "edit_file":
		path := g.path(true)
		if v := g.fromPolicy(pol, "filesystem", g.pick("read", "write")); v != "" && g.chance(0.6) {
			if !strings.HasPrefix(v, "/") {
				v = r.Workspace + "/" + v
			}
			path = strings.ReplaceAll(v, "//", "/")
		}
		access := map[string]string{"read_file": "read", "write_file": "write", "edit_file": g.pick("read", "write")}[r.Action]
		r.Paths = append(r.Paths, normalize.PathAccess{Path: path, Access: access})
	case "http_get":
		h := g.host()
		if v := g.fromPolicy(pol, "network", "allow"); v != "" && g.chance(0.6) {
			h = strings.ReplaceAll(v, "*.", "a.")
			if !strings.Contains(h, ":") {
				h += ":443"
			}
		}
		r.Hosts = append(r.Hosts, h)
	case "mcp":
		r.MCP = &normalize.MCPTarget{Server: g.pick(servers...), Tool: g.pick(tools...)}
		if g.chance(0.3) {
			res := g.pick("repo/a", "repo/a/b", "file:///x", "x")
			r.MCP.Resource = &res
		}
	}
	if g.chance(0.1) {
		r.Hosts = append(r.Hosts, g.host())
	}
	return r
}

func (g gen) request() *normalize.Normalized {
	r := &normalize.Normalized{
		Principal: g.pick(princ...), Tenant: g.pick(tenantsV...), Action: g.pick(actions...), Workspace: g.pick("/ws", "/ws", "/"),
		Time: g.pick(times...), Paths: []normalize.PathAccess{}, Commands: [][]string{}, Hosts: []string{},
		Env: []string{}, Secrets: []string{}, ShellControl: g.chance(0.3),
		Usage: normalize.Usage{Calls: int64(g.r.IntN(4)), Tokens: int64(g.r.IntN(120))},
	}
	for range g.r.IntN(2) {
		r.Paths = append(r.Paths, normalize.PathAccess{Path: g.path(true), Access: g.pick("read", "write", "execute")})
	}
	for range g.r.IntN(2) {
		r.Commands = append(r.Commands, g.argv())
	}
	for range g.r.IntN(2) {
		r.Hosts = append(r.Hosts, g.host())
	}
	if g.chance(0.3) {
		r.Env = append(r.Env, g.pick(envs...))
	}
	if g.chance(0.3) {
		r.Secrets = append(r.Secrets, g.pick(slices.Concat(ns, nsDeep[3:])...))
	}
	if g.chance(0.4) {
		m := &normalize.MCPTarget{Server: g.pick(servers...), Tool: g.pick(tools...)}
		if g.chance(0.5) {
			res := g.pick("repo/a", "repo/a/b", "file:///x", "x")
			m.Resource = &res
		}
		r.MCP = m
	}
	return r
}

// compileRandom compiles n random policies drawn from g (named p0000…)
// and returns their declarations by name and the compiler's result.
func compileRandom(t *testing.T, g gen, n int) (map[string]map[string]any, *compiler.Result) {
	t.Helper()
	policies := map[string]any{}
	decls := map[string]map[string]any{}
	for i := range n {
		name := fmt.Sprintf("p%04d", i)
		decls[name] = g.policy()
		policies[name] = decls[name]
	}
	res := compiletest.Decls(t, policies)
	if res.Diagnostics.HasErrors() {
		t.Fatalf("generated policies do not compile: %v", res.Diagnostics[:min(5, len(res.Diagnostics))])
	}
	return decls, res
}

// differential compiles nPolicies random policies and checks nRequests
// random requests against each with both engines.
func differential(t *testing.T, seed uint64, nPolicies, nRequests int) {
	g := gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	decls, res := compileRandom(t, g, nPolicies)
	bb, err := compiler.WriteBundle(res.Snapshots, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eng, err := regoeval.New(ctx, bb)
	if err != nil {
		t.Fatal(err)
	}
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
