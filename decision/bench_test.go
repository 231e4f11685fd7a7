package decision_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// benchPolicy generates a policy of about n rules spread over every facet,
// shaped like real policies (literal ids, directory roots, command
// prefixes, host suffixes), and compiles it with the real compiler.
func benchPolicy(b testing.TB, n int) *snapshot.Snapshot {
	k := max(n/20, 1)
	list := func(count int, f func(i int) string) []string {
		out := make([]string, count)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	pol := map[string]any{
		"version":    "1",
		"principals": []string{"agent:*"},
		"tenants":    []string{"acme"},
		"actions": map[string]any{
			"allow": append(list(k, func(i int) string { return fmt.Sprintf("tool%d", i) }), "bash", "read_file", "write_file", "http_get", "mcp"),
			"deny":  list(k, func(i int) string { return fmt.Sprintf("bash:tool%d danger *", i) }),
			"approve": []any{
				map[string]any{"pattern": "bash:git push *", "approver": "release", "expires_after": "1h"},
			},
		},
		"filesystem": map[string]any{
			"read":  list(3*k, func(i int) string { return fmt.Sprintf("/repo/mod%d/**", i) }),
			"write": list(2*k, func(i int) string { return fmt.Sprintf("/repo/mod%d/out/**", i) }),
			"deny":  list(k, func(i int) string { return fmt.Sprintf("/repo/mod%d/**/.env", i) }),
		},
		"network": map[string]any{"mode": "allowlist",
			"allow": append(list(2*k, func(i int) string { return fmt.Sprintf("h%d.example.com:443", i) }), list(k, func(i int) string { return fmt.Sprintf("*.svc%d.internal", i) })...),
			"deny":  list(k, func(i int) string { return fmt.Sprintf("bad%d.example.com", i) }),
		},
		"subprocess": map[string]any{"mode": "allowlist",
			"allow": append(list(3*k, func(i int) string { return fmt.Sprintf("tool%d *", i) }), "git *"),
			"deny":  list(k, func(i int) string { return fmt.Sprintf("tool%d rm *", i) }),
		},
		"mcp": map[string]any{
			"servers": []any{map[string]any{"server": "github", "tools": list(2*k, func(i int) string { return fmt.Sprintf("op%d_*", i) })}},
			"deny":    list(k, func(i int) string { return fmt.Sprintf("github/delete%d_*", i) }),
		},
		"environment": map[string]any{"read": list(k, func(i int) string { return fmt.Sprintf("VAR%d", i) })},
	}
	dir := b.TempDir()
	src, _ := json.Marshal(map[string]any{"policies": map[string]any{"bench": pol}})
	os.WriteFile(filepath.Join(dir, "p.json"), src, 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.json"})
	if res.Diagnostics.HasErrors() {
		b.Fatal(res.Diagnostics)
	}
	return res.Snapshots[0]
}

func benchRequests(k int) []struct {
	class string
	req   *normalize.Normalized
	want  string
} {
	base := func(action string) *normalize.Normalized {
		return &normalize.Normalized{Principal: "agent:a", Tenant: "acme", Action: action, Workspace: "/repo",
			Time: "2026-11-30T12:00:00.000000Z", Paths: []normalize.PathAccess{}, Commands: [][]string{},
			Hosts: []string{}, Env: []string{}, Secrets: []string{}}
	}
	mid := k / 2
	tool := base(fmt.Sprintf("tool%d", mid))
	command := base("bash")
	command.Commands = [][]string{{fmt.Sprintf("tool%d", mid), "build", "./..."}}
	read := base("read_file")
	read.Paths = []normalize.PathAccess{{Path: fmt.Sprintf("/repo/mod%d/src/pkg/file.go", mid), Access: "read"}}
	write := base("write_file")
	write.Paths = []normalize.PathAccess{{Path: fmt.Sprintf("/repo/mod%d/out/bin/app", mid), Access: "write"}}
	host := base("http_get")
	host.Hosts = []string{fmt.Sprintf("api.svc%d.internal:443", mid)}
	mcp := base("mcp")
	mcp.MCP = &normalize.MCPTarget{Server: "github", Tool: fmt.Sprintf("op%d_list", mid)}
	deny := base("bash")
	deny.Commands = [][]string{{fmt.Sprintf("tool%d", mid), "danger", "now"}}
	return []struct {
		class string
		req   *normalize.Normalized
		want  string
	}{
		{"tool", tool, decision.Allow}, {"command", command, decision.Allow}, {"path_read", read, decision.Allow},
		{"path_write", write, decision.Allow}, {"host", host, decision.Allow}, {"mcp", mcp, decision.Allow},
		{"deny_hit", deny, decision.Deny},
	}
}

// BenchmarkDecision measures one decision per op: native EvaluateInto with
// warm buffers, and OPA's prepared query on the polc bundle with a parsed
// input. Besides ns/op it reports p50-ns, the median of 20,000 separately
// timed decisions (native only; OPA's mean is reported as is).
func BenchmarkDecision(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{50, 2000} {
		snap := benchPolicy(b, size)
		pol, err := decision.Compile(snap)
		if err != nil {
			b.Fatal(err)
		}
		bb, err := compiler.WriteBundle([]*snapshot.Snapshot{snap}, nil)
		if err != nil {
			b.Fatal(err)
		}
		eng, err := regoeval.New(ctx, bb)
		if err != nil {
			b.Fatal(err)
		}
		sizeName := fmt.Sprintf("%drules", size)
		reqs := benchRequests(max(size/20, 1))
		for _, r := range reqs {
			d, _ := pol.Evaluate(r.req)
			if d.Disposition != r.want {
				b.Fatalf("%s/%s: native says %s %v, want %s", sizeName, r.class, d.Disposition, d.Reasons, r.want)
			}
		}
		b.Logf("%s: %d compiled rules", sizeName, len(snap.CompiledRules))
		for _, r := range reqs {
			b.Run("native/"+sizeName+"/"+r.class, func(b *testing.B) {
				s := pol.NewScratch()
				var d decision.Decision
				pol.EvaluateInto(r.req, s, &d)
				b.ReportAllocs()
				for b.Loop() {
					pol.EvaluateInto(r.req, s, &d)
				}
				b.StopTimer()
				lat := make([]time.Duration, 20000)
				for i := range lat {
					t0 := time.Now()
					pol.EvaluateInto(r.req, s, &d)
					lat[i] = time.Since(t0)
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			})
		}
		for _, r := range reqs {
			b.Run("opa/"+sizeName+"/"+r.class, func(b *testing.B) {
				in, err := regoeval.Input("bench", r.req)
				if err != nil {
					b.Fatal(err)
				}
				if d, err := eng.EvaluateParsed(ctx, in); err != nil || d.Disposition != r.want {
					b.Fatalf("opa: %v %v", d, err)
				}
				b.ReportAllocs()
				for b.Loop() {
					eng.EvaluateParsed(ctx, in)
				}
			})
		}
	}
}
