//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bypass builds the launcher's Cmd without Command's preflight, to show that
// the launcher itself refuses (the last line of defence) or enforces.
func bypass(t *testing.T, spec Spec, argv ...string) *exec.Cmd {
	t.Helper()
	w := newWireSpec(spec, argv)
	if err := w.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd, err := launcherCmd(ctx, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

func runCmd(cmd *exec.Cmd) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -2
	}
	return o.String(), e.String(), code
}

// The kernel never enforces RLIMIT_NPROC for root: the launcher refuses a
// Processes limit there, and the target never runs.
func TestLauncherRefusesVoidProcessLimit(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs uid 0")
	}
	ws := t.TempDir()
	marker := filepath.Join(ws, "marker")
	for _, n := range []Network{NetworkAllow, NetworkDeny} {
		cmd := bypass(t, Spec{Write: []string{ws}, Env: []string{"PATH=/usr/bin:/bin"}, Network: n,
			Limits: Limits{Processes: 5}}, "touch", marker)
		_, stderr, code := runCmd(cmd)
		if code != ExitRefused || !strings.Contains(stderr, "polc sandbox: rlimits: a Processes limit is void") {
			t.Errorf("%s: code %d, stderr %q", n, code, stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s: the target ran", n)
		}
	}
}

// For a user the kernel does count, the Processes limit stops forks. The
// launcher runs as nobody: uid 0 of a user namespace mapped to 65534, as
// Command sets it up for a caller that is not root (a launcher started
// with a Credential instead holds no CAP_SYS_ADMIN for its private mount
// namespace and refuses).
func TestProcessesLimitEnforced(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs uid 0 to start the launcher as nobody")
	}
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(ws), 0o755); err != nil { // t.TempDir's parent is 0700
		t.Fatal(err)
	}
	// Forks until the kernel refuses; the children wait for the parent's
	// signal, so they all exist at once. Bounded: 50 attempts.
	script := `
import os, sys, errno
kids, refused = [], False
r, w = os.pipe()
for i in range(50):
    try:
        pid = os.fork()
    except OSError as e:
        refused = e.errno == errno.EAGAIN
        break
    if pid == 0:
        os.close(w); os.read(r, 1); os._exit(0)
    kids.append(pid)
os.close(w)
for k in kids: os.waitpid(k, 0)
print(len(kids), refused)
`
	spec := Spec{Write: []string{ws}, Env: []string{"PATH=/usr/bin:/bin"}, Network: NetworkAllow, Dir: ws}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c", script)
	cmd.Env = spec.Env
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "50 False" {
		t.Fatalf("direct as nobody: %q %v", out, err)
	}
	spec.Limits.Processes = 5
	cmd = bypass(t, spec, "python3", "-c", script)
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
	cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}}
	cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}}
	cmd.SysProcAttr.Credential = &syscall.Credential{} // become uid 0 inside, 65534 outside
	stdout, stderr, code := runCmd(cmd)
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	var n int
	var refused string
	if _, err := fmt.Sscan(stdout, &n, &refused); err != nil || refused != "True" || n >= 5 {
		t.Fatalf("under Processes=5: %q (forked %d, refused %s)", stdout, n, refused)
	}
}

// The launcher finds the spec pipe at the descriptor POLC_SANDBOX_SPEC_FD
// names and refuses anything but a plain number in range, or a descriptor
// that is not the pipe.
func TestLauncherSpecFDStrict(t *testing.T) {
	ws := t.TempDir()
	marker := filepath.Join(ws, "marker")
	for _, v := range []string{"", "3 ", "+3", "03", "0x3", "2", "1004", "99999", "-1", "4"} {
		cmd := bypass(t, Spec{Write: []string{ws}, Env: []string{"PATH=/usr/bin:/bin"}, Network: NetworkAllow}, "touch", marker)
		cmd.Env = []string{launcherEnv + "=" + roleExec, specFDEnv + "=" + v}
		_, stderr, code := runCmd(cmd)
		if code != ExitRefused || !strings.Contains(stderr, "polc sandbox: ") {
			t.Errorf("%s=%q: code %d, stderr %q", specFDEnv, v, code, stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s=%q: the target ran", specFDEnv, v)
		}
	}
	cmd := bypass(t, Spec{Write: []string{ws}, Env: []string{"PATH=/usr/bin:/bin"}, Network: NetworkAllow}, "touch", marker)
	cmd.Env = []string{launcherEnv + "=" + roleExec}
	if _, stderr, code := runCmd(cmd); code != ExitRefused || !strings.Contains(stderr, specFDEnv+" is not set") {
		t.Errorf("without %s: code %d, stderr %q", specFDEnv, code, stderr)
	}
	cmd = bypass(t, Spec{Write: []string{ws}, Env: []string{"PATH=/usr/bin:/bin"}, Network: NetworkAllow}, "touch", marker)
	if _, stderr, code := runCmd(cmd); code != 0 {
		t.Fatalf("the unchanged launcher: code %d, stderr %q", code, stderr)
	}
}
