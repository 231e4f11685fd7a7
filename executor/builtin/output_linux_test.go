package builtin

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestOutputHolderHelper is not a test: run by TestOutputWritersAreJudged
// with POLC_HOLD_OUTPUT set, it is a child of the test binary that holds
// its stdout and stderr (an output's write ends) for that long, as a
// concurrent call's child holds copies of polc's descriptors between its
// fork and its exec.
func TestOutputHolderHelper(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("POLC_HOLD_OUTPUT"))
	if err != nil {
		t.Skip("a helper process")
	}
	time.Sleep(d)
	os.Exit(0)
}

// TestOutputWritersAreJudged: once a command's session has ended,
// finish reports an escape only for a writer of the output that is a
// process of another program (one that left the session, holding the
// output), and then returns after pipeGrace; a writer that is a child of
// polc's own executable (a concurrent call's fork before its exec) is
// waited for, and reported only if it outlasts killWait.
func TestOutputWritersAreJudged(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	cases := []struct {
		name        string
		argv        []string
		env         string
		escaped     bool
		least, most time.Duration
	}{
		{"no_writer_left", []string{"/bin/sh", "-c", "echo out; echo err >&2"}, "", false, 0, pipeGrace / 2},
		{"foreign_writer", []string{sleep, "30"}, "", true, pipeGrace, pipeGrace + 2*time.Second},
		{"own_fork_before_exec", []string{os.Args[0], "-test.run=^TestOutputHolderHelper$"}, "POLC_HOLD_OUTPUT=1500ms", false, 1500 * time.Millisecond, killWait},
		{"own_fork_outlasting_killWait", []string{os.Args[0], "-test.run=^TestOutputHolderHelper$"}, "POLC_HOLD_OUTPUT=30s", true, killWait, killWait + 2*time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out, err := newOutput(1 << 10)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.Env = append(os.Environ(), c.env)
			cmd.Stdout, cmd.Stderr = out.w[0], out.w[1]
			err = cmd.Start()
			out.started(err == nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Kill()
				cmd.Wait()
			}()
			start := time.Now()
			escaped := out.finish(context.Background())
			took := time.Since(start)
			if escaped != c.escaped {
				t.Errorf("escaped %v, want %v", escaped, c.escaped)
			}
			if took < c.least || took > c.most {
				t.Errorf("finish took %v, want %v to %v", took, c.least, c.most)
			}
			if c.name == "no_writer_left" && (out.stdout.String() != "out\n" || out.stderr.String() != "err\n") {
				t.Errorf("read %q and %q", out.stdout.String(), out.stderr.String())
			}
		})
	}
}

// TestWritersGoneLooksAtLeastOnce: with no time to wait, writersGone
// still asks the kernel once: true when no process holds a write end
// (finish, at the call's deadline, must not take a slow copy for a
// writer that came back), false while one does.
func TestWritersGoneLooksAtLeastOnce(t *testing.T) {
	out, err := newOutput(1 << 10)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "read x")
	cmd.Stdout, cmd.Stderr = out.w[0], out.w[1]
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	out.started(err == nil)
	if err != nil {
		t.Fatal(err)
	}
	if writersGone(out, 0) {
		t.Error("writersGone(0) = true while sh holds the output")
	}
	stdin.Close()
	cmd.Wait()
	gone := false
	for range 100 { // sh's exit closes its ends at once; allow the kernel a moment
		if gone = writersGone(out, 0); gone {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !gone {
		t.Error("writersGone(0) = false after the only writer exited")
	}
	out.finish(context.Background())
}
