package polccli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueyaml "cuelang.org/go/encoding/yaml"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/strictjson"
)

const scenarioHead = "snapshot: out/snapshots/agent.json\nprofile: minimal\nworkspace: ws\nprincipal: agent:ci\n"

func addScenarioSeeds(f *testing.F) {
	if ex, err := os.ReadFile(filepath.Join("..", "..", "examples", "scenario.yaml")); err == nil {
		f.Add(false, ex)
	}
	for _, s := range []string{
		scenarioHead + "actions:\n  - {id: a, action: bash, arguments: {command: ls}}\n",
		scenarioHead + "actions:\n  - {id: a, action: bash, argumentz: {command: ls}}\n",
		scenarioHead + "actions:\n  - {id: a, action: bash}\nid: x\n",
		scenarioHead + "actions:\n  - {ID: a, action: bash}\n",
		scenarioHead + "Profile: certifiable\nactions:\n  - {id: a, action: bash}\n",
		scenarioHead + "tenant:\nactions:\n  - {id: a, action: bash, timeout: null}\n",
		scenarioHead + "actions:\n  - {id: a, action: bash, timeout: 3}\n",
		scenarioHead + "actions:\n  - {id: a, action: bash\n",
		scenarioHead + "actions:\n  - &a {id: a, action: bash}\n  - *a\n",
		scenarioHead + "profile: governed\nactions: []\n",
		scenarioHead + "actions:\n  - {id: a, action: bash, arguments: {command: \"cat \xff\"}}\n", // not UTF-8
		scenarioHead + "actions:\n  - {id: a, action: bash, arguments: {command: \"cat $'\\\\xff'\"}}\n",
		scenarioHead + "mcp_servers:\n  up: {command: [srv, --x], env: {TOKEN: t}}\nactions:\n  - {id: a, action: \"mcp:up/echo\", arguments: {arguments: {text: hi}}}\n",
		scenarioHead + "mcp_servers:\n  up_2-x: {command: [./srv]}\nactions:\n  - {id: a, action: mcp, arguments: {server: up_2-x, tool: t}}\n",
		scenarioHead + "mcp_servers:\n  up: {command: [srv], cwd: /}\nactions:\n  - {id: a, action: \"mcp:up/echo\"}\n",
		scenarioHead + "mcp_servers:\n  a__b: {command: []}\nactions:\n  - {id: a, action: \"mcp:down/echo\"}\n",
		scenarioHead + "mcp_servers:\n  up: {command: [\"a\\0b\"], env: {\"1\": 2, B: null}}\nactions:\n  - {id: a, action: bash}\n",
	} {
		f.Add(false, []byte(s))
	}
	f.Add(true, []byte(`{"snapshot":"s","profile":"minimal","workspace":"ws","principal":"p","tenant":"t","actions":[{"id":"a","action":"bash","arguments":{"command":"ls"},"timeout":"1s"}]}`))
	f.Add(true, []byte(`{"snapshot":"s","profile":"minimal","workspace":"ws","principal":"p","actions":[{"id":"a","action":"bash","Arguments":{}}]}`))
	f.Add(true, []byte("{\"snapshot\":\"s\",\"profile\":\"minimal\",\"workspace\":\"ws\",\"principal\":\"p\xc3\",\"actions\":[]}")) // not UTF-8
}

func writeScenario(t *testing.T, isJSON bool, data []byte) string {
	name := "scenario.yaml"
	if isJSON {
		name = "scenario.json"
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// positioned is how polc run prints a positioned error: file:line:col, or
// file:line where the YAML decoder gives no column.
var positioned = regexp.MustCompile(`^scenario\.(yaml|json):[1-9][0-9]*(:[1-9][0-9]*)?: invalid_input: `)

// FuzzLoadScenario: loadScenario never panics and every error it returns
// says something. An unknown field is a *posError, printed the way polc run
// prints it ("file:line:col: invalid_input: unknown field ..."), and its
// position is where the input names that field, so the user is sent to the
// right place.
func FuzzLoadScenario(f *testing.F) {
	addScenarioSeeds(f)
	f.Fuzz(func(t *testing.T, isJSON bool, data []byte) {
		path := writeScenario(t, isJSON, data)
		_, err := loadScenario(path, true)
		if err == nil {
			return
		}
		if strings.TrimSpace(err.Error()) == "" {
			t.Fatalf("%q: empty error", data)
		}
		var pe *posError
		if !errors.As(err, &pe) {
			if strings.HasPrefix(err.Error(), "unknown field") {
				t.Fatalf("%q: unknown field without a position: %v", data, err)
			}
			return
		}
		var d diag.List
		d.Add(diag.Pos{File: filepath.Base(path), Line: pe.line, Col: pe.col}, diag.CodeInvalidInput, "%v", err)
		var out bytes.Buffer
		if err := diag.Print(&out, d, diag.FormatText); err != nil {
			t.Fatal(err)
		}
		if !positioned.Match(out.Bytes()) {
			t.Fatalf("%q: positioned error printed as %q", data, out.String())
		}
		name, ok := strings.CutPrefix(pe.msg, "unknown field ")
		if !ok {
			return
		}
		name, uerr := strconv.Unquote(name)
		if uerr != nil {
			t.Fatalf("%q: %v: name not quoted", data, err)
		}
		if !unknownFieldAt(t, path, data, name, pe.line, pe.col) {
			t.Fatalf("%q: %v at %d:%d, where no undeclared field %q is", data, err, pe.line, pe.col, name)
		}
	})
}

// unknownFieldAt reports whether the scenario in data has a field named
// name at line:col that the scenario format does not declare there.
func unknownFieldAt(t *testing.T, path string, data []byte, name string, line, col int) bool {
	file, err := cueyaml.Extract(path, data)
	if err != nil {
		t.Fatalf("%q: an unknown field reported, but the input does not extract: %v", data, err)
	}
	top := strictjson.Fields(reflect.TypeFor[Scenario]())
	action := strictjson.Fields(reflect.TypeFor[ScenarioAction]())
	declared := func(sel []cue.Selector) bool {
		label := func(s cue.Selector) string {
			if s.LabelType() == cue.StringLabel {
				return s.Unquoted()
			}
			return s.String()
		}
		switch {
		case len(sel) == 1:
			return slices.Contains(top, label(sel[0]))
		case label(sel[0]) != "actions" || sel[1].Type() != cue.IndexLabel:
			return false
		case len(sel) == 3:
			return slices.Contains(action, label(sel[2]))
		}
		return label(sel[2]) == "arguments" // free-form below
	}
	found := false
	cuecontext.New().BuildFile(file).Walk(func(x cue.Value) bool {
		sel := x.Path().Selectors()
		if len(sel) == 0 || found {
			return !found
		}
		last := sel[len(sel)-1]
		if last.LabelType() == cue.StringLabel && last.Unquoted() == name && !declared(sel) &&
			x.Pos().Line() == line && x.Pos().Column() == col {
			found = true
		}
		return !found
	}, nil)
	return found
}

// FuzzLoadScenarioMembers: a scenario loadScenario accepts names only the
// declared members, spelled exactly (encoding/json, which it decodes with,
// matches names case-insensitively), and none of them is null (which
// encoding/json would silently leave as the zero value), at the top level
// and in every action. Unknown fields are errors, never a silent default.
func FuzzLoadScenarioMembers(f *testing.F) {
	addScenarioSeeds(f)
	top := strictjson.Fields(reflect.TypeFor[Scenario]())
	action := strictjson.Fields(reflect.TypeFor[ScenarioAction]())
	f.Fuzz(func(t *testing.T, isJSON bool, data []byte) {
		path := writeScenario(t, isJSON, data)
		if _, err := loadScenario(path, true); err != nil {
			return
		}
		file, err := cueyaml.Extract(path, data)
		if err != nil {
			t.Fatalf("%q accepted, but does not extract: %v", data, err)
		}
		raw, err := cuecontext.New().BuildFile(file).MarshalJSON()
		if err != nil {
			t.Fatalf("%q accepted, but does not encode: %v", data, err)
		}
		var s struct {
			Actions []map[string]json.RawMessage `json:"actions"`
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil || json.Unmarshal(raw, &s) != nil {
			t.Fatalf("%q accepted, but its JSON %s is not a scenario", data, raw)
		}
		check := func(where string, m map[string]json.RawMessage, declared []string) {
			for k, v := range m {
				if !slices.Contains(declared, k) {
					t.Fatalf("%q accepted with undeclared member %q in %s", data, k, where)
				}
				if string(v) == "null" {
					t.Fatalf("%q accepted with %s.%s null", data, where, k)
				}
			}
		}
		check("the scenario", m, top)
		for i, a := range s.Actions {
			check("actions["+strconv.Itoa(i)+"]", a, action)
		}
	})
}

// FuzzLoadScenarioMCPServers: a scenario loadScenario accepts declares
// only servers a session can start and polc mcp can offer: each name of
// mcpServerName's form and at most maxMCPServerName bytes, with a
// command whose program is not empty, no NUL in any argument or value,
// variable names only in env, and no member but command and env.
func FuzzLoadScenarioMCPServers(f *testing.F) {
	addScenarioSeeds(f)
	f.Fuzz(func(t *testing.T, isJSON bool, data []byte) {
		path := writeScenario(t, isJSON, data)
		s, err := loadScenario(path, true)
		if err != nil {
			return
		}
		file, err := cueyaml.Extract(path, data)
		if err != nil {
			t.Fatalf("%q accepted, but does not extract: %v", data, err)
		}
		raw, err := cuecontext.New().BuildFile(file).MarshalJSON()
		if err != nil {
			t.Fatalf("%q accepted, but does not encode: %v", data, err)
		}
		var m struct {
			MCPServers map[string]map[string]json.RawMessage `json:"mcp_servers"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%q accepted with mcp_servers %s: %v", data, raw, err)
		}
		if len(m.MCPServers) != len(s.MCPServers) || len(s.MCPServers) > maxMCPServers {
			t.Fatalf("%q: %d servers declared, %d loaded", data, len(m.MCPServers), len(s.MCPServers))
		}
		for name, d := range s.MCPServers {
			for k := range m.MCPServers[name] {
				if !slices.Contains(mcpServerMembers, k) {
					t.Fatalf("%q accepted with member %q in server %q", data, k, name)
				}
			}
			switch {
			case !mcpServerName.MatchString(name) || len(name) > maxMCPServerName || strings.Contains(name, "__"):
				t.Fatalf("%q accepted with server name %q", data, name)
			case len(d.Command) == 0 || d.Command[0] == "":
				t.Fatalf("%q accepted with server %q's command %q", data, name, d.Command)
			case slices.ContainsFunc(d.Command, func(a string) bool { return strings.ContainsRune(a, 0) }):
				t.Fatalf("%q accepted with a NUL in server %q's command", data, name)
			}
			for k, v := range d.Env {
				if !envName.MatchString(k) || strings.ContainsRune(v, 0) {
					t.Fatalf("%q accepted with server %q's env %q=%q", data, name, k, v)
				}
			}
		}
	})
}
