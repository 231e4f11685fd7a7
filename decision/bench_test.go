package decision_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

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

// handData is data.hand of bench/handwritten/bench.rego for the
// benchmark policy of about n rules: its families of patterns, keyed by
// their literal part.
func handData(n int) map[string]any {
	k := max(n/20, 1)
	set := func(count int, f func(i int) string, more ...string) map[string]any {
		out := map[string]any{}
		for i := range count {
			out[f(i)] = true
		}
		for _, m := range more {
			out[m] = true
		}
		return out
	}
	tool := func(i int) string { return fmt.Sprintf("tool%d", i) }
	mod := func(i int) string { return fmt.Sprintf("mod%d", i) }
	return map[string]any{"hand": map[string]any{
		"actions":     set(k, tool, "bash", "read_file", "write_file", "http_get", "mcp"),
		"deny_tools":  set(k, tool),
		"allow_tools": set(3*k, tool),
		"read_mods":   set(3*k, mod),
		"write_mods":  set(2*k, mod),
		"deny_mods":   set(k, mod),
		"hosts":       set(2*k, func(i int) string { return fmt.Sprintf("h%d.example.com:443", i) }),
		"svcs":        set(k, func(i int) string { return fmt.Sprintf("svc%d.internal", i) }),
		"bad_hosts":   set(k, func(i int) string { return fmt.Sprintf("bad%d.example.com", i) }),
		"ops":         set(2*k, func(i int) string { return fmt.Sprintf("op%d", i) }),
		"delete_ops":  set(k, func(i int) string { return fmt.Sprintf("delete%d", i) }),
	}}
}

// handQuery prepares bench/handwritten/bench.rego over handData(n).
func handQuery(b testing.TB, n int) rego.PreparedEvalQuery {
	src, err := os.ReadFile("../bench/handwritten/bench.rego")
	if err != nil {
		b.Fatal(err)
	}
	pq, err := rego.New(rego.Query("data.handbench.decision"), rego.Module("bench.rego", string(src)),
		rego.Store(inmem.NewFromObject(handData(n)))).PrepareForEval(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return pq
}

// decode is a result set's one decision.
func decode(b testing.TB, rs rego.ResultSet) decision.Decision {
	var d decision.Decision
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		b.Fatalf("%d results", len(rs))
	}
	raw, _ := json.Marshal(rs[0].Expressions[0].Value)
	if err := json.Unmarshal(raw, &d); err != nil {
		b.Fatal(err)
	}
	return d
}

// cpuTime is the CPU time the process has used (user and system, every
// thread: the garbage collector's work counts). On a machine other work
// keeps busy, CPU time per op is steadier than wall time per op.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// p50 is the median of 2,000 separately timed calls of f.
func p50(f func()) float64 {
	lat := make([]time.Duration, 2000)
	for i := range lat {
		t0 := time.Now()
		f()
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	return float64(lat[len(lat)/2].Nanoseconds())
}

// BenchmarkDecision measures one decision per op, per size (50 and 2,000
// rules) and request class: native EvaluateInto with warm buffers
// (native), OPA's prepared query on polc's bundle (opa) and on the
// hand-written Rego of the same policy in bench/handwritten (hand), both
// with a parsed input and OPA's own result conversion. Each reports
// p50-ns, the median of separately timed decisions, besides ns/op. All
// three must decide each request alike; the hand-written form is checked
// against the native decision, gates and reasons included.
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
		hand := handQuery(b, size)
		sizeName := fmt.Sprintf("%drules", size)
		reqs := benchRequests(max(size/20, 1))
		for _, r := range reqs {
			d, _ := pol.Evaluate(r.req)
			if d.Disposition != r.want {
				b.Fatalf("%s/%s: native says %s %v, want %s", sizeName, r.class, d.Disposition, d.Reasons, r.want)
			}
			in, err := regoeval.Input("bench", r.req)
			if err != nil {
				b.Fatal(err)
			}
			o, err := eng.EvaluateParsed(ctx, in)
			if err != nil {
				b.Fatal(err)
			}
			rs, err := hand.Eval(ctx, rego.EvalParsedInput(in))
			if err != nil {
				b.Fatal(err)
			}
			if diff := cmp.Diff(d, o, cmpopts.EquateEmpty()); diff != "" {
				b.Fatalf("%s/%s: polc's bundle disagrees (-native +opa):\n%s", sizeName, r.class, diff)
			}
			if diff := cmp.Diff(d, decode(b, rs), cmpopts.EquateEmpty()); diff != "" {
				b.Fatalf("%s/%s: the hand-written Rego disagrees (-native +hand):\n%s", sizeName, r.class, diff)
			}
		}
		b.Logf("%s: %d compiled rules, bundle %d bytes", sizeName, len(snap.CompiledRules), len(bb))
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
				b.ReportMetric(p50(func() { pol.EvaluateInto(r.req, s, &d) }), "p50-ns")
			})
		}
		for _, r := range reqs {
			in, err := regoeval.Input("bench", r.req)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range []struct {
				name string
				eval func()
			}{
				{"opa", func() { eng.EvalResult(ctx, in) }},
				{"hand", func() { hand.Eval(ctx, rego.EvalParsedInput(in)) }},
			} {
				b.Run(e.name+"/"+sizeName+"/"+r.class, func(b *testing.B) {
					b.ReportAllocs()
					var cpu0 time.Duration
					for i := 0; b.Loop(); i++ {
						if i == 0 {
							cpu0 = cpuTime()
						}
						e.eval()
					}
					b.StopTimer()
					b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
					b.ReportMetric(p50(e.eval), "p50-ns")
				})
			}
		}
	}
}

// BenchmarkPrepare measures loading polc's bundle of the benchmark policy
// into OPA (reading it and PrepareForEval: parsing and compiling the
// modules), per size, and reports the bundle's size.
func BenchmarkPrepare(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{50, 2000} {
		snap := benchPolicy(b, size)
		bb, err := compiler.WriteBundle([]*snapshot.Snapshot{snap}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%drules", size), func(b *testing.B) {
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := regoeval.New(ctx, bb); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(len(bb)), "bundle-bytes")
		})
	}
}

// BenchmarkCompile measures polc compile of the benchmark policy (to a
// snapshot and its bundle) per size: it should grow linearly.
func BenchmarkCompile(b *testing.B) {
	for _, size := range []int{50, 500, 2000} {
		b.Run(fmt.Sprintf("%drules", size), func(b *testing.B) {
			for b.Loop() {
				snap := benchPolicy(b, size)
				if _, err := compiler.WriteBundle([]*snapshot.Snapshot{snap}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOPAServer measures `opa run --server` on polc's bundle (the real
// opa of $POLC_OPA): requests/s for POST /v1/data/polc/decision from 16
// concurrent loopback clients, each sending the benchmark's requests in
// turn, b.N requests in all.
func BenchmarkOPAServer(b *testing.B) {
	bin := os.Getenv("POLC_OPA")
	if bin == "" {
		b.Skip("POLC_OPA is not set")
	}
	for _, size := range []int{50, 2000} {
		b.Run(fmt.Sprintf("%drules", size), func(b *testing.B) {
			snap := benchPolicy(b, size)
			bb, err := compiler.WriteBundle([]*snapshot.Snapshot{snap}, nil)
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			path := filepath.Join(dir, "bundle.tar.gz")
			if err := os.WriteFile(path, bb, 0o644); err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			cmd := exec.Command(bin, "run", "--server", "--addr", addr, "--log-level", "error", "--bundle", path)
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			var bodies [][]byte
			for _, r := range benchRequests(max(size/20, 1)) {
				body, _ := json.Marshal(map[string]any{"input": map[string]any{"policy": "bench", "request": r.req}})
				bodies = append(bodies, body)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			url := "http://" + addr + "/v1/data/polc/decision"
			post := func(body []byte) error {
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				var out struct {
					Result decision.Decision `json:"result"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Result.Disposition == "" {
					return fmt.Errorf("bad answer (%v): %+v", err, out)
				}
				return nil
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if post(bodies[0]) == nil {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("opa did not answer within 30 s")
				}
			}
			var next atomic.Int64
			var failed atomic.Value
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if err := post(bodies[int(i)%len(bodies)]); err != nil {
							failed.Store(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
		})
	}
}
