package prove_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	. "polc.dev/polc/internal/prove"
	"polc.dev/polc/normalize"
)

// shapeCommands are bash commands of every structure the normalizer
// gives a command: programs with and without shell control, redirections
// alone (to /dev/null, to descriptors, to files, to /dev/tcp), bare and
// exported assignments, assignments before a program, heredocs, compound
// commands, and commands that are refused.
var shapeCommands = []string{
	"", " ", "# only a comment", "true", ":", "cd /tmp", "read X", "unset X", "echo $X", "git push origin main",
	"> /dev/null", "2>&1", ">/dev/stdout", "> /dev/null; > /dev/null", "<<EOF\nhi\nEOF", "cat <<EOF\nhi\nEOF",
	"< /etc/passwd", "> /tmp/x", "<> /tmp/x", ">> notes.txt", "exec > /tmp/x", "> /dev/tcp/example.com/80", "< /dev/udp/10.0.0.1/53",
	"X=1", "X=1 Y=2", "export X=1", "export", "local X=1", "readonly X", "declare X=1", "X=1 > /dev/null", "X=1 > /tmp/x",
	"X=1 true", "X=1 true | cat", "X=1; true", "true; X=1",
	"true | true", "| true", "true |", "true && true", "true &", "(true)", "( )", "{ ; }", "!", "f() { :; }",
	"if true; then :; fi", "for i in a b; do echo $i; done", "true > /dev/null", "cat < in.txt > out.txt 2>&1",
}

// shapeDescriptor is a registered action with the given hints, its
// arguments strings, those the hints name required (as the catalog
// wants), the MCP resource optional.
func shapeDescriptor(id string, h normalize.NormalizationHints) normalize.ActionDescriptor {
	props := map[string]any{}
	for _, a := range []string{"path", "command", "url", "server", "tool", "resource"} {
		props[a] = map[string]any{"type": "string"}
	}
	required := []string{}
	for _, p := range h.Paths {
		required = append(required, p.Arg)
	}
	for _, a := range []string{h.Command, h.URL} {
		if a != "" {
			required = append(required, a)
		}
	}
	if h.MCP != nil {
		required = append(required, h.MCP.Server, h.MCP.Tool)
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "additionalProperties": false, "properties": props, "required": required})
	return normalize.ActionDescriptor{ID: id, Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
		Arguments: schema, Hints: h, Containment: []string{}}
}

// shapeRequests are action requests of every built-in action and of
// registered ones — under ids that lowercase to a built-in action or to
// none, with each kind of hint and all of them together — each with its
// arguments present or absent.
func shapeRequests(t *testing.T) []struct {
	req normalize.ActionRequest
	cat *normalize.Catalog
} {
	var out []struct {
		req normalize.ActionRequest
		cat *normalize.Catalog
	}
	add := func(cat *normalize.Catalog, action string, args map[string]any) {
		out = append(out, struct {
			req normalize.ActionRequest
			cat *normalize.Catalog
		}{normalize.ActionRequest{Action: action, Principal: "agent:x", Tenant: "acme", Workspace: "/ws", Arguments: args}, cat})
	}
	builtin := normalize.BuiltinCatalog()
	for _, c := range shapeCommands {
		add(builtin, "bash", map[string]any{"command": c})
	}
	for _, a := range []string{"read_file", "write_file", "edit_file"} {
		for _, p := range []string{"/etc/passwd", "notes.txt", "/ws", "/"} {
			add(builtin, a, map[string]any{"path": p})
		}
	}
	add(builtin, "http_get", map[string]any{"url": "https://example.com/x"})
	add(builtin, "mcp", map[string]any{"server": "gh", "tool": "create_issue"})
	add(builtin, "mcp", map[string]any{"server": "gh", "tool": "read", "resource": "repo/a"})
	add(builtin, "mcp:gh/read", map[string]any{"resource": "repo/a"})
	paths := func(acc ...string) normalize.NormalizationHints {
		return normalize.NormalizationHints{Paths: []normalize.PathHint{{Arg: "path", Access: acc}}}
	}
	mcp := &normalize.MCPHint{Server: "server", Tool: "tool", Resource: "resource"}
	hints := []normalize.NormalizationHints{
		{}, paths("read"), paths("write"), paths("execute"), paths("read", "write"), paths("read", "write", "execute"),
		{Command: "command"}, {URL: "url"}, {MCP: mcp},
		{Paths: []normalize.PathHint{{Arg: "path", Access: []string{"execute"}}}, Command: "command", URL: "url", MCP: mcp},
	}
	argSets := []map[string]any{{}, {"path": "/srv/app"}, {"url": "http://example.com/"}, {"server": "gh", "tool": "read"},
		{"server": "gh", "tool": "read", "resource": "repo/a"},
		{"path": "bin/tool", "command": "X=1 true", "url": "http://example.com/", "server": "gh", "tool": "read", "resource": "r"}}
	for _, c := range shapeCommands {
		argSets = append(argSets, map[string]any{"command": c}, map[string]any{"command": c, "path": "/srv/x"})
	}
	for _, id := range []string{"deploy", "Bash", "Read_File", "WRITE_FILE", "Edit_File", "HTTP_GET", "Mcp"} {
		for _, h := range hints {
			cat := normalize.NewCatalog()
			if _, err := cat.Add(shapeDescriptor(id, h)); err != nil {
				t.Fatal(err)
			}
			for _, args := range argSets {
				add(cat, id, args)
			}
		}
	}
	return out
}

// structure names what a normalized request holds: its action, shell
// control, and which facets it carries, with the accesses of its paths.
func structure(n *normalize.Normalized) string {
	var parts []string
	if n.ShellControl {
		parts = append(parts, "shell")
	}
	acc := map[string][]string{}
	for _, p := range n.Paths {
		acc[p.Path] = append(acc[p.Path], p.Access)
	}
	for _, a := range acc {
		slices.Sort(a)
		parts = append(parts, "path("+strings.Join(a, "+")+")")
	}
	for name, k := range map[string]int{"argv": len(n.Commands), "host": len(n.Hosts), "env": len(n.Env), "secret": len(n.Secrets)} {
		if k > 0 {
			parts = append(parts, name)
		}
	}
	if n.MCP != nil {
		parts = append(parts, "mcp")
		if n.MCP.Resource != nil {
			parts = append(parts, "resource")
		}
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	return n.Action + "{" + strings.Join(parts, ",") + "}"
}

// TestShapesCoverNormalizer derives the structures of normalized requests
// from the real normalizer's output on a corpus of requests (every
// built-in action, registered actions with each kind of hint, bash
// commands of every form, edge cases included) and checks that the shapes
// the prover searches model every one of them (Unmodelled): a structure
// no shape models is a request a property could hold against. A command
// of redirections alone ("> /dev/null", "2>&1") is shell control without
// a value, which the shapes once left out.
func TestShapesCoverNormalizer(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range shapeRequests(t) {
		n, nerr := (&normalize.Normalizer{Catalog: r.cat, Now: func() time.Time { return scriptNow }}).Normalize(r.req)
		if nerr != nil {
			continue
		}
		s := structure(n)
		if seen[s] {
			continue
		}
		seen[s] = true
		if miss := Unmodelled(n); len(miss) > 0 {
			t.Errorf("%s (%s %v): no shape models %s", s, r.req.Action, r.req.Arguments, strings.Join(miss, "; "))
		}
	}
	// The corpus reaches the structures the edge cases are about.
	for _, want := range []string{"bash{shell}", "bash{env,shell}", "bash{argv,env}", "bash{argv}", "bash{argv,shell}",
		"bash{path(read),shell}", "bash{path(read+write),shell}", "bash{host,shell}", "Bash{shell}", "deploy{shell}", "deploy{}",
		"deploy{argv,env,host,mcp,path(execute),resource}", "edit_file{path(read+write)}", "mcp{mcp,resource}"} {
		if !seen[want] {
			t.Errorf("the corpus never produced %s", want)
		}
	}
	t.Logf("%d structures: %s", len(seen), fmt.Sprint(slices.Sorted(maps.Keys(seen))))
}
