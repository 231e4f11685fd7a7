//go:build linux

package sandbox_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"polc.dev/polc/sandbox"
)

// TestExtraFilesReachTarget: Spec.ExtraFiles reach the target at 3, 4, ...
// as exec.Cmd.ExtraFiles would place them, in every network mode (under
// NetworkProxy through the forwarder and a second launcher): it reads one,
// a file outside every grant (a passed descriptor is already open), and
// writes another, in the write root, and a nil entry stays closed.
func TestExtraFilesReachTarget(t *testing.T) {
	f := newFixture(t)
	in := filepath.Join(f.outside, "in")
	out := filepath.Join(f.ws, "out")
	mustWrite(t, in, "passed-in\n")
	for _, n := range allNetworks {
		t.Run(n.String(), func(t *testing.T) {
			rf, err := os.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer rf.Close()
			wf, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			defer wf.Close()
			spec := withProxy(t, f.spec(n))
			spec.ExtraFiles = []*os.File{rf, nil, wf}
			r := run(t, spec, sh(`read -r line <&3 && echo "got $line" >&5
{ true >&4; } 2>/dev/null && echo "4 is open" >&5
cat `+in+` 2>&1 || echo "path denied" >&5`)...)
			ok(t, "target", r)
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != "got passed-in\npath denied\n" {
				t.Errorf("written through descriptor 5: %q\n%v", got, r)
			}
		})
	}
}

// TestOnlyPassedDescriptorsReachTarget: a descriptor the parent left open
// without close-on-exec reaches a plain child (so the test's leak is
// real) but not a sandboxed target, which holds 0, 1, 2 and the passed
// file only.
func TestOnlyPassedDescriptorsReachTarget(t *testing.T) {
	f := newFixture(t)
	leaky, err := os.Open(filepath.Join(f.outside, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer leaky.Close()
	// A duplicate without close-on-exec, above every descriptor in use.
	leak, err := unix.FcntlInt(leaky.Fd(), unix.F_DUPFD, 200)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)
	passed, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer passed.Close()
	// ls lists its own descriptors: what it inherited, and the directory it
	// reads at the lowest free number (4 here). No pipeline: bash holds a
	// pipeline's pipes while it starts its commands.
	list := `exec ls /proc/self/fd`
	plain := exec.Command("bash", "-c", list)
	plain.Env = baseEnv
	o, err := plain.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(o)), strconv.Itoa(leak)) {
		t.Fatalf("a plain child does not inherit descriptor %d (%q): the test shows nothing", leak, o)
	}
	for _, n := range allNetworks {
		spec := withProxy(t, f.spec(n))
		spec.ExtraFiles = []*os.File{passed}
		r := run(t, spec, sh(list)...)
		ok(t, n.String(), r)
		if got := fds(r.stdout); got != "0 1 2 3 4" {
			t.Errorf("%s: the target holds descriptors %q, want 0 1 2 3 (and ls's own 4)", n, got)
		}
	}
}

// TestProxyForwarderLetsGoOfPassedFiles: under NetworkProxy the forwarder
// passes the files to the target's launcher and closes its own copies at
// once: when the target closes the write end it was given, the reader
// sees end of file while the target (and the forwarder) still run.
func TestProxyForwarderLetsGoOfPassedFiles(t *testing.T) {
	f := newFixture(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	spec := withProxy(t, f.spec(sandbox.NetworkProxy))
	spec.Env = baseEnv
	spec.ExtraFiles = []*os.File{pw}
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	cmd, err := sandbox.Command(ctx, spec, sh("echo via-fd >&3; exec 3>&-; cat >/dev/null"))
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	res, err := start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(pr)
		got <- string(b)
	}()
	select {
	case s := <-got:
		if s != "via-fd\n" {
			t.Errorf("read %q through the passed pipe", s)
		}
		select {
		case r := <-res:
			t.Fatalf("the target ended before its stdin closed: %v", r)
		default:
		}
	case <-time.After(10 * time.Second):
		t.Error("no end of file on the passed pipe while the target runs: the forwarder keeps its copy")
	}
	stdin.Close()
	if r := <-res; r.code != 0 {
		t.Errorf("target: %v", r)
	}
}

// TestCommandRefusesTooManyExtraFiles: descriptors stay below 1024.
func TestCommandRefusesTooManyExtraFiles(t *testing.T) {
	spec := sandbox.Spec{Env: baseEnv, Network: sandbox.NetworkAllow, ExtraFiles: make([]*os.File, 1001)}
	if _, err := sandbox.Command(context.Background(), spec, []string{"true"}); err == nil || !strings.Contains(err.Error(), "more than 1000") {
		t.Fatalf("1001 extra files: %v", err)
	}
}

// TestDedicatedLauncher: cmd/polc-sandbox, built, runs targets in every
// network mode with passed files, as the re-executed binary does.
func TestDedicatedLauncher(t *testing.T) {
	launcher := buildLauncher(t)
	if err := sandbox.UseLauncher(launcher); err != nil {
		t.Fatal(err)
	}
	defer sandbox.UseLauncher("")
	if r := sandbox.Probe(); r.Launcher != launcher || !r.UserNetNamespaces {
		t.Fatalf("Probe with the dedicated launcher: %+v", r)
	}
	f := newFixture(t)
	for _, n := range allNetworks {
		wf, err := os.Create(filepath.Join(f.ws, "out-"+n.String()))
		if err != nil {
			t.Fatal(err)
		}
		spec := withProxy(t, f.spec(n))
		spec.ExtraFiles = []*os.File{wf}
		r := run(t, spec, sh("echo via-fd >&3; cat "+filepath.Join(f.outside, "secret")+"; exec ls /proc/self/fd")...)
		wf.Close()
		if r.code != 0 || fds(r.stdout) != "0 1 2 3 4" || !strings.Contains(r.stderr, "Permission denied") {
			t.Errorf("%s: %v", n, r)
		}
		if b, _ := os.ReadFile(filepath.Join(f.ws, "out-"+n.String())); string(b) != "via-fd\n" {
			t.Errorf("%s: written through the passed file: %q", n, b)
		}
	}
	// Run by hand, it says what it is and exits 2.
	cmd := exec.Command(launcher)
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "runs only when polc starts it") {
		t.Errorf("run by hand: %v %q", err, out)
	}
}

// fds returns ls's listing of descriptors sorted by number, space-separated.
func fds(listing string) string {
	var ns []int
	for _, f := range strings.Fields(listing) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return "unexpected: " + listing
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)
	var out []string
	for _, n := range ns {
		out = append(out, strconv.Itoa(n))
	}
	return strings.Join(out, " ")
}
