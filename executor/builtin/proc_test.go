package builtin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/snapshot"
)

// procPolicy grants the programs the process tests run, shell allowed,
// and writes to out/.
const procPolicy = `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "sleep *", "true *", "set *", "setsid *", "wait *"], shell: "allow"}
}
`

// procRig compiles procPolicy, makes a workspace with out/, and returns
// a function that runs one bash command through Execute with the real
// built-in callables, the request's timeout and the caller's context.
// Processes left in the workspace are killed when the test ends.
func procRig(t *testing.T) (ws string, run func(ctx context.Context, command string, timeout time.Duration) executor.Outcome) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("finds the command's processes through /proc")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws, execute := rig(t, procPolicy)
	return ws, func(ctx context.Context, command string, timeout time.Duration) executor.Outcome {
		return execute(ctx, "bash", map[string]any{"command": command}, timeout)
	}
}

// rig compiles the policy file src, makes a workspace with out/, and
// returns a function that runs one request through Execute with the real
// built-in callables. Processes left in the workspace are killed when the
// test ends.
func rig(t *testing.T, src string) (ws string, run func(ctx context.Context, action string, args map[string]any, timeout time.Duration) executor.Outcome) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	snap := res.Snapshots[0]
	ws = filepath.Join(dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killIn(ws) })
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{}); err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}})
	if err != nil {
		t.Fatal(err)
	}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "t", Workspace: ws, Backend: executor.InProcessBackendName, Profile: executor.ProfileMinimal,
		Policy: executor.SnapshotRefOf(snap)}
	var n atomic.Int64
	return ws, func(ctx context.Context, action string, args map[string]any, timeout time.Duration) executor.Outcome {
		return e.Execute(ctx, executor.ExecutionRequest{RequestID: fmt.Sprintf("r%d", n.Add(1)), Action: action,
			Arguments: args, Scope: ec.Scope, Timeout: timeout}, ec)
	}
}

// outcomeOf is an outcome's kind, with a failure's class.
func outcomeOf(out executor.Outcome) string {
	if f, ok := out.(*executor.Failed); ok {
		return "failed " + f.Class
	}
	return string(out.Kind())
}

// TestBashCallEndsItsProcesses: the bash callable killed only bash when
// the request's timeout passed, and cmd.Wait waited for every holder of
// the output pipes, so "cat /dev/zero > /dev/null &" made Execute
// return never (the cat keeps stderr open), and with its output
// elsewhere Execute returned "succeeded" at once while the cat ran on.
// Now the command starts in a session of its own, and what is still
// running there when its main process has exited (and a short grace
// passed) is killed and gone before Execute returns: the call fails
// background_killed, soon, and nothing runs on in the workspace — jobs
// that bash put in process groups of their own (set -m) included.
func TestBashCallEndsItsProcesses(t *testing.T) {
	ws, run := procRig(t)
	for _, cmd := range []string{
		"cat /dev/zero > /dev/null &",
		"cat /dev/zero > /dev/null 2>&1 &",
		"sleep 100 &",
		"sleep 100 & sleep 100 & echo started",
		"(sleep 100; echo) > /dev/null 2>&1 &",
		"(sleep 100 & sleep 100) &",
		"set -m; sleep 100 & cat /dev/zero > /dev/null &",
	} {
		start := time.Now()
		out := run(context.Background(), cmd, 10*time.Second)
		took := time.Since(start)
		if got := outcomeOf(out); got != "failed background_killed" {
			t.Errorf("%q: %s, want failed background_killed", cmd, got)
		}
		if took > 5*time.Second {
			t.Errorf("%q: Execute took %v with a 10 s timeout; the main process exits at once", cmd, took)
		}
		if left := procsIn(ws); len(left) > 0 {
			t.Errorf("%q: processes %v still run in the workspace after Execute returned", cmd, left)
			killIn(ws)
		}
	}
	// What ends before the main process, or within the grace after it,
	// is no background left running: "cmd > >(reader)" is bash's own
	// idiom, and bash does not wait for the reader.
	for cmd, file := range map[string]string{
		"echo hi > >(cat > out/procsub)":                 "out/procsub",
		"sleep 0.05 & echo hi > out/waited; wait":        "out/waited",
		"(sleep 0.05; echo hi > out/late) > /dev/null &": "out/late",
	} {
		// The grace is 200 ms of wall time: on a machine loaded by other
		// test binaries a 50 ms job can overrun it once, so it gets three
		// tries; a grace that is not honoured at all fails all three.
		var got string
		for range 3 {
			os.Remove(filepath.Join(ws, file))
			if got = outcomeOf(run(context.Background(), cmd, 10*time.Second)); got == "succeeded" {
				break
			}
		}
		if got != "succeeded" {
			t.Errorf("%q: %s, want succeeded", cmd, got)
		}
		if b, err := os.ReadFile(filepath.Join(ws, file)); string(b) != "hi\n" {
			t.Errorf("%q: %s holds %q (%v), want hi", cmd, file, b, err)
		}
	}
}

// TestBashCallEndsItsProcessesBeforeReturning: a background process
// writing a file every 50 ms writes nothing more once Execute has
// returned — after its main process exited, at the request's timeout,
// and when the caller's context was cancelled — and Execute returns
// within a bounded time of each, with the outcome it names. The cancel
// comes once the writer has written (the test polls its file), so the
// test shows something on a slow machine too; the main process's sleep
// and the timeout, which the test cannot time so, are doubled (up to
// four tries) while the writer had written nothing when Execute returned.
func TestBashCallEndsItsProcessesBeforeReturning(t *testing.T) {
	ws, run := procRig(t)
	writer := func(f string) string {
		return "(while true; do echo x >> out/" + f + "; sleep 0.05; done) > /dev/null 2>&1 & "
	}
	cases := []struct {
		name    string
		cmd     func(file string, try int) string
		timeout time.Duration // the request's, doubled at each try when scaled
		scaled  bool
		cancel  bool // cancel the context once the writer has written
		want    string
		within  time.Duration // Execute returns within this after the timeout (or cancel, or exit)
	}{
		{"exited", func(f string, try int) string { return writer(f) + fmt.Sprintf("sleep %.1f", 0.3*float64(int(1)<<try)) }, 10 * time.Second, false, false, "failed background_killed", 5 * time.Second},
		{"timeout", func(f string, _ int) string { return writer(f) + "sleep 100" }, 500 * time.Millisecond, true, false, "timed_out", 3500 * time.Millisecond},
		{"timeout_output_held", func(f string, _ int) string { return writer(f) + "cat /dev/zero & sleep 100" }, 500 * time.Millisecond, true, false, "timed_out", 3500 * time.Millisecond},
		{"cancelled", func(f string, _ int) string { return writer(f) + "sleep 100" }, 10 * time.Second, false, true, "cancelled", 3500 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for try := range 4 {
				file := fmt.Sprintf("%s%d", c.name, try)
				f := filepath.Join(ws, "out", file)
				timeout := c.timeout
				if c.scaled {
					timeout <<= try
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var cancelledAt atomic.Int64
				if c.cancel {
					go func() {
						for ctx.Err() == nil {
							if fi, err := os.Stat(f); err == nil && fi.Size() > 0 {
								cancelledAt.Store(time.Now().UnixNano())
								cancel()
								return
							}
							time.Sleep(5 * time.Millisecond)
						}
					}()
				}
				start := time.Now()
				out := run(ctx, c.cmd(file, try), timeout)
				end := time.Now()
				before, err := os.ReadFile(f)
				if err != nil || len(before) == 0 {
					if try < 3 && !c.cancel {
						t.Logf("try %d: the writer wrote nothing before Execute returned (%s); more time", try, outcomeOf(out))
						killIn(ws)
						continue
					}
					t.Fatalf("the writer wrote nothing before Execute returned (%v, %s): the test shows nothing", err, outcomeOf(out))
				}
				if got := outcomeOf(out); got != c.want {
					t.Errorf("%s, want %s", got, c.want)
				}
				from := start
				if c.scaled {
					from = start.Add(timeout)
				}
				if at := cancelledAt.Load(); at != 0 {
					from = time.Unix(0, at)
				}
				if took := end.Sub(from); took > c.within {
					t.Errorf("Execute returned %v after it should have begun ending the call, want at most %v", took, c.within)
				}
				time.Sleep(300 * time.Millisecond)
				if after, _ := os.ReadFile(f); len(after) != len(before) {
					t.Errorf("the background writer wrote %d bytes after Execute returned", len(after)-len(before))
				}
				if left := procsIn(ws); len(left) > 0 {
					t.Errorf("processes %v still run in the workspace", left)
				}
				return
			}
		})
	}
}

// TestBashCallProcessLeavingTheSessionCannotHoldIt: a program that
// leaves the command's session (setsid) is not found, and is not killed
// — the in-process backend contains nothing — but holding the output
// pipes it cannot keep Execute from returning: the pipes are closed a
// second after the session ended, and the call fails background_escaped.
func TestBashCallProcessLeavingTheSessionCannotHoldIt(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	ws, run := procRig(t)
	start := time.Now()
	out := run(context.Background(), "setsid sleep 100 & sleep 0.3", 10*time.Second)
	took := time.Since(start)
	if got := outcomeOf(out); got != "failed background_escaped" {
		t.Errorf("%s, want failed background_escaped", got)
	}
	if took > 5*time.Second {
		t.Errorf("Execute took %v", took)
	}
	if len(procsIn(ws)) != 1 {
		t.Errorf("want the one escaped sleep still running (what this backend cannot contain), found %v", procsIn(ws))
	}
}

// TestConcurrentBashCallsEndTheirProcesses: several calls at once, each
// leaving background processes (some ending at their timeout), each end
// their own processes and return in time; nothing is left running. Run
// it under -race (.ci/run does).
func TestConcurrentBashCallsEndTheirProcesses(t *testing.T) {
	ws, run := procRig(t)
	const callers, rounds = 8, 3
	var wg sync.WaitGroup
	errs := make(chan string, callers*rounds)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				cmd, timeout, want := "sleep 100 & cat /dev/zero > /dev/null & echo "+strconv.Itoa(i), 10*time.Second, "failed background_killed"
				if (i+r)%2 == 1 {
					cmd, timeout, want = "sleep 100 & cat /dev/zero & sleep 100", time.Second, "timed_out"
				}
				start := time.Now()
				out := run(context.Background(), cmd, timeout)
				if got := outcomeOf(out); got != want {
					errs <- fmt.Sprintf("caller %d round %d %q: %s, want %s", i, r, cmd, got, want)
				}
				if took := time.Since(start); took > 8*time.Second {
					errs <- fmt.Sprintf("caller %d round %d %q: took %v", i, r, cmd, took)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if left := procsIn(ws); len(left) > 0 {
		t.Errorf("processes %v still run in the workspace", left)
	}
}

// procsIn lists the processes whose working directory is dir.
func procsIn(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killIn kills the processes whose working directory is dir.
func killIn(dir string) {
	for _, pid := range procsIn(dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

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

// threadsPolicy grants echo, cat, sleep, set (for set -m), timeout and
// setsid with shell allowed, writes only to out/, and the further
// subprocess.allow patterns in more (CUE list elements, each after a
// comma).
const threadsPolicy = `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	network: mode: "deny"
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "sleep *", "set *", "timeout *", "setsid *"%s], shell: "allow"}
}
`

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

// TestBashCallEndsProcessWhoseMainThreadExited: /proc/PID/stat shows the
// main thread's state, and a multi-threaded process whose main thread
// has exited (pthread_exit) shows "Z" there while its other threads run.
// Such a process was skipped as a zombie: in a process group of its own
// (a job under set -m, a child of timeout, which calls setpgid) nothing
// killed it, and it wrote out/ after Execute returned. A Z process with
// a live thread (/proc/PID/task) is a member of the session still: it is
// killed, and nothing writes after Execute returned.
func TestBashCallEndsProcessWhoseMainThreadExited(t *testing.T) {
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
	ws, run := rig(t, fmt.Sprintf(threadsPolicy, `, "`+bin+` *"`))
	for name, cmd := range map[string]string{
		"set_m":   "set -m; " + bin + " out/set_m out/set_m.pid > /dev/null 2>&1 &",
		"timeout": "timeout 100 " + bin + " out/timeout out/timeout.pid > /dev/null 2>&1 &",
	} {
		t.Run(name, func(t *testing.T) {
			out := run(context.Background(), "bash", map[string]any{"command": cmd}, 10*time.Second)
			pid := readPid(t, filepath.Join(ws, "out", name+".pid"))
			defer syscall.Kill(pid, syscall.SIGKILL)
			if got := outcomeOf(out); got != "failed background_killed" {
				t.Errorf("%q: %s, want failed background_killed", cmd, got)
			}
			if alive(pid) {
				t.Errorf("pid %d (main thread exited) still runs after Execute returned", pid)
			}
			f := filepath.Join(ws, "out", name)
			before, _ := os.ReadFile(f)
			time.Sleep(300 * time.Millisecond)
			if after, _ := os.ReadFile(f); len(after) != len(before) {
				t.Errorf("a process of the command's session (pid %d, main thread exited) wrote %d bytes after Execute returned", pid, len(after)-len(before))
			}
		})
	}
}

// TestBashCallEscapeOutranksExitStatus: a process that left the session
// and holds the output was reported only when bash exited 0: with a
// non-zero exit the call failed exit_status, and at the timeout it was
// timed_out, the escape in no field. The call now fails
// background_escaped whatever bash's exit status (the result keeps the
// exit code); at the timeout the outcome stays timed_out and its stage-13
// detail names background_escaped.
func TestBashCallEscapeOutranksExitStatus(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	_, run := rig(t, fmt.Sprintf(threadsPolicy, ""))
	cmd := "setsid sleep 30 & cat out/missing"
	out := run(context.Background(), "bash", map[string]any{"command": cmd}, 10*time.Second)
	if got := outcomeOf(out); got != "failed background_escaped" {
		t.Errorf("%q: %s, want failed background_escaped", cmd, got)
	}
	cmd = "setsid sleep 30 & sleep 100"
	out = run(context.Background(), "bash", map[string]any{"command": cmd}, 500*time.Millisecond)
	if got := outcomeOf(out); got != "timed_out" {
		t.Errorf("%q: %s, want timed_out", cmd, got)
	}
	var detail string
	for _, e := range out.Base().Trail {
		if e.Stage == 13 {
			detail = e.Detail
		}
	}
	if !strings.Contains(detail, "background_escaped") {
		t.Errorf("%q: stage 13 detail %q does not name background_escaped", cmd, detail)
	}
}
