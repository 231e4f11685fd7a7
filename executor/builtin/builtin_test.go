package builtin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/normalize"
)

// callables returns the built-in callables for ws (called directly here:
// these tests check what each does at the point of use, whatever the
// policy said).
func callables(t *testing.T, ws string) map[string]executor.Callable {
	t.Helper()
	fns, err := builtin.Callables(builtin.Options{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	return fns
}

func class(err error) string {
	var ec executor.ErrorClass
	if errors.As(err, &ec) {
		return ec.ErrorClass()
	}
	return ""
}

// TestFilesAreNotReachedThroughSymlinks: inside the workspace a path is
// resolved before the policy sees it (a link escaping the workspace is
// path_escape); the callables refuse a path through a link inside it too
// (symlink_refused): retargeted between the decision and the call, it
// would lead to a path nobody judged. Outside the
// workspace the policy judges the path as written, so read_file,
// write_file and edit_file refuse one with a symlink in it
// (symlink_refused) and write nothing through it; a write over a link
// replaces the link. Plain paths work, and a write creates its missing
// directories.
func TestFilesAreNotReachedThroughSymlinks(t *testing.T) {
	ws, outside, links := t.TempDir(), t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s3cret"), 0o600)
	os.WriteFile(filepath.Join(ws, "plain"), []byte("hello"), 0o644)
	os.Symlink(secret, filepath.Join(ws, "escape"))
	os.Symlink(filepath.Join(ws, "plain"), filepath.Join(ws, "inside"))
	os.Symlink(secret, filepath.Join(links, "file"))
	os.Symlink(outside, filepath.Join(links, "dir"))
	fns := callables(t, ws)
	ctx := context.Background()

	if _, err := fns["read_file"](ctx, map[string]any{"path": "escape"}); class(err) != normalize.ReasonPathEscape {
		t.Errorf("read_file through a link out of the workspace: %v", err)
	}
	for name, fn := range map[string]executor.Callable{"read_file": fns["read_file"], "write_file": fns["write_file"], "edit_file": fns["edit_file"]} {
		if res, err := fn(ctx, map[string]any{"path": "inside", "content": "x", "old": "hello", "new": "x"}); class(err) != "symlink_refused" {
			t.Errorf("%s through a link inside the workspace: %v %v", name, res, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "plain")); string(b) != "hello" {
		t.Fatalf("written through a link inside the workspace: %q", b)
	}
	for _, p := range []string{filepath.Join(links, "file"), filepath.Join(links, "dir", "secret")} {
		if res, err := fns["read_file"](ctx, map[string]any{"path": p}); class(err) != "symlink_refused" {
			t.Errorf("read_file %s: %v %v", p, res, err)
		}
		if res, err := fns["edit_file"](ctx, map[string]any{"path": p, "old": "s3cret", "new": "x"}); class(err) != "symlink_refused" {
			t.Errorf("edit_file %s: %v %v", p, res, err)
		}
	}
	for _, p := range []string{filepath.Join(links, "dir", "planted"), filepath.Join(links, "dir", "sub", "planted")} {
		if res, err := fns["write_file"](ctx, map[string]any{"path": p, "content": "x"}); class(err) != "symlink_refused" {
			t.Errorf("write_file %s: %v %v", p, res, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("something was written outside through a link: %v", entries)
	}
	if b, _ := os.ReadFile(secret); string(b) != "s3cret" {
		t.Fatalf("the secret changed: %q", b)
	}

	if _, err := fns["write_file"](ctx, map[string]any{"path": "new/dir/file", "content": "made"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fns["edit_file"](ctx, map[string]any{"path": "new/dir/file", "old": "made", "new": "edited"}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "new", "dir", "file")); err != nil || string(b) != "edited" {
		t.Fatalf("written and edited: %q %v", b, err)
	}
	// A link at the written path itself is replaced, not followed.
	if _, err := fns["write_file"](ctx, map[string]any{"path": filepath.Join(links, "file"), "content": "replaced"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "s3cret" {
		t.Fatalf("writing over a link wrote its target: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(links, "file")); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Fatalf("the link was not replaced: %v %v", fi, err)
	}
}

// TestHTTPGetFollowsRedirectsOnlyToTheSameHost: a redirect to another
// host (or port) is not followed — the 30x is the result — while one on
// the same host and port is.
func TestHTTPGetFollowsRedirectsOnlyToTheSameHost(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("other host"))
	}))
	defer other.Close()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/", http.StatusFound)
		case "/here":
			http.Redirect(w, r, srv.URL+"/final", http.StatusFound)
		default:
			w.Write([]byte("same host"))
		}
	}))
	defer srv.Close()
	fns := callables(t, t.TempDir())
	get := func(path string) map[string]any {
		t.Helper()
		res, err := fns["http_get"](context.Background(), map[string]any{"url": srv.URL + path})
		if err != nil {
			t.Fatal(err)
		}
		return res.(map[string]any)
	}
	if r := get("/away"); r["status"] != http.StatusFound || strings.Contains(r["body"].(string), "other host") {
		t.Fatalf("redirect to another host: %v", r)
	}
	if r := get("/here"); r["status"] != http.StatusOK || r["body"] != "same host" {
		t.Fatalf("redirect on the same host: %v", r)
	}
}

// TestBashRunsWhatThePolicyJudged: without shell control the command runs
// as the one argv the normalizer gave the policy — a glob or a tilde
// stays literal text, assignments go to the environment, no shell runs —
// so "cat s*" cannot read a file the policy never saw named; with shell
// control (a brace expansion, a ";") it goes through bash.
func TestBashRunsWhatThePolicyJudged(t *testing.T) {
	if _, err := exec.LookPath("cat"); err != nil {
		t.Skip("no cat")
	}
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "secret"), []byte("s3cret"), 0o644)
	fns := callables(t, ws)
	run := func(command string) (map[string]any, error) {
		t.Helper()
		res, err := fns["bash"](context.Background(), map[string]any{"command": command})
		m, _ := res.(map[string]any)
		return m, err
	}
	for _, c := range []string{"cat s*", "cat ?ecret", "cat [s]ecret", "FOO=1 cat s*"} {
		c0, nerr := normalize.ParseCommand(c)
		if nerr != nil || c0.ShellControl {
			t.Fatalf("%q: the policy would see shell control (%v)", c, nerr)
		}
		res, err := run(c)
		if class(err) != "exit_status" || strings.Contains(res["stdout"].(string), "s3cret") || res["shell"] != false {
			t.Errorf("%q: %v %v", c, res, err)
		}
	}
	for c, want := range map[string]string{"echo *": "*\n", "echo ~": "~\n", "echo a{b,c}": "ab ac\n", "FOO=bar printenv FOO": "bar\n"} {
		c0, _ := normalize.ParseCommand(c)
		res, err := run(c)
		if err != nil || res["stdout"] != want || res["shell"] != c0.ShellControl {
			t.Errorf("%q: %v %v (shell control %v)", c, res, err, c0.ShellControl)
		}
	}
	res, err := run("echo a; echo b")
	if err != nil || res["stdout"] != "a\nb\n" || res["shell"] != true {
		t.Fatalf("shell control: %v %v", res, err)
	}
}

// TestShellCommandNeedsBash: a command with shell control was judged as
// bash reads it, so without bash it fails (spawn_failed) rather than run
// in /bin/sh, which may read the same text otherwise (dash).
func TestShellCommandNeedsBash(t *testing.T) {
	ws := t.TempDir()
	t.Setenv("PATH", t.TempDir()) // no bash on it
	_, err := callables(t, ws)["bash"](context.Background(), map[string]any{"command": "echo a > f; echo b"})
	if class(err) != "spawn_failed" {
		t.Fatalf("error %v (class %q), want spawn_failed", err, class(err))
	}
	if _, serr := os.Stat(filepath.Join(ws, "f")); serr == nil {
		t.Fatal("the command ran without bash")
	}
}
