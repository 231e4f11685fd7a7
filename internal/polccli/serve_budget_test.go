package polccli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// budgetServer is a polc serve session of dir/session.yaml on loopback
// TCP; stop ends it as a signal would.
type budgetServer struct {
	addr string
	stop func() error
}

func startBudgetServer(t *testing.T, e *env, rp runParams) *budgetServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: rp, listen: "tcp:127.0.0.1:0", ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(ctx, e, p) }()
	select {
	case addr := <-ready:
		return &budgetServer{addr: addr, stop: func() error { cancel(); return <-done }}
	case err := <-done:
		cancel()
		t.Fatalf("serve stopped: %v\n%s", err, e.stderr.(*lockedBuffer).String())
	}
	return nil
}

// execute posts one action and returns the outcome's kind and reason.
func (s *budgetServer) execute(path string) (kind, reason string, err error) {
	body := fmt.Sprintf(`{"action":"write_file","arguments":{"path":%q,"content":"x"}}`, path)
	resp, err := http.Post("http://"+s.addr+"/v1/execute", "application/json", strings.NewReader(body))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	kind, _ = m["kind"].(string)
	reason, _ = m["reason_code"].(string)
	return kind, reason, nil
}

// TestConcurrentServeBudget: 32 concurrent /v1/execute requests of a
// durable session against calls: 5 — exactly 5 run, 27 are denied by the
// budget; a restarted server on the same --state denies the next call.
// Before, each request was judged on usage 0 and all 32 ran.
func TestConcurrentServeBudget(t *testing.T) {
	dir := t.TempDir()
	e := compileBudgetPolicy(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/b.json\nprofile: durable\nworkspace: ws\nprincipal: agent:a\ntenant: acme\n"), 0o644)
	// A pinned clock, read by concurrent requests (-race checks it).
	rp := runParams{scenario: "session.yaml", state: "state.db", now: "2026-03-15T12:00:00Z", idSeed: 1}
	s := startBudgetServer(t, e, rp)
	const n, limit = 32, 5
	kinds := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			kind, reason, err := s.execute(fmt.Sprintf("notes/%d", i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case kind == "succeeded" || kind == "denied" && reason == "not_allowed:budget":
				kinds[kind]++
			default:
				t.Errorf("request %d: %s %s", i, kind, reason)
			}
		})
	}
	wg.Wait()
	if kinds["succeeded"] != limit || kinds["denied"] != n-limit {
		t.Fatalf("%v; want %d succeeded and %d denied by the budget", kinds, limit, n-limit)
	}
	written, _ := filepath.Glob(filepath.Join(dir, "ws", "notes", "*"))
	if len(written) != limit {
		t.Fatalf("%d files written, want %d", len(written), limit)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	rp.idSeed = 2 // new attempt ids: the first server's are committed
	s = startBudgetServer(t, e, rp)
	defer s.stop()
	if kind, reason, err := s.execute("notes/after-restart"); err != nil || kind != "denied" || reason != "not_allowed:budget" {
		t.Fatalf("after a restart: %s %s %v; want denied by the budget", kind, reason, err)
	}
}

// TestServeGovernedBudgetNeedsState: a governed session whose policy has
// budgets is refused without --state, where their usage is kept; with it,
// a restarted session judges what the first used.
func TestServeGovernedBudgetNeedsState(t *testing.T) {
	dir := t.TempDir()
	e := compileBudgetPolicy(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/b.json\nprofile: governed\nworkspace: ws\nprincipal: agent:a\ntenant: acme\n"), 0o644)
	// A server that started anyway is stopped at once (and fails).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev"}, listen: "tcp:127.0.0.1:0", ready: func(string) { cancel() }}
	err := runServe(ctx, e, p)
	var ue *usageError
	if !asUsage(err, &ue) || !strings.Contains(ue.msg, "--state FILE") {
		t.Fatalf("governed without --state: %v, want a usage error naming --state", err)
	}
	rp := runParams{scenario: "session.yaml", evidence: "ev", state: "state.db", now: "2026-03-15T12:00:00Z"}
	s := startBudgetServer(t, e, rp)
	for i := range 5 {
		if kind, _, err := s.execute(fmt.Sprintf("notes/%d", i)); err != nil || kind != "succeeded" {
			t.Fatalf("call %d: %s %v", i, kind, err)
		}
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	s = startBudgetServer(t, e, rp)
	defer s.stop()
	if kind, reason, err := s.execute("notes/after-restart"); err != nil || kind != "denied" || reason != "not_allowed:budget" {
		t.Fatalf("after a restart: %s %s %v; want denied by the budget", kind, reason, err)
	}
}

func asUsage(err error, ue **usageError) bool {
	u, ok := err.(*usageError)
	*ue = u
	return ok
}

// compileBudgetPolicy compiles a policy "b" allowing writes under notes/
// with calls: 5 per day into dir/out.
func compileBudgetPolicy(t *testing.T, dir string) *env {
	t.Helper()
	os.WriteFile(filepath.Join(dir, "b.cue"), []byte(`package p
policies: b: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["acme"]
	actions: allow: ["write_file"]
	filesystem: write: ["notes/**"]
	budgets: {calls: 5, window: "24h"}
}
`), 0o644)
	os.MkdirAll(filepath.Join(dir, "ws", "notes"), 0o755)
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if code := Run(context.Background(), []string{"compile", "b.cue", "-o", "out", "--now", "2026-03-15T12:00:00Z"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, stderr.String())
	}
	return e
}

// TestServeReportedUsage: a runtime reports its model's tokens with POST
// /v1/usage; once they pass the policy's tokens budget, the next action
// is denied by the budget. Without reported_usage in the session, every
// action of such a policy is denied budget_unaccounted (its limit could
// never bind); a malformed report is a 400 and charges nothing.
func TestServeReportedUsage(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b.cue"), []byte(`package p
policies: b: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["acme"]
	actions: allow: ["write_file"]
	filesystem: write: ["notes/**"]
	budgets: {tokens: 1000, window: "1h"}
}
`), 0o644)
	os.MkdirAll(filepath.Join(dir, "ws", "notes"), 0o755)
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if code := Run(context.Background(), []string{"compile", "b.cue", "-o", "out"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, stderr.String())
	}
	post := func(s *budgetServer, body string) (int, map[string]any) {
		resp, err := http.Post("http://"+s.addr+"/v1/usage", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	header := "snapshot: out/snapshots/b.json\nprofile: minimal\nworkspace: ws\nprincipal: agent:a\ntenant: acme\n"

	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(header+"reported_usage: [tokens]\n"), 0o644)
	s := startBudgetServer(t, e, runParams{scenario: "session.yaml", now: "2026-03-15T12:00:00Z"})
	if kind, reason, err := s.execute("notes/1"); err != nil || kind != "succeeded" {
		t.Fatalf("first action: %s %s %v", kind, reason, err)
	}
	for _, bad := range []string{`{"tokens":-1}`, `{"tokens":1.5}`, `{"tokens":"600"}`, `{"calls":1}`, `{"tokens":1e400}`} {
		if status, m := post(s, bad); status != http.StatusBadRequest {
			t.Errorf("%s: %d %v, want 400", bad, status, m)
		}
	}
	if status, m := post(s, `{"tokens":600}`); status != http.StatusOK || fmt.Sprint(m["charged"]) != "map[cost_microunits:0 tokens:600]" {
		t.Fatalf("usage: %d %v", status, m)
	}
	if kind, reason, err := s.execute("notes/2"); err != nil || kind != "succeeded" {
		t.Fatalf("under the budget: %s %s %v", kind, reason, err)
	}
	post(s, `{"tokens":600}`)
	if kind, reason, err := s.execute("notes/3"); err != nil || kind != "denied" || reason != "not_allowed:budget" {
		t.Fatalf("over the budget: %s %s %v", kind, reason, err)
	}
	s.stop()

	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(header), 0o644)
	s = startBudgetServer(t, e, runParams{scenario: "session.yaml", now: "2026-03-15T12:00:00Z"})
	defer s.stop()
	if kind, reason, err := s.execute("notes/4"); err != nil || kind != "denied" || reason != "budget_unaccounted" {
		t.Fatalf("tokens not reported: %s %s %v", kind, reason, err)
	}
	if !strings.Contains(stderr.String(), "does not list in reported_usage") {
		t.Errorf("no warning: %s", stderr.String())
	}
}
