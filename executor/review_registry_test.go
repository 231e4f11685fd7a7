package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// putProps are the properties and required list of writeDescriptor's
// schema: every argument its hints name.
const putProps = `"properties":{"path":{"type":"string"},"srv":{"type":"string"},"tl":{"type":"string"}},"required":["path","srv","tl"]`

func writeDescriptor() normalize.ActionDescriptor {
	return normalize.ActionDescriptor{
		ID: "put", Version: "1", Aliases: []string{"store"},
		Source:      normalize.Source{Kind: "sdk", Ref: "example"},
		Arguments:   json.RawMessage(`{"type":"object",` + putProps + `}`),
		Hints:       normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: "path", Access: []string{"write"}}}, MCP: &normalize.MCPHint{Server: "srv", Tool: "tl"}},
		Containment: []string{"filesystem"},
	}
}

// paths normalizes a "put" of /ws/secret and returns the path accesses
// the policy would see.
func paths(t *testing.T, reg *executor.Registry) []normalize.PathAccess {
	t.Helper()
	n := &normalize.Normalizer{Catalog: reg.Catalog()}
	out, nerr := n.Normalize(normalize.ActionRequest{
		Action: "put", Arguments: map[string]any{"path": "/ws/secret", "srv": "s", "tl": "t"},
		Principal: "user:u", Tenant: "t", Workspace: "/ws",
	})
	if nerr != nil {
		t.Fatalf("normalize: %v", nerr)
	}
	return out.Paths
}

// Resolve returns a copy, and Register keeps one: writing to the
// descriptor a caller registered, or to one Resolve returned, changes
// neither what Resolve returns next nor the facets the policy is shown
// (a path hint renamed through a shared slice made the write to
// /ws/secret invisible to every path rule, under an unchanged digest).
func TestRegistryDescriptorIsNotShared(t *testing.T) {
	reg := executor.NewRegistry()
	d := writeDescriptor()
	if err := reg.Register(d, nil); err != nil {
		t.Fatal(err)
	}
	want, _ := reg.Resolve("put")
	wantDigest := want.Digest()
	before := paths(t, reg)
	if len(before) != 1 || before[0].Path != "/ws/secret" || before[0].Access != "write" {
		t.Fatalf("paths before = %+v", before)
	}

	// The caller's own descriptor, written after Register.
	d.Hints.Paths[0].Access[0] = "read"
	d.Hints.MCP.Server = "tl"
	d.Arguments[1] = ' '
	// A resolved copy, written.
	got, _ := reg.Resolve("store")
	got.Hints.Paths[0].Arg = "unused"
	got.Hints.MCP.Tool = "server"
	got.Arguments[len(got.Arguments)-1] = ' '
	got.Aliases[0] = "x"
	got.Containment[0] = "none"

	again, ok := reg.Resolve("put")
	if !ok {
		t.Fatal("put no longer resolves")
	}
	if again.Digest() != wantDigest {
		t.Errorf("the registry's descriptor changed through a copy: digest %s, registered %s; hints %+v, containment %v, aliases %v",
			again.Digest(), wantDigest, again.Hints.Paths, again.Containment, again.Aliases)
	}
	if after := paths(t, reg); !slices.Equal(after, before) {
		t.Errorf("paths after writing to copies = %+v, want %+v", after, before)
	}
}

// A descriptor without a canonical form has no digest; it was registered
// with digest "", so the preflight report bound no descriptor at all.
// Aliases that can never be reached as written, or that name the action
// twice, are collisions too.
func TestRegisterRefusesUnbindableDescriptors(t *testing.T) {
	for name, mod := range map[string]func(*normalize.ActionDescriptor){
		"number beyond float64": func(d *normalize.ActionDescriptor) {
			d.Arguments = json.RawMessage(`{"type":"object",` + putProps + `,"maxProperties":1e400}`)
		},
		"duplicate schema key": func(d *normalize.ActionDescriptor) {
			d.Arguments = json.RawMessage(`{"type":"object",` + putProps + `,"maxProperties":1,"maxProperties":5}`)
		},
		"lone surrogate in schema": func(d *normalize.ActionDescriptor) {
			d.Arguments = json.RawMessage(`{"type":"object",` + putProps + `,"$defs":{"a":{"const":"\ud800"}}}`)
		},
		"empty alias":         func(d *normalize.ActionDescriptor) { d.Aliases = []string{""} },
		"mcp shorthand alias": func(d *normalize.ActionDescriptor) { d.Aliases = []string{"mcp:s/t"} },
		"alias equal to id":   func(d *normalize.ActionDescriptor) { d.Aliases = []string{"put"} },
		"alias given twice":   func(d *normalize.ActionDescriptor) { d.Aliases = []string{"a", "a"} },
	} {
		t.Run(name, func(t *testing.T) {
			reg := executor.NewRegistry()
			d := writeDescriptor()
			mod(&d)
			if err := reg.Register(d, nil); err == nil {
				got, _ := reg.Resolve("put")
				t.Fatalf("registered; digest %q", got.Digest())
			}
			if _, ok := reg.Resolve("put"); ok {
				t.Error("a refused descriptor resolves")
			}
		})
	}
	// The same descriptor with a canonical schema and distinct aliases
	// registers.
	if err := executor.NewRegistry().Register(writeDescriptor(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestAuthorizerGetsItsOwnDescriptor: an authorizer that writes into the
// descriptor it is given (its path hints) changes nothing the executor
// uses: the next request is normalized as the registry says.
func TestAuthorizerGetsItsOwnDescriptor(t *testing.T) {
	reg := executor.NewRegistry()
	desc := normalize.ActionDescriptor{ID: "touch", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
		Arguments: []byte(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		Hints:     normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: "path", Access: []string{"write"}}}}}
	if err := reg.Register(desc, func(context.Context, map[string]any) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	snap := compilePolicy(t, `package p
policies: p: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["touch"]
	filesystem: write: ["/ws/ok/**"]
}
`)
	e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap},
		Authorize: func(_ context.Context, _ executor.ExecutionContext, d normalize.ActionDescriptor) error {
			if len(d.Hints.Paths) > 0 {
				d.Hints.Paths[0].Arg = "unused" // would hide the path from every rule
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "acme", Workspace: "/ws", Policy: executor.SnapshotRef{PolicyID: snap.PolicyID, Version: snap.Version, Digest: snap.Digest},
		Backend: "inprocess", Profile: executor.ProfileMinimal}
	for i := range 2 {
		out := e.Execute(context.Background(), executor.ExecutionRequest{RequestID: fmt.Sprint(i), Action: "touch",
			Arguments: map[string]any{"path": "/etc/passwd"}, Scope: executor.EphemeralScope{ID: "s"}}, ec)
		if out.Kind() != executor.KindDenied {
			t.Fatalf("request %d: %s %s, want denied (a write outside /ws/ok)", i, out.Kind(), out.Base().ReasonCode)
		}
	}
}

// TestRegisterRefusesUnjudgedHints: only an argument a hint names is
// judged by path, command, URL or MCP rules. A hint that names an argument
// the schema does not declare (a typo), one the schema lets be absent (the
// callable's default goes unjudged), a path without a valid access, or a
// built-in id without the built-in's hints (policies assume them) let the
// callable act on what no rule saw: an integrator's read_file without
// hints read /etc/shadow under a workspace-only policy. Each is refused.
func TestRegisterRefusesUnjudgedHints(t *testing.T) {
	obj := func(props string, required ...string) json.RawMessage {
		req, _ := json.Marshal(append([]string{}, required...))
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `}`)
	}
	str := `{"type":"string"}`
	pathHint := func(arg string, access ...string) normalize.NormalizationHints {
		return normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: arg, Access: access}}}
	}
	for _, tc := range []struct {
		name string
		d    normalize.ActionDescriptor
		want string // "" registers
	}{
		{"path hint typo", normalize.ActionDescriptor{ID: "fetch", Arguments: obj(`"path":`+str, "path"), Hints: pathHint("pth", "read")}, `"pth", which the schema's properties do not declare`},
		{"path argument optional", normalize.ActionDescriptor{ID: "fetch", Arguments: obj(`"path":` + str), Hints: pathHint("path", "read")}, "does not require"},
		{"path without access", normalize.ActionDescriptor{ID: "fetch", Arguments: obj(`"path":`+str, "path"), Hints: pathHint("path")}, "has no access"},
		{"unknown access", normalize.ActionDescriptor{ID: "fetch", Arguments: obj(`"path":`+str, "path"), Hints: pathHint("path", "wrte")}, `access "wrte"`},
		{"command undeclared", normalize.ActionDescriptor{ID: "run", Arguments: obj(`"cmd":`+str, "cmd"), Hints: normalize.NormalizationHints{Command: "command"}}, `"command"`},
		{"url optional", normalize.ActionDescriptor{ID: "get", Arguments: obj(`"url":` + str), Hints: normalize.NormalizationHints{URL: "url"}}, "does not require"},
		{"mcp tool undeclared", normalize.ActionDescriptor{ID: "call", Arguments: obj(`"server":`+str, "server"), Hints: normalize.NormalizationHints{MCP: &normalize.MCPHint{Server: "server", Tool: "tool"}}}, `"tool"`},
		{"schema not an object", normalize.ActionDescriptor{ID: "fetch", Arguments: json.RawMessage(`{"type":"string"}`)}, `"type": "object"`},
		{"built-in id without hints", normalize.ActionDescriptor{ID: "read_file", Arguments: obj(`"path":`+str, "path")}, "built-in action id"},
		{"built-in id with other hints", normalize.ActionDescriptor{ID: "bash", Arguments: obj(`"command":`+str+`,"cwd":`+str, "command", "cwd"),
			Hints: normalize.NormalizationHints{Command: "command", Paths: []normalize.PathHint{{Arg: "cwd", Access: []string{"read"}}}}}, "built-in action id"},
		{"custom id without hints", normalize.ActionDescriptor{ID: "send_report", Arguments: obj(`"to":`+str, "to")}, ""},
		{"built-in id with its hints", normalize.ActionDescriptor{ID: "read_file", Arguments: obj(`"path":`+str+`,"encoding":`+str, "path"), Hints: pathHint("path", "read")}, ""},
		{"optional mcp resource", normalize.ActionDescriptor{ID: "call", Arguments: obj(`"server":`+str+`,"tool":`+str+`,"res":`+str, "server", "tool"),
			Hints: normalize.NormalizationHints{MCP: &normalize.MCPHint{Server: "server", Tool: "tool", Resource: "res"}}}, ""},
	} {
		tc.d.Version = "1"
		err := executor.NewRegistry().Register(tc.d, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Register = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
