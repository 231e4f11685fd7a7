package builtin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// attack2Policy grants echo, cat, sleep and ls with shell allowed, set
// (for set -m) and timeout, writes only to out/, and the further
// subprocess.allow patterns in more (CUE list elements, each after a
// comma).
const attack2Policy = `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	network: mode: "deny"
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "sleep *", "ls *", "set *", "timeout *"%s], shell: "allow"}
}
`

// alive reports whether pid is a process that still runs something: not
// gone, and not a zombie with no thread left (a process whose main
// thread exited shows "Z" in /proc/PID/stat while its other threads run,
// so the threads are what is counted).
func alive(pid int) bool {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return false
	}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X' {
			return true
		}
	}
	return false
}

// readPid reads a pid a helper wrote to file, waiting a moment for it.
func readPid(t *testing.T, file string) int {
	t.Helper()
	for range 100 {
		b, err := os.ReadFile(file)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", file)
	return 0
}

// TestAttackDaemonizingProgramCallSucceeds: the docs say a program that
// leaves the command's session (setsid) is not killed but "the call
// fails background_escaped". That holds only while the escaped process
// holds the command's output pipes (exec.ErrWaitDelay is the only
// signal of an escape). A daemon does what daemons do — fork, setsid,
// and point stdin/stdout/stderr at /dev/null — so the pipes close, no
// process is left in the session, and the call "succeeded" while the
// daemon runs on. No escape program is needed: `git daemon --detach`
// under a policy granting `git *` (so too `ssh-agent`, gpg's autostarted
// gpg-agent, `node -e` spawning {detached: true}, any interpreter). Here
// the daemon also listens on the network under network.mode deny, past
// the end of the call the evidence records as a clean success.
//
// Fixed would be either an honest outcome (background_escaped: the
// escape is seen, e.g. as an orphan reparented to polc as a child
// subreaper) or containment (the daemon gone when Execute returns).
func TestAttackDaemonizingProgramCallSucceeds(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	ws, run := rig(t, fmt.Sprintf(attack2Policy, `, "git *"`))
	cmd := "git daemon --detach --reuseaddr --listen=127.0.0.1 --port=" + port + " --base-path=out --pid-file=out/daemon.pid"
	start := time.Now()
	out := run(context.Background(), "bash", map[string]any{"command": cmd}, 10*time.Second)
	took := time.Since(start)
	pid := readPid(t, filepath.Join(ws, "out", "daemon.pid"))
	defer syscall.Kill(pid, syscall.SIGKILL)
	got := outcomeOf(out)
	running := alive(pid)
	t.Logf("%q: %s after %v; the daemon (pid %d) still runs: %v", cmd, got, took, pid, running)
	if got == "succeeded" && running {
		t.Errorf("the call %s while the daemon it started (pid %d, left its session, output at /dev/null) runs on; docs/executor.md says such a call fails background_escaped", got, pid)
	}
}
