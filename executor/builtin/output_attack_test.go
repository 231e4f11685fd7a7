package builtin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/executor/builtin"
)

// buildC compiles the C program src into a temporary directory and
// returns its path (the test is skipped without a C compiler).
func buildC(t *testing.T, name, src string) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("linux")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	bin := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(bin+".c", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(cc, "-O2", "-o", bin, bin+".c").CombinedOutput(); err != nil {
		t.Skipf("cc: %v: %s", err, b)
	}
	return bin
}

// reopenC leaves the command's session (setsid) holding the command's
// stdout and stderr, and opens a read end of each pipe through
// /proc/self/fd (a pipe made by pipe(2) can be reopened by path, like a
// FIFO). Once the main process has exited (its parent changed) and polc
// waits in output.finish's poll(2) on the two read ends (a thread of
// polc's — the parent of its parent — in poll or ppoll (syscall 7 or 271 on amd64) with nfds 2, read
// from /proc/PID/task/TID/syscall), it fills each pipe (enlarged to
// 1 MiB, F_SETPIPE_SZ; vmsplice is far faster than polc's copy can
// read), closes every write end it holds — the pipes have no writer, and
// finish's poll returns with POLLHUP on both — and as soon as that thread
// has left poll it opens a NEW write end of each pipe through its read
// end's /proc path, while polc's copies are still reading the backlog.
// It holds them argv[2] seconds, then exits.
const reopenC = `#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
static int polc;
/* pollThread returns a thread of polc's in poll(fds, 2, ...), or 0. */
static int pollThread(void) {
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/task", polc);
	DIR *d = opendir(p);
	if (!d) return 0;
	struct dirent *e;
	int tid = 0;
	while (!tid && (e = readdir(d))) {
		char q[128], b[256];
		snprintf(q, sizeof q, "%s/%s/syscall", p, e->d_name);
		FILE *f = fopen(q, "r");
		if (!f) continue;
		if (fgets(b, sizeof b, f)) {
			long nr; unsigned long a0, a1;
			if (sscanf(b, "%ld %lx %lx", &nr, &a0, &a1) == 3 && (nr == 7 || nr == 271) && a1 == 2) tid = atoi(e->d_name);
		}
		fclose(f);
	}
	closedir(d);
	return tid;
}
static int inPoll(int tid) {
	char q[128], b[256];
	snprintf(q, sizeof q, "/proc/%d/task/%d/syscall", polc, tid);
	FILE *f = fopen(q, "r");
	if (!f) return 0;
	int in = fgets(b, sizeof b, f) && (strncmp(b, "7 ", 2) == 0 || strncmp(b, "271 ", 4) == 0);
	fclose(f);
	return in;
}
int main(int argc, char **argv) {
	pid_t parent = getppid();
	char p[64], b[512];
	snprintf(p, sizeof p, "/proc/%d/stat", parent);
	FILE *f = fopen(p, "r");
	fread(b, 1, sizeof b - 1, f);
	fclose(f);
	sscanf(strrchr(b, ')') + 4, "%d", &polc);
	setsid();
	f = fopen(argv[1], "w");
	fprintf(f, "%d\n", getpid());
	fclose(f);
	int r[2], sz[2];
	size_t offs[2];
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof p, "/proc/self/fd/%d", i + 1);
		r[i] = open(p, O_RDONLY | O_NONBLOCK);
		sz[i] = fcntl(i + 1, F_SETPIPE_SZ, 1 << 20);
	}
	size_t n = 1 << 20;
	char *buf = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(buf, 'x', n);
	for (int i = 0; i < 2000 && getppid() == parent; i++)
		usleep(5000);
	int tid = 0;
	for (int i = 0; i < 3000 && !(tid = pollThread()); i++)
		usleep(1000);
	for (int i = 0; i < 2; i++) {
		fcntl(i + 1, F_SETFL, O_NONBLOCK);
		size_t off = 0;
		while (off < n) {
			struct iovec iov = {buf + off, n - off};
			ssize_t k = vmsplice(i + 1, &iov, 1, SPLICE_F_NONBLOCK);
			if (k <= 0) break;
			off += k;
		}
		offs[i] = off;
	}
	/* One pipe at a time: poll returns at the first POLLHUP, and finish
	   polls again for the other pipe's. */
	close(1);
	for (int i = 0; i < 100000 && tid && inPoll(tid); i++)
		;
	for (int i = 0; i < 100000 && tid && !inPoll(tid); i++)
		;
	close(2);
	for (int i = 0; i < 100000 && tid && inPoll(tid); i++)
		;
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof p, "/proc/self/fd/%d", r[i]);
		open(p, O_WRONLY);
	}
	sleep(atoi(argv[2]));
	return 0;
}
`

// TestReopenedWriterCannotHoldTheCall: output.finish trusted one POLLHUP
// per pipe ("no writer left") and then waited for the copies to read to
// the end, with no deadline. But a pipe's writer count can go back up:
// anyone who can open a read end's /proc/PID/fd path gets a new write
// end. A process that left the session filled the pipes, dropped every
// writer for a moment, and reopened one while polc's copies were still
// reading the backlog: Execute with a 2 s timeout did not return while
// the holder lived. Now reading the rest is bounded (killWait): Execute
// returns in time, and the call fails background_escaped — or, when the
// copies read to the end before the writer came back, succeeds: a
// process that left the session and held no output when polc looked is
// the daemon the in-process backend does not see (docs/executor.md).
func TestReopenedWriterCannotHoldTheCall(t *testing.T) {
	bin := buildC(t, "reopen", reopenC)
	ws, run := rig(t, fmt.Sprintf(threadsPolicy, `, "`+bin+` *"`))
	// The race (polc's poll against its copy) is won most of the time,
	// not always: a few tries, and the first the holder wins fails.
	for try := range 6 {
		pidFile := filepath.Join(ws, "out", fmt.Sprintf("reopen%d.pid", try))
		cmd := bin + " " + pidFile + " 20 & sleep 0.2"
		done := make(chan string, 1)
		start := time.Now()
		go func() {
			done <- outcomeOf(run(context.Background(), "bash", map[string]any{"command": cmd}, 2*time.Second))
		}()
		var got string
		select {
		case got = <-done:
		case <-time.After(10 * time.Second):
		}
		took := time.Since(start)
		syscall.Kill(readPid(t, pidFile), syscall.SIGKILL)
		if got == "" {
			got = <-done // the holder is gone: the copies read to the end
			t.Fatalf("try %d: %q with a 2 s timeout: Execute had not returned after %v (output.finish waits for a copy whose pipe got a new writer after POLLHUP); it returned %s once the holder was killed", try, cmd, took, got)
		}
		if got != "failed background_escaped" && got != "succeeded" && got != "timed_out" {
			t.Fatalf("try %d: %q: %s after %v, want failed background_escaped (or succeeded, had the copies read to the end before the writer came back, or timed_out, had the request's deadline passed while they read)", try, cmd, got, took)
		}
		if took > 4*time.Second {
			t.Fatalf("try %d: %q with a 2 s timeout: Execute took %v", try, cmd, took)
		}
	}
}

// TestOutputBeyondMaxOutputIsNotKept: MaxOutput bounds captured output
// (limitedBuffer keeps the first max bytes). io.Copy(buf, pipe) used the
// destination's ReadFrom, and *limitedBuffer had bytes.Buffer's, promoted
// from the embedded field: every byte was read into memory, past max,
// and returned in stdout (unbounded memory: "cat /dev/zero").
func TestOutputBeyondMaxOutputIsNotKept(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux")
	}
	ws := t.TempDir()
	fns, err := builtin.Callables(builtin.Options{Workspace: ws, MaxOutput: 1000})
	if err != nil {
		t.Fatal(err)
	}
	res, err := fns["bash"](context.Background(), map[string]any{"command": "head -c 100000 /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.(map[string]any)["stdout"].(string)); n > 1000 {
		t.Errorf("MaxOutput 1000: stdout holds %d bytes", n)
	}
}

// fatC forks argv[1] processes that leave the command's session (setsid)
// and fill their descriptor tables (up to the hard RLIMIT_NOFILE) with
// copies of /dev/null, their stdout and stderr /dev/null too; then one
// more, forked last (so its pid is after theirs, and /proc lists it after
// them), that leaves the session too and keeps the command's stdout at
// its highest descriptor. Each lives at most argv[2] seconds.
const fatC = `#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
int main(int argc, char **argv) {
	int k = atoi(argv[1]), secs = atoi(argv[2]);
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	int n = rl.rlim_cur > 100000 ? 100000 : (int)rl.rlim_cur;
	for (int c = 0; c <= k; c++) {
		if (fork() != 0) continue;
		setsid();
		int z = open("/dev/null", O_RDWR);
		if (c == k) {
			dup2(1, n - 1);
		}
		dup2(z, 1);
		dup2(z, 2);
		for (int i = 3; i < n - 1; i++)
			if (i != z) dup2(z, i);
		sleep(secs);
		_exit(0);
	}
	return 0;
}
`

// TestHugeDescriptorTablesDoNotStretchTheCall: output.finish checked its
// hard deadline (killWait) only between scans, and a scan
// (outputWriters) reads every descriptor of every process on the machine
// — a readlink each — until it finds a foreign writer, twice. The
// command's escaped processes choose how long that takes: many of them
// with full descriptor tables, listed before the one holding the output,
// made each scan take seconds, and a request with a 5 s timeout returned
// 30 s later. The scan now stops at the deadline and the call fails
// closed (background_escaped) in time.
func TestHugeDescriptorTablesDoNotStretchTheCall(t *testing.T) {
	bin := buildC(t, "fat", fatC)
	_, run := rig(t, fmt.Sprintf(threadsPolicy, `, "`+bin+` *"`))
	cmd := bin + " 60 60; sleep 100"
	start := time.Now()
	out := run(context.Background(), "bash", map[string]any{"command": cmd}, 5*time.Second)
	took := time.Since(start)
	for _, e := range out.Base().Trail {
		if e.Stage == 13 {
			t.Logf("stage 13: %s", e.Detail)
		}
	}
	if got := outcomeOf(out); got != "timed_out" {
		t.Errorf("%q: %s, want timed_out", cmd, got)
	}
	// timeout 5 s (the processes need a moment to fill their tables) +
	// killWait 5 s + pipeGrace 1 s, and 2 s for a slow machine.
	if took > 13*time.Second {
		t.Errorf("%q with a 5 s timeout: Execute took %v (each scan of the output's writers reads every descriptor of every process)", cmd, took)
	}
}
