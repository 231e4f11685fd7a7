package builtin_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/executor"
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

// zleaderC exits its main thread (pthread_exit) and keeps a second
// thread appending to argv[1] every 50 ms, for at most 10 s. It writes
// its pid to argv[2] first.
const zleaderC = `#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <fcntl.h>
static const char *path;
static void *writer(void *a) {
	for (int i = 0; i < 200; i++) {
		int fd = open(path, O_WRONLY|O_CREAT|O_APPEND, 0644);
		if (fd >= 0) { write(fd, "x\n", 2); close(fd); }
		usleep(50000);
	}
	_exit(0);
}
int main(int argc, char **argv) {
	pthread_t t;
	FILE *f = fopen(argv[2], "w");
	fprintf(f, "%d\n", getpid());
	fclose(f);
	path = argv[1];
	pthread_create(&t, 0, writer, 0);
	pthread_exit(0);
}
`

// TestAttackExitedMainThreadIsSkippedAsZombie: sessionMembers lists only
// processes whose /proc/PID/stat state is not Z or X, and that state is
// the main thread's. A multi-threaded process whose main thread has
// exited (pthread_exit) shows "Z" there while its other threads run on:
// it is skipped as a zombie. In the command's first process group the
// group kill reaches it, but in a group of its own — a job under
// `set -m`, or a child of `timeout`, which calls setpgid — nothing does:
// the call "succeeded" (or background_killed, having killed timeout
// only) and the process keeps writing out/ after Execute returned,
// though it never left the session. Any compiled program the policy
// grants can do this (here one built with cc; Java-, Go- or Rust-built
// tools whose main thread ends early would too).
//
// Fixed: a "Z" member with a live thread (/proc/PID/task) is a member to
// kill, and nothing of the command writes after Execute returned.
func TestAttackExitedMainThreadIsSkippedAsZombie(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	bin := filepath.Join(t.TempDir(), "zleader")
	if err := os.WriteFile(bin+".c", []byte(zleaderC), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(cc, "-o", bin, bin+".c", "-lpthread").CombinedOutput(); err != nil {
		t.Skipf("cc: %v: %s", err, b)
	}
	ws, run := rig(t, fmt.Sprintf(attack2Policy, `, "`+bin+` *"`))
	for name, cmd := range map[string]string{
		"set_m":   "set -m; " + bin + " out/set_m out/set_m.pid > /dev/null 2>&1 &",
		"timeout": "timeout 100 " + bin + " out/timeout out/timeout.pid > /dev/null 2>&1 &",
	} {
		t.Run(name, func(t *testing.T) {
			out := run(context.Background(), "bash", map[string]any{"command": cmd}, 10*time.Second)
			pid := readPid(t, filepath.Join(ws, "out", name+".pid"))
			defer syscall.Kill(pid, syscall.SIGKILL)
			f := filepath.Join(ws, "out", name)
			before, _ := os.ReadFile(f)
			time.Sleep(400 * time.Millisecond)
			after, _ := os.ReadFile(f)
			t.Logf("%q: %s; pid %d runs: %v; %d bytes written after Execute returned", cmd, outcomeOf(out), pid, alive(pid), len(after)-len(before))
			if len(after) != len(before) {
				t.Errorf("%s: a process of the command's session (pid %d, main thread exited) wrote %d bytes after Execute returned", outcomeOf(out), pid, len(after)-len(before))
			}
		})
	}
}

// TestAttackLoopbackNetworkIsNotTheLoopbackHost: the whole of 127.0.0.0/8
// is the local host on Linux (lo carries 127.0.0.1/8), yet a deny naming
// the loopback host by the names the docs use — 127.0.0.1, localhost,
// [::1] — judges 127.0.0.2 (and [::ffff:127.0.0.2], canonicalized to
// it) as another host, and host patterns cannot name the range (only a
// leading "*." is a wildcard). http_get and bash's /dev/tcp reach a
// local service: one bound to 127.0.0.2 here, and — checked by hand —
// any service bound to 0.0.0.0 or [::] at 127.0.0.2, 127.1.2.3, …. The
// unspecified address was refused because "a deny naming 127.0.0.1,
// localhost and [::1] would not see it" (docs/executor.md); the same
// holds for 16 million other addresses, and no doc says so.
//
// Fixed would be loopback addresses judged as the loopback host (or
// refused like the unspecified address), or at the least documented
// with a way to deny the range; the server is then not reached.
func TestAttackLoopbackNetworkIsNotTheLoopbackHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("127.0.0.0/8 is the loopback network on Linux")
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2: %v", err)
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); fmt.Fprint(w, "internal") })}
	go srv.Serve(ln)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_, run := rig(t, `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["http_get", "bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *"], shell: "allow"}
	network: {mode: "allow", deny: ["127.0.0.1", "localhost", "[::1]"]}
}
`)
	for _, u := range []string{"http://127.0.0.2:" + port + "/", "http://[::ffff:127.0.0.2]:" + port + "/"} {
		before := hits.Load()
		out := run(context.Background(), "http_get", map[string]any{"url": u}, 5*time.Second)
		if hits.Load() > before {
			t.Errorf("http_get %s: %s, and the loopback server was reached under a deny of 127.0.0.1, localhost and [::1]", u, outcomeOf(out))
		}
	}
	cmd := "echo -e 'GET / HTTP/1.0\\r\\n\\r\\n' > /dev/tcp/127.0.0.2/" + port
	before := hits.Load()
	out := run(context.Background(), "bash", map[string]any{"command": cmd}, 5*time.Second)
	for range 50 {
		if hits.Load() > before {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if hits.Load() > before {
		t.Errorf("%q: %s, and the loopback server was reached under a deny of 127.0.0.1, localhost and [::1]", cmd, outcomeOf(out))
	}
	if out.Kind() == executor.KindSucceeded {
		t.Logf("%q succeeded", cmd)
	}
}

// TestAttackEscapeHiddenByExitStatus: a process that left the session
// and holds the command's output is reported (background_escaped) only
// when bash exited 0. os/exec's Wait returns the *ExitError of a
// non-zero exit and drops exec.ErrWaitDelay, and the callable checks
// exit_status first anyway: "setsid sleep 30 & cat out/missing" fails
// exit_status, a class that says bash exited non-zero and nothing more,
// while the escaped sleep runs on holding stdout and stderr — though a
// process that survived the kill outranks exit_status in the same
// switch. The escape, the fact that matters, is in no outcome or
// result field.
//
// Fixed: the call fails background_escaped whatever bash's exit status
// (the result keeps exit_code).
func TestAttackEscapeHiddenByExitStatus(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	_, run := rig(t, fmt.Sprintf(attack2Policy, `, "setsid *"`))
	cmd := "setsid sleep 30 & cat out/missing"
	out := run(context.Background(), "bash", map[string]any{"command": cmd}, 10*time.Second)
	if got := outcomeOf(out); got != "failed background_escaped" {
		t.Errorf("%q: %s, want failed background_escaped (the sleep left the session and held the output past the pipe grace)", cmd, got)
	}
}

// TestAttackConcurrentEchoFailsBackgroundEscaped: many plain calls at
// once — `echo` exec'd directly, no shell, nothing in the background —
// fail background_escaped: cmd.Wait returned exec.ErrWaitDelay because a
// write end of the call's output pipe stayed open a second after every
// process of its session was gone, and the callable reads that as "a
// process that left the session still holds its output". No process of
// this call left its session (the likely holder is a child another call forked,
// which keeps a copy of every CLOEXEC descriptor until its exec — Go
// issue 22315 — slow on a loaded machine). The outcome accuses a call of an escape it did not
// make, and a caller retrying, or a policy reacting to escapes, acts on
// that. The repository's own TestConcurrentBashKeepsEachArgv fails the
// same way (3 runs in 4 of -count=4 on the 2-core VM).
//
// Fixed: a call none of whose processes left the session never fails
// background_escaped.
func TestAttackConcurrentEchoFailsBackgroundEscaped(t *testing.T) {
	_, run := rig(t, fmt.Sprintf(attack2Policy, ""))
	const callers, rounds = 64, 4
	var escaped, other atomic.Int64
	done := make(chan struct{})
	for i := range callers {
		go func() {
			defer func() { done <- struct{}{} }()
			for r := range rounds {
				out := run(context.Background(), "bash", map[string]any{"command": fmt.Sprintf("echo %d %d", i, r)}, 30*time.Second)
				switch got := outcomeOf(out); got {
				case "succeeded":
				case "failed background_escaped":
					escaped.Add(1)
				default:
					other.Add(1)
					t.Errorf("echo %d %d: %s", i, r, got)
				}
			}
		}()
	}
	for range callers {
		<-done
	}
	if n := escaped.Load(); n > 0 {
		t.Errorf("%d of %d plain echo calls failed background_escaped; none started a process that could leave its session", n, callers*rounds)
	}
}
