// Package policygen draws random patterns and policies for the tests that
// check one engine against another on random input (decision's
// differential tests, internal/prove's random properties): one generator,
// each test's own vocabulary, small so that patterns and request values
// collide often. Only tests import it.
package policygen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/pattern"
)

// Vocab is what a generator draws patterns from.
type Vocab struct {
	Segs    []string // path segments
	Tokens  []string // command words
	Labels  []string // host labels (lowercased in host patterns)
	Servers []string // MCP servers
	Tools   []string // MCP tools
	Envs    []string // environment variables
	// Principals, Tenants and Actions are the literals a policy's
	// principals, tenants and allowed actions are drawn from; every
	// policy's principals end with one of AnyPrincipal.
	Principals, Tenants, Actions, AnyPrincipal []string
	// WriteMax and InjectMax bound the filesystem.write and
	// environment.inject lists.
	WriteMax, InjectMax int
	// GateRules are the rule selectors a gate is drawn with.
	GateRules []string
	// Absolute is the chance that a path pattern is absolute.
	Absolute float64
	// Fill is what Instantiate writes for a '*'.
	Fill []string
}

// Gen draws from R over V: the same seed and stream draw the same values.
type Gen struct {
	R *rand.Rand
	V *Vocab
}

// New returns a generator over v seeded with (seed, stream).
func New(v *Vocab, seed, stream uint64) Gen {
	return Gen{R: rand.New(rand.NewPCG(seed, stream)), V: v}
}

// Pick draws one of xs.
func (g Gen) Pick(xs ...string) string { return xs[g.R.IntN(len(xs))] }

// Chance is true with probability p.
func (g Gen) Chance(p float64) bool { return g.R.Float64() < p }

// Glob turns a literal into a pattern by sometimes replacing part of it.
// It cuts between characters, never inside one: '?' is one character,
// and a pattern holding part of one is no text (refused).
func (g Gen) Glob(lit string) string {
	r := []rune(lit)
	switch g.R.IntN(6) {
	case 0:
		return "*"
	case 1:
		if len(r) > 1 {
			return string(r[:1+g.R.IntN(len(r)-1)]) + "*"
		}
	case 2:
		if len(r) > 1 {
			i := g.R.IntN(len(r))
			return string(r[:i]) + "?" + string(r[i+1:])
		}
	case 3:
		return "*" + string(r[len(r)/2:])
	}
	return lit
}

// PathPattern draws a path pattern of one to three segments, some of them
// globs or "**", absolute (mostly under /ws) with V.Absolute's chance.
func (g Gen) PathPattern() string {
	var parts []string
	for range 1 + g.R.IntN(3) {
		switch g.R.IntN(5) {
		case 0:
			parts = append(parts, "**")
		case 1:
			parts = append(parts, g.Glob(g.Pick(g.V.Segs...)))
		default:
			parts = append(parts, g.Pick(g.V.Segs...))
		}
	}
	p := strings.Join(parts, "/")
	if g.Chance(g.V.Absolute) {
		if g.Chance(0.6) {
			return "/ws/" + p
		}
		return "/" + p
	}
	return p
}

// CmdPattern draws a command pattern of one to three words, sometimes
// globbed, half of the time followed by "*".
func (g Gen) CmdPattern() string {
	var out []string
	for range 1 + g.R.IntN(3) {
		t := g.Pick(g.V.Tokens...)
		if g.Chance(0.2) {
			t = g.Glob(t)
		}
		out = append(out, t)
	}
	if g.Chance(0.5) {
		out = append(out, "*")
	}
	return strings.Join(out, " ")
}

// HostPattern draws a host pattern: "*", or one or two labels, sometimes
// under "*." and sometimes with a port.
func (g Gen) HostPattern() string {
	if g.Chance(0.05) {
		return "*"
	}
	var ls []string
	for range 1 + g.R.IntN(2) {
		ls = append(ls, strings.ToLower(g.Pick(g.V.Labels...)))
	}
	p := strings.Join(ls, ".")
	if g.Chance(0.4) {
		p = "*." + p
	}
	if g.Chance(0.5) {
		p += ":" + g.Pick("443", "80")
	}
	return p
}

// MCPPattern draws a server/tool pattern.
func (g Gen) MCPPattern() string {
	return g.Glob(g.Pick(g.V.Servers...)) + "/" + g.Glob(g.Pick(g.V.Tools...))
}

// Qualified is List's kind of action deny patterns: an action pattern, or
// a qualified one (pattern.ValidateQualified).
const Qualified pattern.Kind = "qualified"

// List draws up to max patterns from f and keeps the valid ones of kind.
func (g Gen) List(max int, kind pattern.Kind, f func() string) []string {
	out := []string{}
	for range g.R.IntN(max + 1) {
		p := f()
		var err error
		if kind == Qualified {
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

// Instantiate returns a value the pattern mostly matches, so that requests
// hit the policy's rules: "**" becomes one or two segments, '*' one of
// V.Fill, '?' a letter.
func (g Gen) Instantiate(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(strings.Repeat("a/", g.R.IntN(2)) + "x")
			i++
		case p[i] == '*':
			b.WriteString(g.Pick(g.V.Fill...))
		case p[i] == '?':
			b.WriteString(g.Pick("a", "B"))
		default:
			b.WriteByte(p[i])
		}
	}
	return b.String()
}

// Policy draws a policy declaration: every section, its deny lists drawn
// from qualified (action patterns, sometimes qualified ones) and, when
// namespace is not nil, secrets whose namespaces it draws.
func (g Gen) Policy(qualified, namespace func() string) map[string]any {
	glob := func(xs []string) func() string { return func() string { return g.Glob(g.Pick(xs...)) } }
	p := map[string]any{"version": "1"}
	p["principals"] = append(g.List(2, pattern.Principal, glob(g.V.Principals)), g.Pick(g.V.AnyPrincipal...))
	p["tenants"] = append(g.List(1, pattern.Principal, glob(g.V.Tenants)), g.Pick("*", "t1"))
	approvals := []any{}
	for range g.R.IntN(3) {
		q := strings.ToLower(qualified())
		if _, _, _, err := pattern.ValidateQualified(q); err != nil {
			continue
		}
		if g.Chance(0.2) {
			approvals = append(approvals, map[string]any{"pattern": q, "approver": nil})
		} else {
			approvals = append(approvals, map[string]any{"pattern": q, "approver": g.Pick("lead", "ops"), "expires_after": "1h"})
		}
	}
	p["actions"] = map[string]any{
		"allow":   append(g.List(4, pattern.Action, glob(g.V.Actions)), g.Pick(g.V.Actions...), g.Pick("*", "bash", "mcp")),
		"deny":    g.List(2, Qualified, qualified),
		"approve": approvals,
	}
	p["filesystem"] = map[string]any{
		"read":    append(g.List(3, pattern.Path, g.PathPattern), g.Pick("/ws/**", "/**", "**")),
		"write":   g.List(g.V.WriteMax, pattern.Path, g.PathPattern),
		"execute": g.List(1, pattern.Path, g.PathPattern),
		"deny":    g.List(2, pattern.Path, g.PathPattern),
	}
	p["network"] = map[string]any{"mode": g.Pick("deny", "allowlist", "allowlist", "allow"),
		"allow": g.List(3, pattern.Host, g.HostPattern), "deny": g.List(1, pattern.Host, g.HostPattern)}
	p["subprocess"] = map[string]any{"mode": g.Pick("deny", "allowlist", "allowlist", "allow"), "shell": g.Pick("forbid", "allow"),
		"allow": g.List(3, pattern.Command, g.CmdPattern), "deny": g.List(2, pattern.Command, g.CmdPattern)}
	servs := []any{}
	for range g.R.IntN(3) {
		servs = append(servs, map[string]any{"server": g.Glob(g.Pick(g.V.Servers...)),
			"tools":     g.List(2, pattern.Env, glob(g.V.Tools)),
			"resources": []string{g.Pick("repo/*", "repo/**", "file:///**", "x")}})
	}
	p["mcp"] = map[string]any{"servers": servs, "deny": g.List(1, pattern.MCP, g.MCPPattern)}
	p["environment"] = map[string]any{"read": g.List(2, pattern.Env, glob(g.V.Envs)),
		"inject": g.List(g.V.InjectMax, pattern.Env, glob(g.V.Envs)),
		"deny":   g.List(1, pattern.Env, glob(g.V.Envs))}
	if namespace != nil {
		secrets := []any{}
		for range g.R.IntN(3) {
			secrets = append(secrets, map[string]any{"namespace": namespace(), "exposure": g.Pick("forbid", "reference_only", "inject")})
		}
		p["secrets"] = secrets
	}
	if g.Chance(0.3) {
		p["budgets"] = map[string]any{"calls": 1 + g.R.IntN(4), "tokens": 100}
	}
	if g.Chance(0.25) {
		p["not_before"] = "2026-03-01T00:00:00Z"
		p["expires_at"] = "2026-09-01T00:00:00Z"
	}
	if g.Chance(0.4) {
		var gates []any
		for i := range 1 + g.R.IntN(2) {
			gates = append(gates, map[string]any{"id": fmt.Sprintf("g%d", i), "level": g.Pick("hard", "soft", "advisory"),
				"rules": []string{g.Pick(g.V.GateRules...)}})
		}
		p["gates"] = gates
	}
	return p
}

// Compile compiles n policies drawn by policy (named p0000…) with the
// real compiler and returns their declarations by name and the result;
// a generated policy that does not compile fails t.
func Compile(t testing.TB, n int, policy func() map[string]any) (map[string]map[string]any, *compiler.Result) {
	t.Helper()
	policies := map[string]any{}
	decls := map[string]map[string]any{}
	for i := range n {
		name := fmt.Sprintf("p%04d", i)
		decls[name] = policy()
		policies[name] = decls[name]
	}
	res := compiletest.Decls(t, policies)
	if res.Diagnostics.HasErrors() {
		t.Fatalf("generated policies do not compile: %v", res.Diagnostics[:min(5, len(res.Diagnostics))])
	}
	return decls, res
}
