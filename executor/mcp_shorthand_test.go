package executor_test

import (
	"context"
	"reflect"
	"testing"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// TestMCPShorthandReachesCallable: a request for mcp:<server>/<tool> is
// judged with the shorthand's server and tool, and the callable of the
// mcp action gets them too — without them it could not know which tool
// of which server the policy allowed.
func TestMCPShorthandReachesCallable(t *testing.T) {
	var got []map[string]any
	snap := compilePolicy(t, `package p
policies: team: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["mcp"]
	mcp: servers: [{server: "srv", tools: ["tool"]}]
}
`)
	r := newRig(t, nil, func(c *executor.Config) {
		c.Policies = []*snapshot.Snapshot{snap}
		for _, d := range normalize.BuiltinDescriptors() {
			if d.ID != "mcp" {
				continue
			}
			if err := c.Registry.Register(d, func(_ context.Context, args map[string]any) (any, error) {
				got = append(got, args)
				return "ok", nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	})
	r.snap = snap
	ec := r.ctx(executor.ProfileMinimal, nil)
	cases := []struct {
		action string
		args   map[string]any
	}{
		{"mcp:srv/tool", map[string]any{"arguments": map[string]any{"text": "hi"}}},
		{"mcp:srv/tool", nil},
		{"mcp", map[string]any{"server": "srv", "tool": "tool", "arguments": map[string]any{"text": "hi"}}},
	}
	for i, c := range cases {
		got = nil
		out := r.exec.Execute(context.Background(), req("r", c.action, c.args), ec)
		if out.Kind() != executor.KindSucceeded {
			t.Fatalf("%d %s: %s %s %+v", i, c.action, out.Kind(), out.Base().ReasonCode, out.Base().Trail)
		}
		if len(got) != 1 || got[0]["server"] != "srv" || got[0]["tool"] != "tool" {
			t.Fatalf("%d %s: the callable got %v, want server srv and tool tool", i, c.action, got)
		}
		if want := c.args["arguments"]; !reflect.DeepEqual(got[0]["arguments"], want) {
			t.Errorf("%d: arguments %v, want %v", i, got[0]["arguments"], want)
		}
	}
	// The shorthand and an argument that names another server conflict:
	// denied, never called.
	got = nil
	out := r.exec.Execute(context.Background(), req("r", "mcp:srv/tool", map[string]any{"server": "other"}), ec)
	if out.Kind() != executor.KindDenied || len(got) != 0 {
		t.Fatalf("conflicting shorthand: %s, callable ran %d times", out.Kind(), len(got))
	}
}
