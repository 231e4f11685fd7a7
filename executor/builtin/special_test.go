package builtin_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/executor/builtin"
)

// TestReadRefusesNonRegularFiles: read_file (and edit_file, which reads
// first) opened a FIFO without O_NONBLOCK, so the open waited for a
// writer: Execute hung past any timeout and the worker was lost. Only
// regular files are read now; a FIFO, a directory or a device is
// not_readable at once.
func TestReadRefusesNonRegularFiles(t *testing.T) {
	ws := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o600); err != nil {
		t.Skip("no mkfifo here:", err)
	}
	os.Mkdir(filepath.Join(ws, "dir"), 0o755)
	fns := callables(t, ws)
	for _, tc := range []struct{ action, path string }{{"read_file", "fifo"}, {"edit_file", "fifo"}, {"read_file", "dir"}} {
		done := make(chan error, 1)
		go func() {
			_, err := fns[tc.action](context.Background(), map[string]any{"path": tc.path, "old": "a", "new": "b"})
			done <- err
		}()
		select {
		case err := <-done:
			if class(err) != "not_readable" {
				t.Errorf("%s %s: %v (class %q), want not_readable", tc.action, tc.path, err, class(err))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s %s blocked", tc.action, tc.path)
		}
	}
}

// TestWriteKeepsPermissions: write_file and edit_file replaced a file with
// a 0644 one, so editing a 0600 file of secrets made it readable by every
// local user. A replaced file keeps its permission bits; a new one is 0644.
func TestWriteKeepsPermissions(t *testing.T) {
	ws := t.TempDir()
	fns := callables(t, ws)
	priv := filepath.Join(ws, "priv.env")
	if err := os.WriteFile(priv, []byte("X=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(priv, 0o600)
	if _, err := fns["edit_file"](context.Background(), map[string]any{"path": "priv.env", "old": "X=1", "new": "X=2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fns["write_file"](context.Background(), map[string]any{"path": "priv.env", "content": "X=3\n"}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(priv); fi.Mode().Perm() != 0o600 {
		t.Errorf("priv.env is %v after edit and write, want -rw-------", fi.Mode().Perm())
	}
	if _, err := fns["write_file"](context.Background(), map[string]any{"path": "new.txt", "content": "x"}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "new.txt")); fi.Mode().Perm()&0o644 != 0o644 || fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("new.txt is %v, want -rw-r--r--", fi.Mode().Perm())
	}
}

// TestHTTPGetIgnoresEnvironmentProxy: http_get used http.DefaultTransport,
// which takes a proxy from HTTP_PROXY: the request went to a host the
// policy never judged. Its client has no proxy.
func TestHTTPGetIgnoresEnvironmentProxy(t *testing.T) {
	tr, ok := builtin.DefaultHTTPClient().Transport.(*http.Transport)
	if !ok || tr.Proxy != nil {
		t.Fatalf("transport %T with a proxy function: requests may go to HTTP_PROXY", builtin.DefaultHTTPClient().Transport)
	}
}
