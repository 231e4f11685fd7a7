package polccli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// compileDemo compiles the shipped examples into dir/out.
func compileDemo(t *testing.T, dir string) *env {
	t.Helper()
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	if code := Run(context.Background(), []string{"compile", examples, "-o", "out"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, stderr.String())
	}
	return e
}

// TestServeCloseFailureStopsTheServer: when /v1/close cannot finish (the
// certificate cannot be written), the task boundary is closed all the
// same (task_closed is in the chain), so the server answers close_failed
// and stops with an error, as "closing ends the server" says. Before the
// fix it kept serving, a second /v1/close dereferenced a nil result
// (net/http dropped the connection) and the signal that finally stopped
// the server panicked runServe.
func TestServeCloseFailureStopsTheServer(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", cert: "no-such-dir/cert.json"},
		listen: "tcp:127.0.0.1:0", ready: func(addr string) { ready <- addr }}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("runServe panicked: %v", r)
			}
		}()
		done <- runServe(ctx, e, p)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve stopped: %v", err)
	}
	post := func(path, body string) (int, map[string]any, error) {
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%s: %s", path, b)
		}
		return resp.StatusCode, m, nil
	}
	if status, m, err := post("/v1/execute", `{"action":"write_file","arguments":{"path":"notes/a.txt","content":"x"}}`); err != nil || status != 200 || m["kind"] != "succeeded" {
		t.Fatalf("execute: %d %v %v", status, m, err)
	}
	status, m, err := post("/v1/close", "")
	if err != nil || status != http.StatusInternalServerError || m["error"].(map[string]any)["code"] != "close_failed" {
		t.Fatalf("close: %d %v %v", status, m, err)
	}
	select {
	case err := <-done:
		if err == nil || strings.Contains(err.Error(), "panicked") {
			t.Fatalf("serve returned %v, want the close's error", err)
		}
	case <-time.After(5 * time.Second):
		// Still serving: a second close must at least answer.
		status, m, err := post("/v1/close", "")
		cancel()
		serr := <-done
		t.Fatalf("the server still runs after its session closed; second close: %d %v %v; after the signal: %v", status, m, err, serr)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("the server still accepts connections")
	}
}

// TestRunSignKeyCheckedBeforeActions: an unreadable --sign-key is a usage
// error found before any action runs, not after the scenario's side
// effects happened and its task boundary closed without a certificate.
func TestRunSignKeyCheckedBeforeActions(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "scenario.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"+
			"actions:\n  - {id: w, action: write_file, arguments: {path: notes/side-effect.txt, content: x}}\n"), 0o644)
	for _, cmd := range [][]string{
		{"run", "scenario.yaml", "--evidence", "ev", "--cert", "cert.json", "--sign-key", "missing.key"},
	} {
		if code := Run(context.Background(), cmd, e); code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", cmd, code, e.stderr.(*lockedBuffer).String())
		}
		if _, err := os.Stat(filepath.Join(dir, "ws", "notes", "side-effect.txt")); err == nil {
			t.Fatalf("%v: the action ran before the bad --sign-key was refused", cmd)
		}
		if _, err := os.Stat(filepath.Join(dir, "cert.json")); err == nil {
			t.Fatalf("%v: a certificate was written", cmd)
		}
	}
}

// TestServeSignKeyCheckedAtStart: polc serve refuses an unreadable
// --sign-key when it starts (exit 2, nothing listening), not at
// /v1/close after the session's actions ran.
func TestServeSignKeyCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	started := false
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", cert: "cert.json", signKey: "missing.key"},
		listen: "tcp:127.0.0.1:0", ready: func(string) { started = true; cancel() }}
	err := runServe(ctx, e, p)
	if started || exitCode(err) != 2 {
		t.Fatalf("serve with a missing --sign-key: started %v, %v (exit %d)\n%s", started, err, exitCode(err), e.stderr.(*lockedBuffer).String())
	}
}

// TestRunUnknownProfileRefused: a scenario (or session) whose profile is
// none of minimal, durable, governed, certifiable is invalid input (exit
// 2, positioned at the profile), not a run whose every action is denied
// unknown_profile with exit 0.
func TestRunUnknownProfileRefused(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	for _, profile := range []string{"governd", "Minimal", "\"\\u0020minimal\""} {
		os.WriteFile(filepath.Join(dir, "scenario.yaml"), []byte(
			"snapshot: out/snapshots/demo-agent.json\nprofile: "+profile+"\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"+
				"actions:\n  - {id: r, action: read_file, arguments: {path: notes/x.txt}}\n"), 0o644)
		stderr := e.stderr.(*lockedBuffer)
		before := len(stderr.String())
		code := Run(context.Background(), []string{"run", "scenario.yaml"}, e)
		msg := stderr.String()[before:]
		if code != 2 || !strings.Contains(msg, "scenario.yaml:2:") || !strings.Contains(msg, "invalid_input") {
			t.Errorf("profile %s: exit %d, stderr %q", profile, code, msg)
		}
	}
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: governd\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	started := false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := runServe(ctx, e, &serveParams{runParams: runParams{scenario: "session.yaml"}, listen: "tcp:127.0.0.1:0",
		ready: func(string) { started = true; cancel() }})
	if started || exitCode(err) != 2 {
		t.Fatalf("serve with profile governd: started %v, exit %d", started, exitCode(err))
	}
}
