// Package legacy translates the LionAGI PermissionPolicy — the legacy
// `permissions` of an AgentSpec, a preset name or a {mode, allow, deny,
// escalate} mapping — into a polc declaration whose decisions equal the
// legacy engine's, or refuses, naming the rule whose meaning polc cannot
// reproduce (DESIGN §2).
//
// The legacy engine (seed/adr0087-notes.md §2) decides a tool call by
// fnmatch over a raw string built from the arguments: deny beats allow
// beats escalate, tool-specific rules before "*" rules, default deny; in
// rules mode a bash command that its shell-control pattern matches is
// denied before any rule. polc decides on normalized facets (argv tokens,
// workspace-anchored paths, a shell parser), so only decisions that do
// not depend on the arguments translate exactly: a tool every call of
// which is allowed, escalated or denied. A tool whose decision depends on
// its arguments — a pattern other than "*" that can change the outcome,
// or bash when it is not always denied (the shell-control pattern and
// polc's parser disagree on quoted operators) — is refused.
//
// Equality holds for requests whose action is the canonical tool name
// (lowercase, aliases resolved: the runtime's descriptors carry the
// aliases) and that polc can normalize; polc's normalizer refuses more
// inputs (path escapes, commands that do not parse) than the legacy
// engine did.
package legacy

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Policy is a legacy PermissionPolicy, tool names canonical.
type Policy struct {
	Mode                  string
	Allow, Deny, Escalate map[string][]string
	// keys maps a tier and canonical tool to the key the input wrote
	// ("deny", "bash") → "Bash_Tool"), for errors' paths.
	keys map[[2]string]string
}

// Presets are the legacy presets by name (exact, from _resolve_permissions).
var Presets = map[string]Policy{
	"allow_all": {Mode: "allow_all"},
	"deny_all":  {Mode: "deny_all"},
	"read_only": {Mode: "rules",
		Allow: map[string][]string{"reader": {"*"}, "search": {"*"}, "context": {"*"}},
		Deny:  map[string][]string{"editor": {"*"}, "bash": {"*"}}},
	"safe": {Mode: "rules",
		Allow:    map[string][]string{"reader": {"*"}, "editor": {"*"}, "search": {"*"}, "context": {"*"}},
		Deny:     map[string][]string{"bash": {"rm *", "sudo *", "chmod *", "kill *", "mkfs *"}},
		Escalate: map[string][]string{"bash": {"*"}}},
}

// aliases are the legacy tool-name aliases (_canonical_tool_name).
var aliases = map[string]string{"bash_tool": "bash", "reader_tool": "reader", "editor_tool": "editor",
	"search_tool": "search", "context_tool": "context"}

// Canonical is a tool name as the legacy engine compares it: lowercase,
// aliases resolved.
func Canonical(tool string) string {
	t := strings.ToLower(tool)
	if a, ok := aliases[t]; ok {
		return a
	}
	return t
}

// Parse reads a permissions value as decoded from JSON or YAML: a preset
// name (case-insensitive, as the legacy lookup) or a mapping with the keys
// mode, allow, deny and escalate, each map of tool → list of patterns.
// The legacy engine ignored any other key ("ask" included) and crashed on
// a pattern list that is not a list of strings; both are errors here.
func Parse(v any) (Policy, error) {
	switch v := v.(type) {
	case string:
		name := strings.ToLower(v)
		if name == "inherit" {
			return Policy{}, errAt(nil, `"inherit" is not a legacy preset (the legacy engine refused it too): in polc a policy inherits with extends: "<parent>" and leaves unset what it does not change`)
		}
		p, ok := Presets[name]
		if !ok {
			names := make([]string, 0, len(Presets))
			for n := range Presets {
				names = append(names, n)
			}
			sort.Strings(names)
			return Policy{}, errAt(nil, "unknown permissions preset %q (valid: %s)", v, strings.Join(names, ", "))
		}
		return p, nil
	case map[string]any:
		p := Policy{Mode: "allow_all", keys: map[[2]string]string{}} // from_dict's default
		for k, val := range v {
			switch k {
			case "mode":
				s, ok := val.(string)
				if !ok {
					return Policy{}, errAt([]string{"mode"}, "want a string, got %T", val)
				}
				p.Mode = s
			case "allow", "deny", "escalate":
				m, err := rules(k, val, p.keys)
				if err != nil {
					return Policy{}, err
				}
				switch k {
				case "allow":
					p.Allow = m
				case "deny":
					p.Deny = m
				default:
					p.Escalate = m
				}
			case "ask":
				return Policy{}, errAt([]string{k}, "the legacy engine has no ask map and ignored this key; escalate is its equivalent — rename it or remove it")
			default:
				return Policy{}, errAt([]string{k}, "unknown key (the legacy engine ignored it): remove it")
			}
		}
		return p, nil
	case nil:
		return Policy{}, errAt(nil, "null means no policy hook (everything allowed) in the legacy engine; write allow_all to say so")
	}
	return Policy{}, errAt(nil, "want a preset name or a mapping, got %T", v)
}

func rules(key string, v any, keys map[[2]string]string) (map[string][]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errAt([]string{key}, "want a map of tool to patterns, got %T", v)
	}
	out := map[string][]string{}
	tools := make([]string, 0, len(m))
	for tool := range m {
		tools = append(tools, tool)
	}
	sort.Strings(tools) // keys that canonicalize alike merge in a fixed order
	for _, tool := range tools {
		pats := m[tool]
		list, ok := pats.([]any)
		if !ok {
			return nil, errAt([]string{key, tool}, "want a list of patterns, got %T (the legacy engine fails on it)", pats)
		}
		t := Canonical(tool)
		if keys != nil {
			if _, ok := keys[[2]string{key, t}]; !ok {
				keys[[2]string{key, t}] = tool
			}
		}
		for i, p := range list {
			s, ok := p.(string)
			if !ok {
				return nil, errAt([]string{key, tool, strconv.Itoa(i)}, "want a string pattern, got %T", p)
			}
			out[t] = append(out[t], s) // keys that canonicalize alike merge, as in __post_init__
		}
		if _, ok := out[t]; !ok {
			out[t] = []string{}
		}
	}
	return out, nil
}

// Error is a refusal or a malformed input, at a path of the permissions
// value (keys as written in it, e.g. ["deny", "Bash_Tool"]; empty for the
// value itself).
type Error struct {
	Path []string
	Msg  string
}

func (e *Error) Error() string {
	if len(e.Path) == 0 {
		return e.Msg
	}
	return strings.Join(e.Path, ".") + ": " + e.Msg
}

func errAt(path []string, format string, args ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Decision is what the legacy engine answers for every call of a tool.
type Decision string

// Decisions, as PermissionDecision.behavior.
const (
	Allow    Decision = "allow"
	Deny     Decision = "deny"
	Escalate Decision = "escalate"
)

// matchesAll reports whether an fnmatch pattern matches every string: "*"
// and runs of "*" only (fnmatch's * matches any run, empty included).
func matchesAll(p string) bool { return p != "" && strings.Trim(p, "*") == "" }

// Decide returns the decision the legacy engine gives every call of tool
// (canonical; "" for a tool no key names), or an error naming the first
// rule that makes it depend on the arguments.
func (p Policy) Decide(tool string) (Decision, error) {
	switch p.Mode {
	case "allow_all":
		return Allow, nil
	case "deny_all":
		return Deny, nil
	}
	// Every other mode is rules mode (ADR-0086).
	possible := map[Decision]bool{}
	var dependent, decider []string // the first rule that depends on the arguments; the rule that decides
	var dependentPat string
	decided := false
	for _, tier := range []struct {
		name string
		m    map[string][]string
		d    Decision
	}{{"deny", p.Deny, Deny}, {"allow", p.Allow, Allow}, {"escalate", p.Escalate, Escalate}} {
		var pats []string
		if tool != "" {
			pats = append(pats, tier.m[tool]...)
		}
		pats = append(pats, tier.m["*"]...)
		key := tool
		if tool == "" || len(tier.m[tool]) == 0 {
			key = "*"
		}
		if slices.ContainsFunc(pats, matchesAll) {
			possible[tier.d] = true
			decided = true
			decider = p.path(tier.name, key)
			break
		}
		if len(pats) > 0 {
			possible[tier.d] = true
			if dependent == nil {
				dependent, dependentPat = p.path(tier.name, key), pats[0]
			}
		}
	}
	if !decided {
		possible[Deny] = true // no matching rule, default deny
	}
	if len(possible) > 1 {
		return "", errAt(dependent, "pattern %q makes %s depend on the arguments (the legacy engine matches it against a raw string polc does not build)", dependentPat, toolName(tool))
	}
	var d Decision
	for x := range possible {
		d = x
	}
	if tool == "bash" && d != Deny {
		return "", errAt(decider, "bash would be %s, but the legacy engine first denies a command its shell-control pattern matches (;, &&, ||, |, backquote, $(, <, >, newline), quoted or not; polc's shell parser does not count a quoted operator, so the decisions would differ", d)
	}
	return d, nil
}

// path is the input's path of a tier's key (as written).
func (p Policy) path(tier, key string) []string {
	if k, ok := p.keys[[2]string{tier, key}]; ok {
		return []string{tier, k}
	}
	return []string{tier, key}
}

func toolName(t string) string {
	if t == "" {
		return "every tool no key names"
	}
	return "tool " + strconv.Quote(t)
}

// Escalation is what a polc approval requirement needs and a legacy
// escalation did not say: who approves, and how long an approval stays
// valid (a Go duration, e.g. "1h").
type Escalation struct {
	Approver     string
	ExpiresAfter string
}

// Translate returns the polc declaration (JSON-shaped, for the policy
// named by the caller) that decides as p, or an error for each tool whose
// decision polc cannot reproduce, sorted. Escalated tools become approval
// requirements as esc says.
func Translate(p Policy, esc Escalation) (map[string]any, []error) {
	tools := map[string]bool{"bash": true}
	for _, m := range []map[string][]string{p.Allow, p.Deny, p.Escalate} {
		for t := range m {
			if t != "*" {
				tools[t] = true
			}
		}
	}
	names := make([]string, 0, len(tools))
	for t := range tools {
		names = append(names, t)
	}
	sort.Strings(names)
	var errs []error
	other, err := p.Decide("")
	if err != nil {
		errs = append(errs, err)
	}
	allow, deny := []string{}, []string{}
	approve := []any{}
	for _, t := range names {
		if err := p.validTool(t); err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := p.Decide(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case d == other:
			// The "*" decision covers it.
		case d == Deny:
			deny = append(deny, t)
		case d == Allow && other == Escalate:
			errs = append(errs, errAt(p.path("allow", t), "tool %q is allowed while every other tool escalates; polc's approval of \"*\" would cover it too", t))
		case d == Allow:
			allow = append(allow, t)
		case d == Escalate:
			allow = append(allow, t)
			approve = append(approve, map[string]any{"pattern": t, "approver": esc.Approver, "expires_after": esc.ExpiresAfter})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	switch other {
	case Allow:
		allow = append([]string{"*"}, allow...)
	case Escalate:
		allow = append([]string{"*"}, allow...)
		approve = append(approve, map[string]any{"pattern": "*", "approver": esc.Approver, "expires_after": esc.ExpiresAfter})
	}
	decl := everything()
	decl["actions"] = map[string]any{"allow": allow, "deny": deny, "approve": approve}
	return decl, nil
}

// everything is a declaration that allows every facet of every request;
// the translation's actions section then decides alone, as the legacy
// engine decided by tool (its patterns over raw strings are refused).
func everything() map[string]any {
	return map[string]any{
		"principals":  []string{"*"},
		"tenants":     []string{"*"},
		"filesystem":  map[string]any{"read": []string{"/**"}, "write": []string{"/**"}, "execute": []string{"/**"}},
		"network":     map[string]any{"mode": "allow"},
		"subprocess":  map[string]any{"mode": "allow", "shell": "allow"},
		"mcp":         map[string]any{"servers": []any{map[string]any{"server": "*", "tools": []string{"*"}, "resources": []string{"**"}}}},
		"environment": map[string]any{"read": []string{"*"}, "inject": []string{"*"}},
		"secrets":     []any{map[string]any{"namespace": "**", "exposure": "inject"}},
	}
}

// validTool refuses a tool name that is not a polc action id.
func (p Policy) validTool(t string) error {
	ok := t != ""
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			ok = false
		}
	}
	if ok {
		return nil
	}
	for _, tier := range []string{"deny", "allow", "escalate"} {
		if k, found := p.keys[[2]string{tier, t}]; found {
			return errAt([]string{tier, k}, "tool %q is not a polc action id (letters, digits, '_', '-', '.'; a glob only as the whole \"*\" key)", t)
		}
	}
	return errAt(nil, "tool %q is not a polc action id", t)
}
