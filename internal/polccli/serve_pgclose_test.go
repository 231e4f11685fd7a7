package polccli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/internal/pgtest"
)

// TestServeSignalsWithPostgresGone is the close of a polc serve session
// whose PostgreSQL server was stopped: the first SIGTERM begins the close
// (its task_closed append retries on the lost connection), and a second
// one abandons it, so the process (the real program, in its own process)
// exits promptly with 1, saying that task_closed was not acknowledged
// (docs/serve.md "Shutdown").
func TestServeSignalsWithPostgresGone(t *testing.T) {
	dsn, pgdir, dir := pgSession(t)
	sock := filepath.Join(dir, "polc.sock")
	cmd := polcCommand(dir, "serve", "session.yaml", "--listen", "unix:"+sock, "--evidence", dsn, "--state", dsn, "--cert", "cert.json")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	var resp *http.Response
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		resp, err = client.Post("http://polc/v1/execute", "application/json",
			strings.NewReader(`{"action":"write_file","arguments":{"path":"notes/a.txt","content":"x\n"}}`))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never answered: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("execute: %d\n%s", resp.StatusCode, stderr.String())
	}
	stopPG(t, pgdir)
	cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(time.Second) // the close is waiting on the lost server
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitFindings {
			t.Fatalf("serve exited with %v, want exit code %d\n%s", err, ExitFindings, stderr.String())
		}
		if !strings.Contains(stderr.String(), "task_closed was not acknowledged") {
			t.Errorf("stderr does not say the close was abandoned:\n%s", stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "cert.json")); err == nil {
			t.Error("a certificate was written for a chain whose task_closed was not acknowledged")
		}
		t.Logf("exited %v after the second SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatalf("serve still running 15s after a second SIGTERM\n%s", stderr.String())
	}
}

// TestMCPSignalsWithPostgresGone is TestServeSignalsWithPostgresGone for
// polc mcp over stdio: the first SIGTERM begins the close, which waits on
// the stopped server; a second abandons it well before the close's own
// bound (its grace and the stores' time), exit 1, no certificate.
func TestMCPSignalsWithPostgresGone(t *testing.T) {
	dsn, pgdir, dir := pgSession(t)
	cs, cmd, stderr := connectStdio(t, dir, "session.yaml", "--evidence", dsn, "--state", dsn, "--cert", "cert.json")
	t.Cleanup(func() { cmd.Process.Kill() })
	callAll(t, cs, []mcpCall{{tool: "write_file", args: map[string]any{"path": "notes/a.txt", "content": "x\n"}, kind: "succeeded"}})
	stopPG(t, pgdir)
	cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(time.Second) // the close is waiting on the lost server
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	ended := make(chan struct{})
	go func() { cs.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(15 * time.Second):
		t.Fatalf("mcp still running 15s after a second SIGTERM\n%s", stderr.String())
	}
	cs.Close()
	if code := cmd.ProcessState.ExitCode(); code != ExitFindings {
		t.Fatalf("mcp exited with %d, want %d\n%s", code, ExitFindings, stderr.String())
	}
	if !strings.Contains(stderr.String(), "polc: mcp: the close was abandoned") || !strings.Contains(stderr.String(), "a second signal") {
		t.Errorf("stderr does not say the close was abandoned by the second signal:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "cert.json")); err == nil {
		t.Error("a certificate was written for a chain whose task_closed was not acknowledged")
	}
	t.Logf("exited %v after the second SIGTERM", time.Since(start).Round(time.Millisecond))
}

// pgSession is a certifiable session of the demo agent in a new temporary
// dir, session.yaml, whose stores will be the private PostgreSQL server
// dsn (its data dir pgdir, for stopPG).
func pgSession(t *testing.T) (dsn, pgdir, dir string) {
	t.Helper()
	dsn, pgdir = pgtest.Private(t)
	dir = t.TempDir()
	compileDemo(t, dir)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	return dsn, pgdir, dir
}

// stopPG stops the private server of pgdir under a running session.
func stopPG(t *testing.T, pgdir string) {
	t.Helper()
	if out, err := exec.Command("bash", pgtest.Script(t), "stop", pgdir).CombinedOutput(); err != nil {
		t.Fatalf("scripts/pg.sh stop: %v\n%s", err, out)
	}
}
