package legacy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/normalize"
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

// refCanonical is LionAGI's _canonical_tool_name for the ASCII names the
// tests use: Python's str.lower (ASCII letters), then the aliases.
func refCanonical(tool string) string {
	t := strings.ToLower(tool)
	if a, ok := map[string]string{"bash_tool": "bash", "reader_tool": "reader", "editor_tool": "editor",
		"search_tool": "search", "context_tool": "context"}[t]; ok {
		return a
	}
	return t
}

// check is the legacy PermissionPolicy.check, written from its semantics
// (docs/legacy.md) as the reference the translation must agree with.
func check(p Policy, tool string, args []kv) Decision {
	switch p.Mode {
	case "allow_all":
		return Allow
	case "deny_all":
		return Deny
	}
	t := refCanonical(tool)
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
			t := refCanonical(tools[r.IntN(len(tools))])
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
func randomCall(r *rand.Rand) (string, []kv, *normalize.Normalized) {
	tool := tools[r.IntN(len(tools)-1)] // not "*"
	if r.IntN(5) == 0 {
		tool = "unknown_tool"
	}
	var args []kv
	switch refCanonical(tool) {
	case "bash":
		args = []kv{{"command", commands[r.IntN(len(commands))]}}
	case "reader":
		args = []kv{{"path", []string{"a.py", "/etc/x", "x"}[r.IntN(3)]}}
	case "editor":
		args = []kv{{"file_path", "b.py"}, {"content", "x"}}
	default:
		args = []kv{{"action", "go"}, {"q", []string{"x", "git push", "y.py"}[r.IntN(3)]}}
	}
	n := &normalize.Normalized{Principal: "agent:" + []string{"a", "b"}[r.IntN(2)], Tenant: "t", Action: refCanonical(tool), Workspace: "/ws",
		Time: "2026-06-01T00:00:00.000000Z", Paths: []normalize.PathAccess{}, Commands: [][]string{}, Hosts: []string{}, Env: []string{}, Secrets: []string{}}
	if r.IntN(2) == 0 {
		n.Paths = append(n.Paths, normalize.PathAccess{Path: []string{"/ws/a.py", "/etc/shadow", "/"}[r.IntN(3)], Access: []string{"read", "write", "execute"}[r.IntN(3)]})
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
		n.MCP = &normalize.MCPTarget{Server: "github", Tool: "create_issue", Resource: &res}
	}
	return tool, args, n
}

var testEsc = Escalation{Approver: "lead", ExpiresAfter: "1h"}

// compileDecl compiles one translated declaration.
func compileDecl(t *testing.T, decl map[string]any) *decision.Policy {
	t.Helper()
	decl["version"] = "1"
	dir := t.TempDir()
	src, _ := json.Marshal(map[string]any{"policies": map[string]any{"legacy": decl}})
	os.WriteFile(filepath.Join(dir, "p.json"), src, 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.json"})
	if res.Diagnostics.HasErrors() {
		t.Fatalf("the translation does not compile: %v\n%s", res.Diagnostics, src)
	}
	p, err := decision.Compile(res.Snapshots[0])
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

// load reads a permissions file that must load without findings.
func load(t *testing.T, src string) Policy {
	t.Helper()
	p, errs := Load([]byte(src))
	if len(errs) > 0 {
		t.Fatalf("%q: %v", src, errs)
	}
	return p
}

// TestLoad: presets by name (case-insensitive), mappings with the legacy
// keys, an AgentSpec's permissions; what LionAGI would not run as
// written is an Invalid finding that says why, at its position.
func TestLoad(t *testing.T) {
	if p := load(t, "Read_Only\n"); p.Mode != "rules" || len(p.Allow) != 3 || p.Preset != "Read_Only" {
		t.Fatalf("preset: %+v", p)
	}
	if p := load(t, "name: a\npermissions: deny_all\n"); p.Mode != "deny_all" {
		t.Fatalf("AgentSpec: %+v", p)
	}
	for _, c := range []struct{ src, want string }{
		{"inherit\n", `1:1 "inherit" is not a legacy preset`},
		{"strict\n", "1:1 unknown permissions preset \"strict\" (valid: allow_all"},
		{"mode: rules\nask: {}\n", "2:1 ask: the legacy engine has no ask map"},
		{"mode: rules\nallowed: {}\n", "2:1 allowed: unknown key"},
		{"deny:\n  bash: rm\n", "2:9 deny.bash: want a list of patterns, got str"},
		{"deny:\n  bash: [1]\n", `2:10 deny.bash.0: want a string pattern, got int (PyYAML, YAML 1.1, reads the plain "1" as one`},
		{"mode: 3\n", "1:7 mode: want a string, got int"},
		{"~\n", "1:1 NoneType (PyYAML, YAML 1.1, reads the plain \"~\" as one; quote it for a string): LionAGI installs no permission policy"},
		{"", "1:1 null (nothing written): LionAGI installs no permission policy"},
		{"allow: []\n", "1:8 allow: want a map of tool to patterns, got list"},
		{"3.5\n", "1:1 want a preset name or a mapping, got float"},
		// YAML 1.1: LionAGI lowercases every tool key, and `on` is a bool.
		{"allow:\n  on: ['*']\n", "2:3 allow.on: tool key \"on\" is not a string: PyYAML (YAML 1.1) reads the plain on as a bool"},
		{"allow:\n  1: ['*']\n", "2:3 allow.1: tool key \"1\" is not a string: PyYAML (YAML 1.1) reads the plain 1 as an int"},
		{"allow:\n  İ: ['*']\n", "2:3 allow.İ: tool key \"İ\" is not ASCII"},
		{"allow: {reader: ['*']}\nmodel: x\nx: 2001-13-01\n", "3:4 PyYAML reads the plain \"2001-13-01\" as a timestamp and fails: month must be in 1..12, so LionAGI cannot load the file"},
		// An AgentSpec without permissions gets no policy at all.
		{"{}\n", "1:1 no permissions"},
		{"role: implementer\nmodel: x\n", "1:1 no permissions: the file has no permissions key"},
		{"name: a\npermissions:\n", "2:1 permissions: null (nothing written): LionAGI installs no permission policy"},
		{"role: implementer\nallow: {reader: ['*']}\n", `1:1 role: "role" is an AgentSpec key and "allow" a permissions key`},
		{"a: b\n---\nc: d\n", "2:0 a second YAML document"},
		{"mode: rules\n  bad: [\n", "2:0 mapping values are not allowed in this context"},
		{"allow: {reader: ['*'], x: &a y}\n", "1:27 an anchor or an alias"},
		{"allow: {reader: [! '*']}\n", "1:18 an explicit tag"},
		{"allow:\n  reader: ['*']\n  <<: {bash: ['*']}\n", "3:3 a merge key"},
		{"allow:\n\treader: ['*']\n", "2:1 a tab"},
		{"allow: {[a]: b}\n", "1:9 a list as a key: PyYAML cannot make it a dict key"},
		{"x: 0x_\n", "1:4 PyYAML reads the plain \"0x_\" as an int with no digits"},
		{"x: \"a\u2028b\"\n", "1:6 U+2028"},
		{"x: \x7f\n", "1:4 PyYAML refuses the character U+007F"},
		{"x: \xff\n", "1:4 not UTF-8"},
	} {
		_, errs := Load([]byte(c.src))
		var got []string
		for _, e := range errs {
			got = append(got, fmt.Sprintf("%d:%d %v", e.Line, e.Col, e))
		}
		if len(errs) == 0 || !strings.HasPrefix(got[0], c.want) {
			t.Errorf("%q: %q\nwant %q", c.src, got, c.want)
		}
	}
}

// TestLoadKeepsTheKeyLionAGIKeeps: of two spellings of one tool, the
// later in the mapping wins (not a merge of both); a key written twice
// holds the place of its first writing, with its last value; each
// ignored key is an Overridden warning at it.
func TestLoadKeepsTheKeyLionAGIKeeps(t *testing.T) {
	for _, c := range []struct {
		src     string
		want    []string
		ignored []string // positions of the warnings
	}{
		{"deny: {Bash_Tool: ['rm *'], bash: ['sudo *']}\n", []string{"sudo *"}, []string{"1:8"}},
		{"deny: {bash: ['sudo *'], Bash_Tool: ['rm *']}\n", []string{"rm *"}, []string{"1:8"}},
		// bash is first written before bash_tool, so bash_tool is
		// the later key, whatever bash's second writing says.
		{"deny:\n  bash: ['a']\n  bash_tool: ['b']\n  bash: ['c']\n", []string{"b"}, []string{"2:3", "4:3"}},
		{"deny: {bash: ['a']}\ndeny: {bash: ['b']}\n", []string{"b"}, []string{"1:1"}},
		{`{"deny": {"BASH": ["a"], "bash": ["b"]}, "deny": {"bash": []}}`, []string{}, []string{"1:2"}},
	} {
		p, errs := Load([]byte(c.src))
		var warned []string
		for _, e := range errs {
			if e.Kind != Overridden {
				t.Fatalf("%q: %v", c.src, e)
			}
			warned = append(warned, fmt.Sprintf("%d:%d", e.Line, e.Col))
		}
		if got := p.Deny["bash"]; !slices.Equal(got, c.want) || got == nil || !slices.Equal(warned, c.ignored) {
			t.Errorf("%q: deny.bash %q, warnings at %v; want %q at %v", c.src, got, warned, c.want, c.ignored)
		}
	}
}
