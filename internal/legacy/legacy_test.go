package legacy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
)

// kv is one argument, in the order a Python dict keeps.
type kv struct {
	k string
	v any
}

// shellControl is the legacy _SHELL_CONTROL pattern.
var shellControl = regexp.MustCompile("(;|&&|\\|\\||\\||`|\\$\\(|[<>]|\n)")

// fnmatch is Python's fnmatch.fnmatch on POSIX: the pattern translated as
// fnmatch.translate does ((?s:…)\Z), whole string.
func fnmatch(text, pat string) bool {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		switch c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(pat) && pat[j] == '!' {
				j++
			}
			if j < len(pat) && pat[j] == ']' {
				j++
			}
			for j < len(pat) && pat[j] != ']' {
				j++
			}
			if j >= len(pat) {
				b.WriteString(`\[`)
				continue
			}
			stuff := pat[i+1 : j]
			stuff = strings.ReplaceAll(stuff, `\`, `\\`)
			if strings.HasPrefix(stuff, "!") {
				stuff = "^" + stuff[1:]
			} else if strings.HasPrefix(stuff, "^") {
				stuff = `\` + stuff
			}
			b.WriteString("[" + stuff + "]")
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`\z`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return false
	}
	return re.MatchString(text)
}

// check is the legacy PermissionPolicy.check, written from the notes
// (seed/adr0087-notes.md §2.4-2.6) as the reference the translation must
// agree with.
func check(p Policy, tool string, args []kv) Decision {
	switch p.Mode {
	case "allow_all":
		return Allow
	case "deny_all":
		return Deny
	}
	t := Canonical(tool)
	get := func(k string) string {
		for _, a := range args {
			if a.k == k {
				return fmt.Sprint(a.v)
			}
		}
		return ""
	}
	var text string
	switch t {
	case "bash":
		text = get("command")
		if shellControl.MatchString(text) {
			return Deny
		}
	case "editor":
		text = get("file_path")
	case "reader":
		text = get("path")
	case "search":
		text = get("pattern") + " " + get("path")
	default:
		vals := make([]string, len(args))
		for i, a := range args {
			vals[i] = fmt.Sprint(a.v)
		}
		text = get("action") + " " + strings.Join(vals, " ")
	}
	matches := func(pat string) bool {
		return pat == "*" || fnmatch(text, pat) || fnmatch(strings.ToLower(text), strings.ToLower(pat))
	}
	for _, tier := range []struct {
		m map[string][]string
		d Decision
	}{{p.Deny, Deny}, {p.Allow, Allow}, {p.Escalate, Escalate}} {
		for _, pat := range append(append([]string{}, tier.m[t]...), tier.m["*"]...) {
			if matches(pat) {
				return tier.d
			}
		}
	}
	return Deny
}

var (
	tools    = []string{"bash", "reader", "editor", "search", "context", "web", "mcp", "Reader_Tool", "BASH_TOOL", "*"}
	patterns = []string{"*", "*", "**", "rm *", "git *", "*.py", "x", "[!a]*", "sudo *"}
	commands = []string{"ls", "rm -rf x", "git push", "echo '>'", "a; b", "cat x | wc", "sudo ls", "RM x", " rm x", "x"}
)

func randomPolicy(r *rand.Rand) Policy {
	p := Policy{Mode: []string{"rules", "rules", "rules", "allow_all", "deny_all", "RULES"}[r.IntN(6)]}
	tiers := func() map[string][]string {
		m := map[string][]string{}
		for range r.IntN(3) {
			t := Canonical(tools[r.IntN(len(tools))])
			for range 1 + r.IntN(2) {
				m[t] = append(m[t], patterns[r.IntN(len(patterns))])
			}
		}
		return m
	}
	p.Allow, p.Deny, p.Escalate = tiers(), tiers(), tiers()
	return p
}

// randomCall draws a tool call: the legacy arguments and the request polc
// decides (action canonical; facets random, the translation allows them
// all).
func randomCall(r *rand.Rand) (string, []kv, *executor.Normalized) {
	tool := tools[r.IntN(len(tools)-1)] // not "*"
	if r.IntN(5) == 0 {
		tool = "unknown_tool"
	}
	var args []kv
	switch Canonical(tool) {
	case "bash":
		args = []kv{{"command", commands[r.IntN(len(commands))]}}
	case "reader":
		args = []kv{{"path", []string{"a.py", "/etc/x", "x"}[r.IntN(3)]}}
	case "editor":
		args = []kv{{"file_path", "b.py"}, {"content", "x"}}
	default:
		args = []kv{{"action", "go"}, {"q", []string{"x", "git push", "y.py"}[r.IntN(3)]}}
	}
	n := &executor.Normalized{Principal: "agent:" + []string{"a", "b"}[r.IntN(2)], Tenant: "t", Action: Canonical(tool), Workspace: "/ws",
		Time: "2026-06-01T00:00:00.000000Z", Paths: []executor.PathAccess{}, Commands: [][]string{}, Hosts: []string{}, Env: []string{}, Secrets: []string{}}
	if r.IntN(2) == 0 {
		n.Paths = append(n.Paths, executor.PathAccess{Path: []string{"/ws/a.py", "/etc/shadow", "/"}[r.IntN(3)], Access: []string{"read", "write", "execute"}[r.IntN(3)]})
	}
	if r.IntN(2) == 0 {
		n.Commands = append(n.Commands, strings.Fields(commands[r.IntN(len(commands))]+" z"))
		n.ShellControl = r.IntN(2) == 0
	}
	if r.IntN(3) == 0 {
		n.Hosts = append(n.Hosts, "example.com:443")
	}
	if r.IntN(3) == 0 {
		n.Env = append(n.Env, "HOME")
		n.Secrets = append(n.Secrets, "prod/db")
	}
	if r.IntN(4) == 0 {
		res := "repo/x"
		n.MCP = &executor.MCPTarget{Server: "github", Tool: "create_issue", Resource: &res}
	}
	return tool, args, n
}

var testEsc = Escalation{Approver: "lead", ExpiresAfter: "1h"}

// compileDecl compiles one translated declaration.
func compileDecl(t *testing.T, decl map[string]any) *executor.Policy {
	t.Helper()
	decl["version"] = "1"
	dir := t.TempDir()
	src, _ := json.Marshal(map[string]any{"policies": map[string]any{"legacy": decl}})
	os.WriteFile(filepath.Join(dir, "p.json"), src, 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.json"})
	if res.Diagnostics.HasErrors() {
		t.Fatalf("the translation does not compile: %v\n%s", res.Diagnostics, src)
	}
	p, err := executor.Compile(res.Snapshots[0])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTranslationDecidesAsTheLegacyEngine: for random legacy policies
// (and the presets), every translation the package makes gives, on random
// tool calls, polc's disposition equal to the legacy engine's decision
// (the reference check above); what it refuses, it names.
func TestTranslationDecidesAsTheLegacyEngine(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	policies := []Policy{Presets["allow_all"], Presets["deny_all"], Presets["read_only"], Presets["safe"]}
	for range 400 {
		policies = append(policies, randomPolicy(r))
	}
	translated, refused, calls := 0, 0, 0
	seen := map[Decision]int{}
	for i, p := range policies {
		decl, errs := Translate(p, testEsc)
		if len(errs) > 0 {
			refused++
			for _, err := range errs {
				if err.Error() == "" {
					t.Fatal("a refusal without a reason")
				}
			}
			continue
		}
		translated++
		pol := compileDecl(t, decl)
		for range 60 {
			tool, args, req := randomCall(r)
			want := check(p, tool, args)
			got, _ := pol.Evaluate(req)
			calls++
			seen[want]++
			if string(want) != got.Disposition {
				b, _ := json.Marshal(decl)
				rb, _ := json.Marshal(req)
				t.Fatalf("policy %d %+v\ntranslation %s\ncall %s %v: legacy %s, polc %s %v\nrequest %s", i, p, b, tool, args, want, got.Disposition, got.Reasons, rb)
			}
		}
	}
	t.Logf("%d translated, %d refused, %d calls agree (%v)", translated, refused, calls, seen)
	if translated < 100 || refused < 50 || seen[Allow] == 0 || seen[Deny] == 0 || seen[Escalate] == 0 {
		t.Fatalf("too little exercised: %d translated, %d refused, decisions %v", translated, refused, seen)
	}
}

// TestPresets: allow_all, deny_all and read_only translate; safe is
// refused for bash (its shell-control rule and its argument patterns).
func TestPresets(t *testing.T) {
	for _, name := range []string{"allow_all", "deny_all", "read_only"} {
		if _, errs := Translate(Presets[name], testEsc); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
	_, errs := Translate(Presets["safe"], testEsc)
	var le *Error
	if len(errs) != 1 || !errors.As(errs[0], &le) || strings.Join(le.Path, ".") != "deny.bash" || !strings.Contains(le.Msg, `pattern "rm *"`) {
		t.Fatalf("safe: %v", errs)
	}
}

// TestParse: presets by name (case-insensitive), mappings with the legacy
// keys; "inherit", unknown presets, "ask", unknown keys and malformed
// pattern lists are errors that say why.
func TestParse(t *testing.T) {
	p, err := Parse("Read_Only")
	if err != nil || p.Mode != "rules" || len(p.Allow) != 3 {
		t.Fatalf("preset: %+v %v", p, err)
	}
	p, err = Parse(map[string]any{"mode": "rules", "deny": map[string]any{"Bash_Tool": []any{"rm *"}, "bash": []any{"sudo *"}},
		"escalate": map[string]any{"bash": []any{"*"}}})
	if err != nil || len(p.Deny["bash"]) != 2 || p.Deny["bash"][0] != "rm *" {
		t.Fatalf("aliases merge: %+v %v", p, err)
	}
	// bash escalates unless a deny pattern matches: refused, at the key
	// as written.
	_, errs := Translate(p, testEsc)
	var le *Error
	if len(errs) != 1 || !errors.As(errs[0], &le) || strings.Join(le.Path, ".") != "deny.Bash_Tool" {
		t.Fatalf("refusal path: %v", errs)
	}
	if p, err := Parse(map[string]any{}); err != nil || p.Mode != "allow_all" {
		t.Fatalf("from_dict's default mode: %+v %v", p, err)
	}
	for in, want := range map[string]any{
		"extends":                   "inherit",
		"valid: allow_all":          "strict",
		"ask map":                   map[string]any{"ask": map[string]any{}},
		"unknown key":               map[string]any{"allowed": map[string]any{}},
		"want a list of patterns":   map[string]any{"deny": map[string]any{"bash": "rm"}},
		"want a string pattern":     map[string]any{"deny": map[string]any{"bash": []any{1}}},
		"want a string, got":        map[string]any{"mode": 3},
		"no policy hook":            nil,
		"want a map of tool":        map[string]any{"allow": []any{}},
		"want a preset name or a m": 3.5,
	} {
		if _, err := Parse(want); err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("%v: %v (want %q)", want, err, in)
		}
	}
}
