package prove_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/internal/policygen"
	. "polc.dev/polc/internal/prove"
	"polc.dev/polc/normalize"
)

// The random test draws policies over a small vocabulary (so that
// patterns, requests and case variants collide often), asks properties of
// them, and checks every answer against the engines: each counterexample
// is normalized and decided again here, and must match the property's
// pattern by an independent matcher (matches); for each property that
// holds, random action requests — of every built-in action and of
// registered ones, with several facets, shell control, redirections,
// commands of shell control alone — must show no violation, and each must
// be of a structure the prover's shapes model (Unmodelled).

type gen struct{ policygen.Gen }

var (
	segs    = []string{"ws", "src", "a", "B", ".env", "secret", "x.go", "é"}
	tokens  = []string{"git", "push", "status", "rm", "-rf", "Git", "go", "./..."}
	labels  = []string{"a", "b", "x", "com"}
	servers = []string{"gh", "fs"}
	tools   = []string{"create_issue", "delete_x", "read"}
	envs    = []string{"HOME", "GOFLAGS", "AWS_KEY", "aws_key"}
	princ   = []string{"agent:a", "agent:b", "user:x", "Agent:a"}
	tenants = []string{"t1", "t2"}
	actions = []string{"bash", "read_file", "write_file", "edit_file", "http_get", "mcp", "search", "Bash"}
	times   = []string{"2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z", "2027-01-01T00:00:00Z"}
	vocab   = policygen.Vocab{Segs: segs, Tokens: tokens, Labels: labels, Servers: servers, Tools: tools, Envs: envs,
		Principals: princ, Tenants: tenants, Actions: actions, AnyPrincipal: []string{"*", "agent:*"},
		WriteMax: 3, InjectMax: 2, Absolute: 0.7, Fill: []string{"", "a", "x.go", "B"},
		GateRules: []string{"network.*", "action.deny:*", "subprocess.*", "filesystem.*", "approval*", "*", "mcp.*", "budget.*", "expiry", "environment.*"}}
)

func (g gen) qualified() string {
	if g.Chance(0.3) {
		return g.Glob(g.Pick(actions[:6]...))
	}
	switch a := g.Pick("bash", "read_file", "write_file", "edit_file", "http_get", "mcp"); a {
	case "bash":
		return a + ":" + g.CmdPattern()
	case "http_get":
		return a + ":" + g.HostPattern()
	case "mcp":
		return a + ":" + g.MCPPattern()
	default:
		return a + ":" + g.PathPattern()
	}
}

// policy draws a policy (no secrets: properties do not ask about them).
func (g gen) policy() map[string]any { return g.Policy(g.qualified, nil) }

// requestPattern draws a request pattern: one facet or qualified action,
// sometimes with a principal.
func (g gen) requestPattern() RequestPattern {
	var rp RequestPattern
	switch g.R.IntN(9) {
	case 0:
		rp.Action = g.qualified()
	case 1:
		rp.Read = g.PathPattern()
	case 2:
		rp.Write = g.PathPattern()
	case 3:
		rp.Path = g.PathPattern()
	case 4:
		rp.Command = g.CmdPattern()
	case 5:
		rp.Host = g.HostPattern()
	case 6:
		rp.Env = g.Glob(g.Pick(envs...))
	case 7:
		rp.MCPTool = g.MCPPattern()
	case 8:
		rp.Action = g.Glob(g.Pick(actions...))
	}
	if g.Chance(0.3) {
		rp.Principal = g.Glob(g.Pick(princ...))
	}
	if rp.Validate() != nil {
		return RequestPattern{Action: "*"}
	}
	return rp
}

// from returns a value drawn from one of the patterns given, or def.
func (g gen) from(def string, pats ...string) string {
	var ps []string
	for _, p := range pats {
		if p != "" {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 || g.Chance(0.3) {
		return def
	}
	return g.Instantiate(ps[g.R.IntN(len(ps))])
}

func strs(pol map[string]any, section, field string) []string {
	sec, _ := pol[section].(map[string]any)
	l, _ := sec[field].([]string)
	return l
}

func squote(w string) string { return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'" }

func (g gen) path(rp RequestPattern, pol map[string]any) string {
	def := strings.Join([]string{g.Pick(segs...), g.Pick(segs...)}[:1+g.R.IntN(2)], "/")
	if g.Chance(0.6) {
		def = g.Pick("/ws/", "/", "/W/", "/w/") + def
	}
	return g.from(def, append(append(strs(pol, "filesystem", g.Pick("read", "write", "deny")), rp.Read, rp.Write, rp.Path), qualTarget(rp.Action, "_file"))...)
}

func qualTarget(action, kind string) string {
	a, t, ok := strings.Cut(action, ":")
	if !ok || !strings.Contains(a, strings.Trim(kind, "_")) && !(kind == "_file" && strings.HasSuffix(a, "_file")) {
		return ""
	}
	return t
}

func (g gen) argv(rp RequestPattern, pol map[string]any) string {
	v := g.from(strings.Join([]string{g.Pick(tokens...), g.Pick(tokens...)}[:1+g.R.IntN(2)], " "),
		append(strs(pol, "subprocess", g.Pick("allow", "deny")), rp.Command, qualTarget(rp.Action, "bash"))...)
	var words []string
	for _, w := range strings.Split(v, " ") {
		words = append(words, squote(w))
	}
	return strings.Join(words, " ")
}

func (g gen) host(rp RequestPattern, pol map[string]any) string {
	h := g.from(g.Pick(labels...)+"."+g.Pick(labels...), append(strs(pol, "network", "allow"), rp.Host, qualTarget(rp.Action, "http_get"))...)
	h = strings.ReplaceAll(strings.ReplaceAll(h, "*.", "a."), "*", "x")
	if !strings.Contains(h, ":") {
		h += ":" + g.Pick("443", "80")
	}
	return h
}

// request draws an action request, with values taken from the property's
// pattern and the policy's patterns most of the time.
func (g gen) request(rp RequestPattern, pol map[string]any) normalize.ActionRequest {
	req := normalize.ActionRequest{
		Principal: g.from(g.Pick(princ...), rp.Principal), Tenant: g.Pick(tenants...), Workspace: g.Pick("/ws", "/ws", "/", "/W"),
		Action: g.Pick(actions...), Arguments: map[string]any{},
	}
	t := g.Pick(times...)
	req.Time = &t
	if g.Chance(0.3) {
		req.Usage = &normalize.Usage{Calls: int64(g.R.IntN(4)), Tokens: int64(g.R.IntN(120))}
	}
	if a, _, ok := strings.Cut(rp.Action, ":"); ok && g.Chance(0.5) {
		req.Action = a
	}
	switch req.Action {
	case "bash", "Bash":
		var cmds []string
		for range 1 + g.R.IntN(2) {
			c := g.argv(rp, pol)
			switch g.R.IntN(6) {
			case 0:
				c += " > " + squote(g.path(rp, pol))
			case 1:
				c += " < " + squote(g.path(rp, pol))
			case 2:
				c = g.from(g.Pick(envs...), append(strs(pol, "environment", "inject"), rp.Env)...) + "=1 " + c
			case 3:
				h, port, _ := strings.Cut(g.host(rp, pol), ":")
				c += " > /dev/tcp/" + h + "/" + port
			}
			switch {
			case g.Chance(0.1):
				c = "> " + squote(g.path(rp, pol))
			case g.Chance(0.1):
				// Shell control and no program: redirections alone, a
				// bare or exported assignment.
				c = g.Pick("> /dev/null", "2>&1", ">/dev/stderr", g.Pick(envs...)+"=1", "export "+g.Pick(envs...)+"=1")
			}
			cmds = append(cmds, c)
		}
		req.Arguments["command"] = strings.Join(cmds, g.Pick("; ", " && "))
	case "read_file", "write_file", "edit_file":
		req.Arguments["path"] = g.path(rp, pol)
	case "http_get":
		req.Arguments["url"] = "http://" + g.host(rp, pol) + "/"
	case "mcp", "search":
		st := g.from(g.Pick(servers...)+"/"+g.Pick(tools...), rp.MCPTool, qualTarget(rp.Action, "mcp"))
		server, tool, _ := strings.Cut(st, "/")
		req.Action = "mcp:" + server + "/" + tool
		if g.Chance(0.3) {
			req.Arguments["resource"] = g.Pick("repo/a", "repo/a/b", "file:///x", "x")
		}
		if g.Chance(0.3) {
			req.Action = "search"
			req.Arguments = map[string]any{"path": g.path(rp, pol), "url": "http://" + g.host(rp, pol) + "/"}
		}
	}
	return req
}

// catalog holds the built-in actions and two registered ones: "search",
// whose requests read and write a path and reach a host, and "Bash", which
// lowercases to a built-in action.
func catalog(t testing.TB) *normalize.Catalog {
	cat := normalize.BuiltinCatalog()
	src := normalize.Source{Kind: "sdk", Ref: "test"}
	for _, d := range []normalize.ActionDescriptor{
		{ID: "search", Version: "1", Source: src, Containment: []string{},
			Arguments: []byte(`{"type":"object","properties":{"path":{"type":"string"},"url":{"type":"string"}},"required":["path","url"]}`),
			Hints:     normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: "path", Access: []string{"read", "write"}}}, URL: "url"}},
		{ID: "Bash", Version: "1", Source: src, Containment: []string{},
			Arguments: []byte(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`),
			Hints:     normalize.NormalizationHints{Command: "command"}},
	} {
		if _, err := cat.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	return cat
}

// matches is the meaning of a request pattern (docs/prove.md), written
// independently of the prover's encodings: every field given matches, a
// target field when one of the request's values of that facet does.
func matches(rp RequestPattern, n *normalize.Normalized) bool {
	if rp.Principal != "" && !pattern.Match(pattern.Principal, rp.Principal, n.Principal) {
		return false
	}
	if rp.Tenant != "" && !pattern.Match(pattern.Principal, rp.Tenant, n.Tenant) {
		return false
	}
	pathIn := func(p string, access string) bool {
		for _, pa := range n.Paths {
			if access != "" && pa.Access != access {
				continue
			}
			if strings.HasPrefix(p, "/") {
				if pattern.Match(pattern.Path, p, pa.Path) {
					return true
				}
			} else if rel, ok := relTo(n.Workspace, pa.Path); ok && pattern.Match(pattern.Path, p, rel) {
				return true
			}
		}
		return false
	}
	cmdIn := func(p string) bool {
		for _, argv := range n.Commands {
			if pattern.Match(pattern.Command, p, strings.Join(argv, pattern.ArgvSep)) {
				return true
			}
		}
		return false
	}
	hostIn := func(p string) bool {
		for _, h := range n.Hosts {
			if pattern.Match(pattern.Host, p, h) {
				return true
			}
		}
		return false
	}
	mcpIn := func(p string) bool { return n.MCP != nil && pattern.Match(pattern.MCP, p, n.MCP.Server+"/"+n.MCP.Tool) }
	if rp.Action != "" {
		a, tk, target, _ := pattern.ValidateQualified(rp.Action)
		switch {
		case tk == "":
			if !pattern.Match(pattern.Action, a, n.Action) {
				return false
			}
		case n.Action != a:
			return false
		case tk == pattern.Path && !pathIn(target, ""), tk == pattern.Command && !cmdIn(target),
			tk == pattern.Host && !hostIn(target), tk == pattern.MCP && !mcpIn(target):
			return false
		}
	}
	switch {
	case rp.Read != "" && !pathIn(rp.Read, "read"), rp.Write != "" && !pathIn(rp.Write, "write"),
		rp.Execute != "" && !pathIn(rp.Execute, "execute"), rp.Path != "" && !pathIn(rp.Path, ""),
		rp.Command != "" && !cmdIn(rp.Command), rp.Host != "" && !hostIn(rp.Host), rp.MCPTool != "" && !mcpIn(rp.MCPTool):
		return false
	case rp.Env != "":
		found := false
		for _, e := range n.Env {
			found = found || pattern.Match(pattern.Env, rp.Env, e)
		}
		if !found {
			return false
		}
	case rp.MCPResource != "":
		if n.MCP == nil || n.MCP.Resource == nil || !pattern.Match(pattern.MCPResource, rp.MCPResource, n.MCP.Server+"/"+*n.MCP.Resource) {
			return false
		}
	}
	return true
}

func relTo(ws, path string) (string, bool) {
	switch {
	case path == ws:
		return "", true
	case ws == "/":
		return path[1:], true
	case strings.HasPrefix(path, ws+"/"):
		return path[len(ws)+1:], true
	}
	return "", false
}

func rank(d string) int {
	return map[string]int{decision.Deny: 0, decision.Escalate: 1, decision.Allow: 2}[d]
}

// violates reports whether decisions d (this policy's, and other's for
// NeverAllowsBeyond) violate the property.
func violates(prop Property, this, other string) bool {
	switch prop.Kind {
	case Never:
		return this != decision.Deny
	case AlwaysEscalates:
		return this == decision.Allow
	}
	return rank(this) > rank(other)
}

func randomProve(t *testing.T, seed uint64, nPolicies, perProperty int) (requests int) {
	g := gen{policygen.New(&vocab, seed, seed^0x5851f42d4c957f2d)}
	decls, res := policygen.Compile(t, nPolicies, g.policy)
	ctx := context.Background()
	eng := compiletest.OPA(t, res.Snapshots)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	pr := &Prover{Policies: map[string]*Policy{}, OPA: eng, Now: now}
	native := map[string]*decision.Policy{}
	for _, s := range res.Snapshots {
		p, err := NewPolicy(s)
		if err != nil {
			t.Fatal(err)
		}
		pr.Policies[s.Name] = p
		native[s.Name], _ = decision.Compile(s)
	}
	cat := catalog(t)
	normalizer := &normalize.Normalizer{Catalog: cat, Now: func() time.Time { return now }}
	counts := map[string]int{}
	for i, s := range res.Snapshots {
		other := res.Snapshots[(i+1)%len(res.Snapshots)].Name
		props := []Property{
			{Policy: s.Name, Kind: Never, Pattern: g.requestPattern()},
			{Policy: s.Name, Kind: Never, Pattern: g.requestPattern()},
			{Policy: s.Name, Kind: AlwaysEscalates, Pattern: g.requestPattern()},
			{Policy: s.Name, Kind: NeverAllowsBeyond, Other: other},
		}
		for _, prop := range props {
			r, err := pr.Check(ctx, prop)
			if err != nil {
				t.Fatalf("%s: %v", prop, err)
			}
			counts[r.Status]++
			switch r.Status {
			case Undecided:
				t.Logf("%s: undecided: %s", prop, r.Reason)
			case Fails:
				ce := r.Counterexample
				c := cat
				if ce.Registered != nil {
					c = normalize.NewCatalog()
					if _, err := c.Add(*ce.Registered); err != nil {
						t.Fatal(err)
					}
				}
				n, nerr := (&normalize.Normalizer{Catalog: c}).Normalize(ce.Request)
				if nerr != nil {
					t.Fatalf("%s: counterexample %+v does not normalize: %v", prop, ce.Request, nerr)
				}
				if prop.Kind != NeverAllowsBeyond && !matches(prop.Pattern, n) {
					t.Fatalf("%s: counterexample %+v does not match the pattern", prop, n)
				}
				dThis, _ := native[s.Name].Evaluate(n)
				dOther := decision.Decision{}
				if prop.Kind == NeverAllowsBeyond {
					dOther, _ = native[other].Evaluate(n)
					oOther, err := eng.Evaluate(ctx, other, n)
					if err != nil || oOther.Disposition != dOther.Disposition {
						t.Fatalf("%s: opa %v %v, native %v", prop, oOther.Disposition, err, dOther.Disposition)
					}
				}
				oThis, err := eng.Evaluate(ctx, s.Name, n)
				if err != nil || oThis.Disposition != dThis.Disposition {
					t.Fatalf("%s: opa %v %v, native %v", prop, oThis.Disposition, err, dThis.Disposition)
				}
				if !violates(prop, dThis.Disposition, dOther.Disposition) {
					t.Fatalf("%s: counterexample %+v decided %s / %s: no violation", prop, n, dThis.Disposition, dOther.Disposition)
				}
			case Holds:
				checked := 0
				for tries := 0; checked < perProperty && tries < 20*perProperty; tries++ {
					req := g.request(prop.Pattern, decls[s.Name])
					n, nerr := normalizer.Normalize(req)
					if nerr != nil || (prop.Kind != NeverAllowsBeyond && !matches(prop.Pattern, n)) {
						continue
					}
					if miss := Unmodelled(n); len(miss) > 0 {
						t.Fatalf("%+v (action %s): no shape models %s", req, n.Action, strings.Join(miss, "; "))
					}
					checked++
					dThis, _ := native[s.Name].Evaluate(n)
					dOther := ""
					if prop.Kind == NeverAllowsBeyond {
						d, _ := native[other].Evaluate(n)
						dOther = d.Disposition
					}
					if violates(prop, dThis.Disposition, dOther) {
						t.Fatalf("%s holds, but %+v (action %s) is decided %s / %s", prop, req, n.Action, dThis.Disposition, dOther)
					}
				}
				requests += checked
			}
		}
	}
	t.Logf("seed %d: %v; %d requests checked against holding properties", seed, counts, requests)
	if counts[Holds] == 0 || counts[Fails] == 0 {
		t.Errorf("seed %d: an answer was never given: %v", seed, counts)
	}
	if counts[Undecided]*50 > counts[Holds]+counts[Fails] {
		t.Errorf("seed %d: too many undecided: %v", seed, counts)
	}
	return requests
}

// TestRandomProperties is the default run: answers of every kind on random
// policies, each checked against the engines.
func TestRandomProperties(t *testing.T) {
	randomProve(t, 1, 16, 200)
}

// TestRandomPropertiesLong checks holding properties against at least
// 100,000 random requests (POLC_LONG=1).
func TestRandomPropertiesLong(t *testing.T) {
	if os.Getenv("POLC_LONG") == "" {
		t.Skip("set POLC_LONG=1 to check 100,000 requests against holding properties")
	}
	total := 0
	for seed := uint64(10); total < 100000; seed++ {
		total += randomProve(t, seed, 40, 1000)
	}
	t.Logf("%d requests checked in all", total)
}
