// Package legacy translates the LionAGI PermissionPolicy — the legacy
// `permissions` of an AgentSpec, a preset name or a {mode, allow, deny,
// escalate} mapping — into a polc declaration whose decisions equal the
// legacy engine's, or refuses, naming the rule whose meaning polc cannot
// reproduce (docs/legacy.md).
//
// Load reads the file as LionAGI does (PyYAML's safe_load, then
// from_dict and the canonical tool names; see load.go and pyyaml.go).
// The legacy engine decides a tool call by fnmatch over a raw string
// built from the arguments: deny beats allow beats escalate,
// tool-specific rules before "*" rules, default deny; in rules mode a
// bash command that its shell-control pattern matches is denied before
// any rule. polc decides on normalized facets (argv tokens,
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
	// Preset is the preset's name as written, when the permissions
	// were one (its rules are not in the file).
	Preset string
	// keys maps a tier and canonical tool to the key the file wrote
	// (("deny", "bash") → "Bash_Tool" at 4:3), for findings' positions.
	keys map[[2]string]Key
	// line and col are the permissions value's position.
	line, col int
}

// Key is a key as the file wrote it, and where.
type Key struct {
	Name      string
	Line, Col int
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

func presetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// aliases are the legacy tool-name aliases (_canonical_tool_name).
var aliases = map[string]string{"bash_tool": "bash", "reader_tool": "reader", "editor_tool": "editor",
	"search_tool": "search", "context_tool": "context"}

// Canonical is a tool name as the legacy engine compares it: lowercase,
// aliases resolved. It lowers ASCII letters only, which is Python's
// str.lower on an ASCII name; Load refuses a tool key that is not ASCII.
func Canonical(tool string) string {
	t := []byte(tool)
	for i, c := range t {
		if c >= 'A' && c <= 'Z' {
			t[i] = c + 'a' - 'A'
		}
	}
	if a, ok := aliases[string(t)]; ok {
		return a
	}
	return string(t)
}

// Kind is what a finding means for the import.
type Kind int

const (
	// Unrepresentable: polc cannot reproduce what LionAGI decides, or
	// cannot be sure how LionAGI reads the file (legacy_unrepresentable).
	Unrepresentable Kind = iota
	// Invalid: the file is not a legacy policy LionAGI would run as
	// written: it fails to load it, ignores the key, or installs no
	// policy at all (invalid_input).
	Invalid
	// Overridden: a rule LionAGI ignores because the same key, or another
	// spelling of the same tool, is assigned after it; the translation
	// ignores it too (a warning).
	Overridden
)

// Error is a finding at a position of the file (Line 0: a preset's rule,
// or the file as a whole) and a path of the permissions value (keys as
// written in it, e.g. ["deny", "Bash_Tool"]; empty for the value itself).
type Error struct {
	Kind      Kind
	Path      []string
	Line, Col int
	Msg       string
}

func (e *Error) Error() string {
	if len(e.Path) == 0 {
		return e.Msg
	}
	return strings.Join(e.Path, ".") + ": " + e.Msg
}

// errAt is an Unrepresentable finding at a tier's key (as written),
// or at the permissions value when key is "".
func (p Policy) errAt(tier, key string, format string, args ...any) *Error {
	e := &Error{Kind: Unrepresentable, Line: p.line, Col: p.col, Msg: fmt.Sprintf(format, args...)}
	if tier == "" {
		return e
	}
	e.Path = []string{tier, key}
	if k, ok := p.keys[[2]string{tier, key}]; ok {
		e.Path[1], e.Line, e.Col = k.Name, k.Line, k.Col
	}
	return e
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
	// Every other mode is rules mode: check compares mode with the two
	// names only.
	possible := map[Decision]bool{}
	var dependent, decider [2]string // the first rule (tier, key) that depends on the arguments; the rule that decides
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
			decider = [2]string{tier.name, key}
			break
		}
		if len(pats) > 0 {
			possible[tier.d] = true
			if dependent[0] == "" {
				dependent, dependentPat = [2]string{tier.name, key}, pats[0]
			}
		}
	}
	if !decided {
		possible[Deny] = true // no matching rule, default deny
	}
	if len(possible) > 1 {
		return "", p.errAt(dependent[0], dependent[1], "pattern %q makes %s depend on the arguments (the legacy engine matches it against a raw string polc does not build)", dependentPat, toolName(tool))
	}
	var d Decision
	for x := range possible {
		d = x
	}
	if tool == "bash" && d != Deny {
		return "", p.errAt(decider[0], decider[1], "bash would be %s, but the legacy engine first denies a command its shell-control pattern matches (;, &&, ||, |, backquote, $(, <, >, newline), quoted or not; polc's shell parser does not count a quoted operator, so the decisions would differ", d)
	}
	return d, nil
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
			errs = append(errs, p.errAt("allow", t, "tool %q is allowed while every other tool escalates; polc's approval of \"*\" would cover it too", t))
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
		if _, found := p.keys[[2]string{tier, t}]; found {
			return p.errAt(tier, t, "tool %q is not a polc action id (letters, digits, '_', '-', '.'; a glob only as the whole \"*\" key)", t)
		}
	}
	return p.errAt("", "", "tool %q is not a polc action id", t)
}
