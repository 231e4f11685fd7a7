//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/sandbox"
)

// childTimeout bounds every child a test starts.
const childTimeout = 30 * time.Second

var baseEnv = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C"}

type result struct {
	stdout, stderr string
	code           int // exit code, -1 when killed by a signal
	sig            syscall.Signal
	err            error // start error
}

func (r result) String() string {
	return fmt.Sprintf("code=%d sig=%v\nstdout: %s\nstderr: %s", r.code, r.sig, r.stdout, r.stderr)
}

func sh(script string) []string { return []string{"bash", "-c", script} }

func wait(cmd *exec.Cmd) result {
	w, err := start(cmd)
	if err != nil {
		return result{err: err, code: -1}
	}
	return <-w
}

// start starts cmd, collecting its output; the result arrives on the channel.
func start(cmd *exec.Cmd) (<-chan result, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan result, 1)
	go func() {
		err := cmd.Wait()
		ch <- toResult(out.String(), errb.String(), err)
	}()
	return ch, nil
}

func toResult(stdout, stderr string, err error) result {
	r := result{stdout: stdout, stderr: stderr}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		r.code = ws.ExitStatus()
		if ws.Signaled() {
			r.sig = ws.Signal()
		}
	default:
		r.err = err
		r.code = -1
	}
	return r
}

// run runs argv under spec (Env defaults to baseEnv) and waits.
func run(t *testing.T, spec sandbox.Spec, argv ...string) result {
	t.Helper()
	if spec.Env == nil {
		spec.Env = baseEnv
	}
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	cmd, err := sandbox.Command(ctx, spec, argv)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	r := wait(cmd)
	if r.err != nil {
		t.Fatalf("run: %v", r.err)
	}
	return r
}

// direct runs argv without the sandbox, in dir, with baseEnv.
func direct(t *testing.T, dir string, argv ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = baseEnv
	cmd.Dir = dir
	r := wait(cmd)
	if r.err != nil {
		t.Fatalf("direct: %v", r.err)
	}
	return r
}

// fixture is a workspace with a denied subtree and a directory outside it:
//
//	root/ws/            Write
//	root/ws/secrets/key Deny (ws/secrets)
//	root/ws/sub/file
//	root/ro/sub/file    Read
//	root/outside/secret not granted
type fixture struct {
	root, ws, secrets, ro, outside string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{
		root:    root,
		ws:      filepath.Join(root, "ws"),
		secrets: filepath.Join(root, "ws", "secrets"),
		ro:      filepath.Join(root, "ro"),
		outside: filepath.Join(root, "outside"),
	}
	for _, d := range []string{f.secrets, filepath.Join(f.ws, "sub"), filepath.Join(f.ro, "sub"), f.outside} {
		mustMkdir(t, d)
	}
	mustWrite(t, filepath.Join(f.secrets, "key"), "the-key")
	mustWrite(t, filepath.Join(f.ws, "sub", "file"), "ws-file")
	mustWrite(t, filepath.Join(f.ro, "sub", "file"), "ro-file")
	mustWrite(t, filepath.Join(f.outside, "secret"), "outside-secret")
	return f
}

func (f fixture) spec(n sandbox.Network) sandbox.Spec {
	return sandbox.Spec{
		Read:    []string{f.ro},
		Write:   []string{f.ws},
		Deny:    []string{f.secrets},
		Network: n,
		Env:     baseEnv,
		Dir:     f.ws,
	}
}

func mustMkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// denied checks that r failed with a permission error.
func denied(t *testing.T, what string, r result) {
	t.Helper()
	if r.code == 0 {
		t.Errorf("%s: succeeded under the sandbox:\n%v", what, r)
		return
	}
	// Landlock answers EACCES, EPERM for mount and signals, and EXDEV for
	// a link or rename it refuses to reparent; the read-only mount outside
	// the write roots answers EROFS.
	msg := strings.ToLower(r.stderr)
	if !strings.Contains(msg, "permission denied") && !strings.Contains(msg, "operation not permitted") &&
		!strings.Contains(msg, "invalid cross-device link") && !strings.Contains(msg, "read-only file system") {
		t.Errorf("%s: failed, but not with a permission error:\n%v", what, r)
	}
}

func ok(t *testing.T, what string, r result) {
	t.Helper()
	if r.code != 0 || r.sig != 0 {
		t.Fatalf("%s: failed:\n%v", what, r)
	}
}

var allNetworks = []sandbox.Network{sandbox.NetworkAllow, sandbox.NetworkDeny, sandbox.NetworkProxy}

// withProxy fills in ProxySocket and ProxyPort under NetworkProxy.
func withProxy(t *testing.T, spec sandbox.Spec) sandbox.Spec {
	if spec.Network == sandbox.NetworkProxy && spec.ProxySocket == "" {
		spec.ProxySocket = filepath.Join(t.TempDir(), "proxy.sock")
		spec.ProxyPort = 3128
	}
	return spec
}
