package compiler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

// The bundle's Rego is generated per snapshot, shaped for OPA's rule
// indexer (docs/bundle.md): every pattern becomes one rule body (or two)
// whose first expression tests a reference into input with an
// expression OPA indexes — equality, startswith or endswith with a
// literal — so that OPA evaluates only the rules whose literal part the
// request value has, however many rules the policy holds.
//
// A request carries lists (commands, paths, hosts, environment names,
// secret namespaces) and values the Rego derives (lowercased values, argv
// joined, a path relative to the workspace, a host without its port). The
// indexer looks only at references into input, so each such value is
// judged by evaluating a rule set `with input as` an object holding the
// value and what is derived from it: replacing input whole costs no copy
// of the request, where replacing one member would copy all of it.

// regoString is s as a Rego string literal (JSON's escaping, which Rego
// shares).
func regoString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err) // a string always encodes
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// regexSuffix is the literal text every match of the RE2 expression re
// ends with: the literals before its end-of-text anchor ("" when re is
// not anchored at its end, or ends with no case-sensitive literal).
func regexSuffix(re string) string {
	x, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return ""
	}
	subs := []*syntax.Regexp{x}
	if x.Op == syntax.OpConcat {
		subs = x.Sub
	}
	if len(subs) == 0 || subs[len(subs)-1].Op != syntax.OpEndText {
		return ""
	}
	var lits []string
	for i := len(subs) - 2; i >= 0; i-- {
		s := subs[i]
		if s.Op != syntax.OpLiteral || s.Flags&syntax.FoldCase != 0 {
			break
		}
		lits = append(lits, string(s.Rune))
	}
	slices.Reverse(lits)
	return strings.Join(lits, "")
}

// body is one way a rule can hold: its expressions, all of which must.
type body []string

// matchBodies are the rule bodies that hold exactly when the value at ref
// matches pattern p of grammar k (pattern.Match): any one of them is
// enough. Each starts with an expression OPA indexes where p has a
// literal prefix or suffix; the rest decide. A nil result never matches
// (not produced today); a body with no expressions always holds, and the
// caller adds a test that the value is present.
//
// For hosts, hostRef names the host without its port (present only when
// the value is "host:port" with a numeric port). For commands, paths,
// namespaces and MCP resources, ref+"s" names the value followed by its
// separator (NUL, '/'): "a b *" and "L/**" are then one startswith on it
// (the value itself, or anything below it), not an equality and a
// startswith, which halves the rules of the usual policy.
func matchBodies(k pattern.Kind, p, ref, hostRef string) []body {
	if k == pattern.Host {
		return hostBodies(p, ref, hostRef)
	}
	if !strings.ContainsAny(p, "*?") {
		v := p
		if k == pattern.Command {
			v = strings.ReplaceAll(p, " ", pattern.ArgvSep)
		}
		return []body{{ref + " == " + regoString(v)}}
	}
	switch k {
	case pattern.Command:
		// "a b *": argv a, b and any more tokens; "*": any argv.
		if p == "*" {
			return []body{{}}
		}
		if lit, ok := strings.CutSuffix(p, " *"); ok && !strings.ContainsAny(lit, "*?") {
			j := strings.ReplaceAll(lit, " ", pattern.ArgvSep)
			return []body{{"startswith(" + ref + "s, " + regoString(j+pattern.ArgvSep) + ")"}}
		}
	case pattern.Path, pattern.Namespace, pattern.MCPResource:
		// "L/**" with L literal: L itself and anything below it. "**"
		// alone (relative paths, namespaces): anything.
		if p == "**" && k != pattern.MCPResource {
			return []body{{}}
		}
		if lit, ok := strings.CutSuffix(p, "/**"); ok && !strings.ContainsAny(lit, "*?") {
			if k == pattern.MCPResource && !strings.Contains(lit, "/") {
				// "server/**": the server and any resource.
				return []body{{"startswith(" + ref + ", " + regoString(lit+"/") + ")"}}
			}
			return []body{{"startswith(" + ref + "s, " + regoString(lit+"/") + ")"}}
		}
	case pattern.Action, pattern.Env, pattern.Principal:
		if p == "*" {
			return []body{{}}
		}
		if lit, ok := strings.CutSuffix(p, "*"); ok && !strings.ContainsAny(lit, "*?") {
			return []body{{"startswith(" + ref + ", " + regoString(lit) + ")"}}
		}
	}
	re := pattern.Regexp(k, p)
	b := body{}
	if pre, suf := regexPrefix(re), regexSuffix(re); pre != "" && len(pre) >= len(suf) {
		b = append(b, "startswith("+ref+", "+regoString(pre)+")")
	} else if suf != "" {
		b = append(b, "endswith("+ref+", "+regoString(suf)+")")
	}
	return []body{append(b, "regex.match("+regoString(re)+", "+ref+")")}
}

// hostBodies: "*" matches anything; "h:p" is one value; "h" any port of
// h; "*.S" and "*.S:p" one or more labels before S, whose end the index
// tests before the expression decides.
func hostBodies(p, ref, hostRef string) []body {
	if p == "*" {
		return []body{{}}
	}
	h, port, _ := pattern.SplitHostPort(p)
	suffix, wild := strings.CutPrefix(h, "*.")
	switch {
	case !wild && port != "":
		return []body{{ref + " == " + regoString(p)}}
	case !wild:
		return []body{{"is_string(" + hostRef + ")", hostRef + " == " + regoString(h)}}
	}
	re := regoString(pattern.Regexp(pattern.Host, p))
	if port != "" {
		return []body{{"endswith(" + ref + ", " + regoString("."+suffix+":"+port) + ")", "regex.match(" + re + ", " + ref + ")"}}
	}
	return []body{{"is_string(" + hostRef + ")", "endswith(" + hostRef + ", " + regoString("."+suffix) + ")", "regex.match(" + re + ", " + ref + ")"}}
}

// ruleSet collects the rules of one generated partial set.
type ruleSet struct {
	name  string
	rules []string
}

// add emits `name contains head if { guard; body }` for each body.
func (rs *ruleSet) add(head string, guard []string, bodies []body) {
	for _, b := range bodies {
		exprs := append(slices.Clone(guard), b...)
		if len(exprs) == 0 {
			exprs = []string{"true"}
		}
		if len(exprs) == 1 {
			rs.rules = append(rs.rules, rs.name+" contains "+head+" if "+exprs[0])
			continue
		}
		rs.rules = append(rs.rules, rs.name+" contains "+head+" if {\n\t"+strings.Join(exprs, "\n\t")+"\n}")
	}
}

func (rs *ruleSet) write(b *strings.Builder) {
	for _, r := range rs.rules {
		b.WriteString(r)
		b.WriteString("\n\n")
	}
}

// hit is the head of a rule: [tag, rule id, gate index]. The tag is d
// (a deny rule), a (an approval rule) or what an allow rule grants:
// action, mcp_tool, mcp_resource, c (a command), cs (a command, shell
// control too), g (a path for its access, a host, an environment name, a
// secret namespace), principal or tenant (the scopes: no rule id, gate
// -1), x (expiry and budgets).
func hit(tag, id string, gate int) string {
	return "[" + regoString(tag) + ", " + regoString(id) + ", " + fmt.Sprint(gate) + "]"
}

// present is a test that the value at ref is there, for bodies that test
// nothing else.
func present(ref string, bodies []body) []body {
	for i, b := range bodies {
		if len(b) == 0 {
			bodies[i] = body{"is_string(" + ref + ")"}
		}
	}
	return bodies
}

// guarded prepends a test that the value at ref is a string to every
// body: ref is one the with-object may set to null (a path outside the
// workspace has no relative form, a host without a numeric port no host
// part), and a builtin given null would be a type error under strict
// builtin errors.
func guarded(ref string, bodies []body) []body {
	for i, b := range bodies {
		bodies[i] = append(body{"is_string(" + ref + ")"}, b...)
	}
	return bodies
}

// policyModule generates the Rego module of one snapshot: package
// polc.policies[<name>], whose rule `result` is the decision for
// input.request (checked well-formed by the decision module).
//
// The allowed request, the usual one, takes one body: the rule sets, a
// set of facets not allowed, and the decision with each gate written
// out. Anything else takes the full reduction (docs/decisions.md), also
// written out gate by gate: which gates are hard, soft or advisory, which
// facets and rules each gate holds and who approves what are known here,
// so the Rego looks up nothing.
func policyModule(s *snapshot.Snapshot) (string, error) {
	ruleGate, facetGate, err := decision.GateTables(s)
	if err != nil {
		return "", err
	}
	sg := &ruleSet{name: "s_g"}   // scopes and action grants, on input.request
	sda := &ruleSet{name: "s_da"} // action denials and approvals, on input.request (lowercased)
	mcp := &ruleSet{name: "m_hits"}
	cmd := &ruleSet{name: "c_hits"}
	path := &ruleSet{name: "p_hits"}
	host := &ruleSet{name: "h_hits"}
	env := &ruleSet{name: "e_hits"}
	secret := &ruleSet{name: "n_hits"}
	approver := map[string]string{}
	var unapprovable []string // approval rules no one can approve
	hasShellAllow := false
	var budgets []*snapshot.BudgetRule
	var expiry *snapshot.ExpiryRule

	for _, p := range s.PrincipalScope {
		sg.add(hit("principal", "", -1), nil, present("input.request.principal", matchBodies(pattern.Principal, p, "input.request.principal", "")))
	}
	for _, p := range s.TenantScope {
		sg.add(hit("tenant", "", -1), nil, present("input.request.tenant", matchBodies(pattern.Principal, p, "input.request.tenant", "")))
	}
	// qualified emits a deny or approval rule of action pattern action,
	// qualified by a target or not, matched against lowercased values.
	qualified := func(h, action string, tk, target *string) {
		if tk == nil {
			sda.add(h, nil, present("input.request.action", matchBodies(pattern.Action, action, "input.request.action", "")))
			return
		}
		guard := []string{"input.la == " + regoString(action)}
		switch *tk {
		case snapshot.TargetCommand:
			cmd.add(h, guard, matchBodies(pattern.Command, *target, "input.l", ""))
		case snapshot.TargetPath:
			pathRule(path, h, guard, *target, "input.l", "input.lr")
		case snapshot.TargetHost:
			host.add(h, guard, matchBodies(pattern.Host, *target, "input.l", "input.lh"))
		case snapshot.TargetMCP:
			mcp.add(h, guard, matchBodies(pattern.MCP, *target, "input.lm", ""))
		}
	}
	// kinds records which gates hold deny and approval rules: the full
	// reduction tests only those.
	kinds := make([]map[string]bool, len(s.GateBindings))
	for i := range kinds {
		kinds[i] = map[string]bool{}
	}
	for _, r := range s.CompiledRules {
		id := r.Base().RuleID
		g := ruleGate[id]
		allow := r.Base().Effect == snapshot.EffectAllow
		switch r.(type) {
		case *snapshot.ApprovalRule:
			kinds[g]["a"] = true
		case *snapshot.BudgetRule, *snapshot.ExpiryRule:
			kinds[g]["g"] = true // granted while within them (tag x)
		default:
			if allow {
				kinds[g]["g"] = true
			} else {
				kinds[g]["d"] = true
			}
		}
		switch r := r.(type) {
		case *snapshot.ActionRule:
			if allow {
				sg.add(hit("action", id, g), nil, present("input.request.action", matchBodies(pattern.Action, r.Action, "input.request.action", "")))
			} else {
				qualified(hit("d", id, g), r.Action, r.TargetKind, r.Target)
			}
		case *snapshot.ApprovalRule:
			qualified(hit("a", id, g), r.Action, r.TargetKind, r.Target)
			if r.ApproverClass != nil {
				approver[id] = *r.ApproverClass
			} else {
				unapprovable = append(unapprovable, id)
			}
		case *snapshot.FilesystemRule:
			if allow {
				pathRule(path, hit("g", id, g), []string{"input.x == " + regoString(r.Access)}, r.Pattern, "input.v", "input.r")
			} else {
				pathRule(path, hit("d", id, g), nil, r.Pattern, "input.l", "input.lr")
			}
		case *snapshot.NetworkRule:
			if allow {
				host.add(hit("g", id, g), nil, present("input.v", matchBodies(pattern.Host, r.Pattern, "input.v", "input.h")))
			} else {
				host.add(hit("d", id, g), nil, present("input.l", matchBodies(pattern.Host, r.Pattern, "input.l", "input.lh")))
			}
		case *snapshot.SubprocessRule:
			switch {
			case !allow:
				cmd.add(hit("d", id, g), nil, present("input.l", matchBodies(pattern.Command, r.Pattern, "input.l", "")))
			case *r.Shell == "allow":
				hasShellAllow = true
				cmd.add(hit("cs", id, g), nil, present("input.v", matchBodies(pattern.Command, r.Pattern, "input.v", "")))
			default:
				cmd.add(hit("c", id, g), nil, present("input.v", matchBodies(pattern.Command, r.Pattern, "input.v", "")))
			}
		case *snapshot.MCPRule:
			switch {
			case !allow:
				mcp.add(hit("d", id, g), nil, present("input.lm", matchBodies(pattern.MCP, r.Server+"/"+*r.Tool, "input.lm", "")))
			case r.Resource != nil:
				mcp.add(hit("mcp_resource", id, g), nil, guarded("input.r", matchBodies(pattern.MCPResource, r.Server+"/"+*r.Resource, "input.r", "")))
			default:
				mcp.add(hit("mcp_tool", id, g), nil, present("input.m", matchBodies(pattern.MCP, r.Server+"/"+*r.Tool, "input.m", "")))
			}
		case *snapshot.EnvironmentRule:
			switch {
			case !allow:
				env.add(hit("d", id, g), nil, present("input.l", matchBodies(pattern.Env, r.Pattern, "input.l", "")))
			case r.Exposure == "inject":
				// As the native evaluator: only inject grants assigning a
				// name (the env facet).
				env.add(hit("g", id, g), nil, present("input.v", matchBodies(pattern.Env, r.Pattern, "input.v", "")))
			}
		case *snapshot.SecretExposureRule:
			if allow {
				secret.add(hit("g", id, g), nil, present("input.v", matchBodies(pattern.Namespace, r.Namespace, "input.v", "")))
			} else {
				secret.add(hit("d", id, g), nil, present("input.l", matchBodies(pattern.Namespace, r.Namespace, "input.l", "")))
			}
		case *snapshot.BudgetRule:
			budgets = append(budgets, r)
		case *snapshot.ExpiryRule:
			expiry = r
		}
	}

	grantGates := 0
	for _, k := range kinds {
		if k["g"] {
			grantGates++
		}
	}

	helpers := map[string]bool{} // the expressions the with-objects use

	var b strings.Builder
	fmt.Fprintf(&b, "# polc policy %s, snapshot %s (generated by polc; do not edit).\npackage polc.policies[%s]\n\nimport rego.v1\n\n", s.Name, s.Digest, regoString(s.Name))
	b.WriteString("result := out if {\n\trq := input.request\n\tla := lower(rq.action)\n")
	if len(sg.rules) > 0 {
		b.WriteString("\tsg := s_g\n")
	} else {
		b.WriteString("\tsg := set()\n")
	}
	if len(sda.rules) > 0 {
		// The rules test input.request.action: lowercased with `with`
		// only when it is not lowercase already.
		b.WriteString("\tlower_already := la == rq.action\n")
		b.WriteString("\tsd := array.concat([s_da | lower_already], [x | not lower_already; x := s_da with input as {\"request\": {\"action\": la}}])[0]\n")
	} else {
		b.WriteString("\tsd := set()\n")
	}
	// Each list element's rules are evaluated with an object holding the
	// fields they test, and no others. A field may need a local computed
	// first (pre).
	type field struct{ name, expr, pre string }
	for _, c := range []struct {
		rs          *ruleSet
		local, iter string
		fields      []field
	}{
		{cmd, "ch", "some argv in rq.commands; v := concat(\"\\u0000\", argv)", []field{
			{"v", "v", ""}, {"vs", `concat("", [v, "\u0000"])`, ""},
			{"l", "lv", "lv := lower(v)"}, {"ls", `concat("", [lv, "\u0000"])`, "lv := lower(v)"}, {"la", "la", ""}}},
		{path, "ph", "some x in rq.paths", []field{
			{"v", "x.path", ""}, {"vs", `concat("", [x.path, "/"])`, ""},
			{"l", "lp", "lp := lower(x.path)"}, {"ls", `concat("", [lp, "/"])`, "lp := lower(x.path)"},
			{"x", "x.access", ""}, {"la", "la", ""},
			{"r", "r", "r := rel(rq.workspace, x.path)"}, {"rs", "slash(r)", "r := rel(rq.workspace, x.path)"},
			{"lr", "lr", "lp := lower(x.path); lr := rel(lower(rq.workspace), lp)"}, {"lrs", "slash(lr)", "lp := lower(x.path); lr := rel(lower(rq.workspace), lp)"}}},
		{host, "hh", "some v in rq.hosts", []field{
			{"v", "v", ""}, {"l", "lower(v)", ""}, {"la", "la", ""},
			{"h", "hp", "hp := host_part(v)"}, {"lh", "lower_or_null(hp)", "hp := host_part(v)"}}},
		{env, "eh", "some v in rq.env", []field{{"v", "v", ""}, {"l", "lower(v)", ""}}},
		{secret, "nh", "some v in rq.secrets", []field{
			{"v", "v", ""}, {"vs", `concat("", [v, "/"])`, ""},
			{"l", "lv", "lv := lower(v)"}, {"ls", `concat("", [lv, "/"])`, "lv := lower(v)"}}},
		{mcp, "mh", "rq.mcp != null; m := concat(\"/\", [rq.mcp.server, rq.mcp.tool])", []field{
			{"m", "m", ""}, {"lm", "lower(m)", ""}, {"la", "la", ""},
			{"r", "r", "r := mcp_resource(rq.mcp)"}, {"rs", "slash(r)", "r := mcp_resource(rq.mcp)"}}},
	} {
		if len(c.rs.rules) == 0 {
			// No rule: every value hits nothing.
			loop, _, _ := strings.Cut(c.iter, ";")
			fmt.Fprintf(&b, "\t%s := [set() | %s]\n", c.local, loop)
			continue
		}
		text := strings.Join(c.rs.rules, "\n")
		var obj, pres []string
		for _, f := range c.fields {
			if !regexp.MustCompile(`\binput\.` + f.name + `\b`).MatchString(text) {
				continue
			}
			obj = append(obj, regoString(f.name)+": "+f.expr)
			for pre := range strings.SplitSeq(f.pre, "; ") {
				if pre != "" && !slices.Contains(pres, pre) {
					pres = append(pres, pre)
				}
			}
			for _, h := range []string{"rel(", "slash(", "host_part(", "mcp_resource("} {
				if strings.Contains(f.expr+f.pre, h) {
					helpers[h] = true
				}
			}
		}
		iter := c.iter
		if len(pres) > 0 {
			iter += "; " + strings.Join(pres, "; ")
		}
		fmt.Fprintf(&b, "\t%s := [h | %s; h := %s with input as {%s}]\n", c.local, iter, c.rs.name, strings.Join(obj, ", "))
	}

	// Expiry and budgets: grants (tag x) and facets decided on the request.
	var extraHits, extraNA []string
	if expiry != nil {
		var conds []string
		id := expiry.Base().RuleID
		if expiry.NotBefore != nil {
			conds = append(conds, "rq.time >= "+regoString(*expiry.NotBefore))
			extraNA = append(extraNA, "{\"expiry\" | rq.time < "+regoString(*expiry.NotBefore)+"}")
		}
		if expiry.ExpiresAt != nil {
			conds = append(conds, "rq.time < "+regoString(*expiry.ExpiresAt))
			extraNA = append(extraNA, "{\"expiry\" | rq.time >= "+regoString(*expiry.ExpiresAt)+"}")
		}
		if len(conds) == 0 {
			conds = []string{"true"}
		}
		extraHits = append(extraHits, "{"+hit("x", id, ruleGate[id])+" | "+strings.Join(conds, "; ")+"}")
	}
	for _, bu := range budgets {
		id := bu.Base().RuleID
		use := "rq.usage[" + regoString(bu.BudgetKind) + "]"
		extraHits = append(extraHits, fmt.Sprintf("{%s | %s < %d}", hit("x", id, ruleGate[id]), use, bu.Limit))
		extraNA = append(extraNA, fmt.Sprintf("{\"budget\" | %s >= %d}", use, bu.Limit))
	}
	b.WriteString("\thits := " + union(append([]string{"sg", "sd", "{x | some l in [ch, ph, hh, eh, nh, mh]; some hs in l; some x in hs}"}, extraHits...)) + "\n")
	b.WriteString("\ttags := {t | some [t, _, _] in sg} | {t | some hs in mh; some [t, _, _] in hs}\n")

	// Facets not allowed: single values whose grant is missing, list
	// elements without one.
	na := []string{
		`(({"principal", "tenant", "action"} | {"mcp_tool" | rq.mcp != null}) | {"mcp_resource" | rq.mcp.resource != null}) - tags`,
		`{f | some [f, hl, want] in [["command", ch, {"c", "cs"}], ["host", hh, {"g"}], ["env", eh, {"g"}], ["secret", nh, {"g"}]]; some hs in hl; count({1 | some [t, _, _] in hs; t in want}) == 0}`,
		`{"shell" | rq.shell_control; some hs in ch; count({1 | some ["cs", _, _] in hs}) == 0}`,
		`{object.get({"read": "path_read", "write": "path_write", "execute": "path_execute"}, x.access, "path_read") | some i, x in rq.paths; count({1 | some ["g", _, _] in ph[i]}) == 0}`,
	}
	if !hasShellAllow {
		na = append(na, `{"shell" | rq.shell_control; count(rq.commands) == 0}`)
	}
	b.WriteString("\tna := " + union(append(na, extraNA...)) + "\n")
	b.WriteString("\tblocked := count({1 | some [t, _, _] in hits; t in {\"d\", \"a\"}}) + count(na)\n")

	// The allowed request: every gate allows, each listing the grants it
	// holds (none for a gate without allow rules; all of them for the
	// only gate with some).
	var fastGates []string
	for i, g := range s.GateBindings {
		ids := fmt.Sprintf("sort({id | some [_, id, %d] in hits})", i)
		switch {
		case !kinds[i]["g"]:
			ids = "[]"
		case grantGates == 1:
			ids = "ids"
		}
		fastGates = append(fastGates, fmt.Sprintf(`{"gate_id": %s, "level": %s, "decision": "allow", "reason_code": "allowed", "rule_ids": %s}`,
			regoString(g.GateID), regoString(g.Level), ids))
	}
	fmt.Fprintf(&b, "\tout := array.concat([o |\n\t\tblocked < 1\n\t\tids := sort({id | some [_, id, g] in hits; g >= 0})\n\t\to := {\"disposition\": \"allow\", \"rule_ids\": ids, \"reasons\": [\"allowed\"], \"gates\": [%s], \"approver_class\": null}\n\t], [o |\n\t\tblocked > 0\n",
		strings.Join(fastGates, ", "))
	writeFullReduction(&b, s.GateBindings, kinds, facetGate, approver, unapprovable)
	b.WriteString("\t])[0]\n}\n\n")

	if helpers["rel("] {
		b.WriteString(relHelper)
	}
	if helpers["slash("] {
		b.WriteString(slashHelper)
	}
	if helpers["host_part("] {
		b.WriteString(hostHelpers)
	}
	if helpers["mcp_resource("] {
		b.WriteString(mcpHelper)
	}
	for _, rs := range []*ruleSet{sg, sda, mcp, cmd, path, host, env, secret} {
		if len(rs.rules) > 0 {
			fmt.Fprintf(&b, "# %s\n\n", rs.name)
			rs.write(&b)
		}
	}
	return b.String(), nil
}

// union is the Rego union of set expressions.
func union(xs []string) string {
	out := "(" + xs[0] + ")"
	for _, x := range xs[1:] {
		out = "(" + out + " | (" + x + "))"
	}
	return out
}

// writeFullReduction writes the rest of the comprehension that decides a
// request some rule denies or needs approval for, or some facet is not
// allowed: each gate's reason (denied, not allowed, approval required,
// allowed), the disposition, rule ids and reasons (docs/decisions.md),
// as the native evaluator's reduce.
func writeFullReduction(b *strings.Builder, gates []snapshot.GateBinding, kinds []map[string]bool, facetGate map[string]int, approver map[string]string, unapprovable []string) {
	byLevel := map[string][]int{}
	for i, g := range gates {
		byLevel[g.Level] = append(byLevel[g.Level], i)
	}
	facetsOf := make([][]string, len(gates))
	levelFacets := map[string][]string{}
	for _, f := range decision.FacetNames {
		i := facetGate[f]
		facetsOf[i] = append(facetsOf[i], f)
		levelFacets[gates[i].Level] = append(levelFacets[gates[i].Level], f)
	}
	intSet := func(xs []int) string {
		if len(xs) == 0 {
			return "set()"
		}
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = fmt.Sprint(x)
		}
		return "{" + strings.Join(q, ", ") + "}"
	}
	var hardCodes, gateObjs, advisory []string
	for i, g := range gates {
		var parts []string
		if kinds[i]["d"] {
			parts = append(parts, fmt.Sprintf(`["denied" | count({1 | some ["d", _, %d] in hits}) > 0]`, i))
		}
		if len(facetsOf[i]) > 0 {
			parts = append(parts, fmt.Sprintf(`[concat("", ["not_allowed:", f]) | f := sort(na & %s)[0]]`, regoSet(facetsOf[i])))
		}
		if kinds[i]["a"] {
			parts = append(parts, fmt.Sprintf(`["approval_required" | count({1 | some ["a", _, %d] in hits}) > 0]`, i))
		}
		code := `"allowed"`
		if len(parts) > 0 {
			expr := parts[0]
			for _, p := range parts[1:] {
				expr = "array.concat(" + expr + ", " + p + ")"
			}
			code = "array.concat(" + expr + `, ["allowed"])[0]`
		}
		fmt.Fprintf(b, "\t\tc%d := %s\n", i, code)
		gateObjs = append(gateObjs, fmt.Sprintf(`{"gate_id": %s, "level": %s, "decision": object.get({"allowed": "allow"}, c%d, "deny"), "reason_code": c%d, "rule_ids": sort({id | some [_, id, %d] in hits})}`,
			regoString(g.GateID), regoString(g.Level), i, i, i))
		switch g.Level {
		case snapshot.LevelHard:
			hardCodes = append(hardCodes, fmt.Sprintf("c%d", i))
		case snapshot.LevelAdvisory:
			advisory = append(advisory, fmt.Sprintf(`{%s | c%d != "allowed"}`, regoString("advisory:"+g.GateID), i))
		}
	}
	soft, hard, adv := intSet(byLevel[snapshot.LevelSoft]), intSet(byLevel[snapshot.LevelHard]), intSet(byLevel[snapshot.LevelAdvisory])
	fmt.Fprintf(b, "\t\tgs := [%s]\n", strings.Join(gateObjs, ", "))
	fmt.Fprintf(b, "\t\tsa := {id | some [\"a\", id, g] in hits; g in %s}\n", soft)
	fmt.Fprintf(b, "\t\tbad := (count([1 | some c in [%s]; c != \"allowed\"]) + count({1 | some [\"d\", _, g] in hits; g in %s})) + (count(na & %s) + count(sa & %s))\n",
		strings.Join(hardCodes, ", "), soft, regoSet(levelFacets[snapshot.LevelSoft]), regoSet(unapprovable))
	approvers := map[string]string{}
	maps.Copy(approvers, approver)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(approvers); err != nil {
		panic(err)
	}
	approverObj := strings.TrimSpace(buf.String())
	fmt.Fprintf(b, "\t\to := array.concat(array.concat([d |\n\t\t\tbad > 0\n")
	fmt.Fprintf(b, "\t\t\td := {\"disposition\": \"deny\", \"rule_ids\": sort({id | some [t, id, g] in hits; t in {\"d\", \"a\"}; not g in %s}), \"reasons\": sort(%s), \"gates\": gs, \"approver_class\": null}\n",
		adv, union([]string{
			fmt.Sprintf(`{concat("", ["denied:", id]) | some ["d", id, g] in hits; not g in %s}`, adv),
			fmt.Sprintf(`{concat("", ["denied:", id]) | some ["a", id, g] in hits; g in %s}`, hard),
			fmt.Sprintf(`{concat("", ["approval_unavailable:", id]) | some id in sa & %s}`, regoSet(unapprovable)),
			fmt.Sprintf(`{concat("", ["not_allowed:", f]) | some f in na - %s}`, regoSet(levelFacets[snapshot.LevelAdvisory])),
		}))
	fmt.Fprintf(b, "\t\t], [d |\n\t\t\tbad < 1\n\t\t\tcount(sa) > 0\n")
	fmt.Fprintf(b, "\t\t\td := {\"disposition\": \"escalate\", \"rule_ids\": sort(sa), \"reasons\": sort({concat(\"\", [\"approval_required:\", %s[id]]) | some id in sa}), \"gates\": gs, \"approver_class\": %s[sort(sa)[0]]}\n",
		approverObj, approverObj)
	fmt.Fprintf(b, "\t\t]), [d |\n\t\t\tbad < 1\n\t\t\tcount(sa) < 1\n")
	fmt.Fprintf(b, "\t\t\td := {\"disposition\": \"allow\", \"rule_ids\": sort({id | some [t, id, g] in hits; g >= 0; not t in {\"d\", \"a\"}}), \"reasons\": sort(%s), \"gates\": gs, \"approver_class\": null}\n",
		union(append([]string{`{"allowed"}`}, advisory...)))
	b.WriteString("\t\t])[0]\n")
}

// pathRule emits the bodies of a path pattern: absolute patterns test the
// path at abs, relative ones the path relative to the workspace at rel
// (present only for paths in the workspace).
func pathRule(rs *ruleSet, head string, guard []string, p, abs, rel string) {
	if !strings.HasPrefix(p, "/") {
		rs.add(head, guard, guarded(rel, matchBodies(pattern.Path, p, rel, "")))
		return
	}
	rs.add(head, guard, present(abs, matchBodies(pattern.Path, p, abs, "")))
}

// regexPrefix is the literal text every match of the RE2 expression re
// begins with: the literals that follow its start-of-text anchor, up to
// the first anything else ("" when re is not anchored, or starts with no
// case-sensitive literal). Read off the parsed expression, not the
// pattern, so it holds for whatever the expression's grammar was.
func regexPrefix(re string) string {
	x, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return ""
	}
	subs := []*syntax.Regexp{x}
	if x.Op == syntax.OpConcat {
		subs = x.Sub
	}
	if len(subs) == 0 || subs[0].Op != syntax.OpBeginText {
		return ""
	}
	var b strings.Builder
	for _, s := range subs[1:] {
		if s.Op != syntax.OpLiteral || s.Flags&syntax.FoldCase != 0 {
			break
		}
		b.WriteString(string(s.Rune))
	}
	return b.String()
}

// regoSet is a Rego set literal of strings.
func regoSet(xs []string) string {
	if len(xs) == 0 {
		return "set()"
	}
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = regoString(x)
	}
	slices.Sort(q)
	return "{" + strings.Join(q, ", ") + "}"
}
