//go:build linux

package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withLauncher sets the chosen launcher for the test and restores the
// previous choice afterwards.
func withLauncher(t *testing.T, c launcherChoice) {
	t.Helper()
	launcherMu.Lock()
	old := launcherChosen
	launcherChosen = &c
	launcherMu.Unlock()
	t.Cleanup(func() {
		launcherMu.Lock()
		launcherChosen = old
		launcherMu.Unlock()
	})
}

// copyExe copies this test binary (which acts as a launcher, see
// TestMain) to dir/name with mode.
func copyExe(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p := filepath.Join(dir, name)
	dst, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLauncherSelection: no file next to the executable means the running
// binary; a trusted one is used; an untrusted one is refused, not
// silently replaced by the running binary.
func TestLauncherSelection(t *testing.T) {
	dir := t.TempDir()
	if c := launcherIn(dir); c.path != selfExe || c.err != nil {
		t.Fatalf("empty directory: %+v", c)
	}
	good := copyExe(t, dir, LauncherFile, 0o755)
	if c := launcherIn(dir); c.path != good || c.err != nil {
		t.Fatalf("trusted launcher: %+v", c)
	}

	bad := map[string]func(t *testing.T) string{
		"group-writable": func(t *testing.T) string { return copyExe(t, t.TempDir(), LauncherFile, 0o775) },
		"world-writable": func(t *testing.T) string { return copyExe(t, t.TempDir(), LauncherFile, 0o757) },
		"not executable": func(t *testing.T) string { return copyExe(t, t.TempDir(), LauncherFile, 0o644) },
		"symlink": func(t *testing.T) string {
			d := t.TempDir()
			p := filepath.Join(d, LauncherFile)
			if err := os.Symlink(good, p); err != nil {
				t.Fatal(err)
			}
			return p
		},
		"directory": func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), LauncherFile)
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		},
		"directory writable by others": func(t *testing.T) string {
			d := t.TempDir()
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
			return copyExe(t, d, LauncherFile, 0o755)
		},
		"owned by another user": func(t *testing.T) string {
			if os.Geteuid() != 0 {
				t.Skip("needs uid 0 to give the file away")
			}
			p := copyExe(t, t.TempDir(), LauncherFile, 0o755)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return p
		},
	}
	for name, mk := range bad {
		t.Run(name, func(t *testing.T) {
			p := mk(t)
			c := launcherIn(filepath.Dir(p))
			if c.path != p || c.err == nil {
				t.Fatalf("want a refusal, got %+v", c)
			}
			if err := UseLauncher(p); err == nil {
				t.Fatal("UseLauncher accepted it")
			}
			// Command refuses to run with it, and Probe says why.
			initCalled.Store(true)
			withLauncher(t, c)
			_, err := Command(context.Background(), Spec{Env: []string{"PATH=/bin"}, Network: NetworkAllow}, []string{"true"})
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), p) {
				t.Errorf("Command: %v", err)
			}
			r := Probe()
			f, _ := r.Facet(FacetFilesystem)
			if r.Launcher != p || f.State != Unsupported || !strings.Contains(f.Reason, "not trusted") {
				t.Errorf("Probe: %+v", r)
			}
		})
	}
	if err := UseLauncher("relative/" + LauncherFile); err == nil {
		t.Error("UseLauncher accepted a relative path")
	}
}

// TestCopiedLauncherRuns: a launcher other than /proc/self/exe is what
// Command starts and what Probe reports, and targets run through it in
// every network mode.
func TestCopiedLauncherRuns(t *testing.T) {
	p := copyExe(t, t.TempDir(), LauncherFile, 0o755)
	withLauncher(t, launcherChoice{path: selfExe})
	if err := UseLauncher(p); err != nil {
		t.Fatal(err)
	}
	if r := Probe(); r.Launcher != p || !r.UserNetNamespaces {
		t.Fatalf("Probe: %+v", r)
	}
	ws := t.TempDir()
	for _, n := range []Network{NetworkAllow, NetworkDeny, NetworkProxy} {
		spec := Spec{Write: []string{ws}, Env: []string{"PATH=/usr/bin:/bin"}, Network: n}
		if n == NetworkProxy {
			spec.ProxySocket, spec.ProxyPort = filepath.Join(ws, "p.sock"), 3128
		}
		cmd, err := Command(context.Background(), spec, []string{"sh", "-c", "echo ok > " + filepath.Join(ws, n.String())})
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Path != p {
			t.Errorf("%s: Command starts %s, want %s", n, cmd.Path, p)
		}
		if _, stderr, code := runCmd(cmd); code != 0 {
			t.Errorf("%s: code %d, stderr %q", n, code, stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, n.String())); string(b) != "ok\n" {
			t.Errorf("%s: the target did not run: %q", n, b)
		}
	}
	if err := UseLauncher(""); err != nil {
		t.Fatal(err)
	}
	if r := Probe(); r.Launcher != selfExe {
		t.Errorf("after UseLauncher(\"\"): Probe says %q", r.Launcher)
	}
}
