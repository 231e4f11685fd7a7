//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"polc.dev/polc/sandbox"
)

// startVictim starts a process outside the sandbox and returns it with a
// channel closed when it exits.
func startVictim(t *testing.T) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	v := exec.Command("sleep", "60")
	if err := v.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { v.Wait(); close(done) }()
	t.Cleanup(func() { v.Process.Kill(); <-done })
	return v, done
}

func exitedWithin(done <-chan struct{}, d time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func TestSignalsScoped(t *testing.T) {
	f := newFixture(t)
	v, done := startVictim(t)
	ok(t, "direct", direct(t, f.ws, "kill", "-0", strconv.Itoa(v.Process.Pid)))
	for _, n := range allNetworks {
		r := run(t, withProxy(t, f.spec(n)), "kill", "-9", strconv.Itoa(v.Process.Pid))
		denied(t, n.String(), r)
		if exitedWithin(done, 200*time.Millisecond) {
			t.Fatalf("%s: the victim died", n)
		}
	}
	// Without the sandbox the same kill works.
	ok(t, "direct kill", direct(t, f.ws, "kill", "-9", strconv.Itoa(v.Process.Pid)))
	if !exitedWithin(done, 5*time.Second) {
		t.Fatal("direct: the victim survived")
	}
	// Inside the sandbox, signals among its own processes work.
	ok(t, "own child", run(t, f.spec(sandbox.NetworkAllow), sh("sleep 30 & kill -9 $! && wait $!; test $? = 137")...))
}

func TestNoPrivileges(t *testing.T) {
	f := newFixture(t)
	for _, n := range allNetworks {
		r := run(t, withProxy(t, f.spec(n)), "grep", "-E", "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|SigBlk|SigIgn):", "/proc/self/status")
		ok(t, n.String(), r)
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			name, val, _ := strings.Cut(line, ":")
			val = strings.TrimSpace(val)
			want := "0000000000000000"
			if name == "NoNewPrivs" {
				want = "1"
			}
			if name == "SigIgn" {
				continue // inherited from the test's own parent, as with a direct exec
			}
			if val != want {
				t.Errorf("%s: %s = %s, want %s", n, name, val, want)
			}
		}
	}
}

func TestEnvironmentExact(t *testing.T) {
	f := newFixture(t)
	t.Setenv("POLC_SANDBOX_TEST_LEAK", "leak")
	env := []string{"PATH=/usr/bin:/bin", "ONE=1", "EMPTY=", "WITH_EQUALS=a=b", "ZED=last"}
	for _, n := range allNetworks {
		spec := withProxy(t, f.spec(n))
		spec.Env = env
		r := run(t, spec, "env")
		ok(t, n.String(), r)
		if got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); strings.Join(got, "|") != strings.Join(env, "|") {
			t.Errorf("%s: environment %q, want exactly %q", n, got, env)
		}
	}
	// Without PATH, argv[0] is looked up in /bin:/usr/bin.
	spec := f.spec(sandbox.NetworkAllow)
	spec.Env = []string{"A=b"}
	r := run(t, spec, "env")
	ok(t, "no PATH", r)
	if r.stdout != "A=b\n" {
		t.Errorf("no PATH: %q", r.stdout)
	}
}

func TestExitStatusPassthrough(t *testing.T) {
	f := newFixture(t)
	for _, n := range allNetworks {
		spec := withProxy(t, f.spec(n))
		if r := run(t, spec, sh("exit 7")...); r.code != 7 || r.sig != 0 {
			t.Errorf("%s: exit 7 gave\n%v", n, r)
		}
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGSEGV} {
			r := run(t, spec, sh(fmt.Sprintf("kill -%d $$", sig))...)
			if r.sig != sig {
				t.Errorf("%s: killed by %v gave\n%v", n, sig, r)
			}
		}
		// Not found and not executable: the launcher's statuses.
		if r := run(t, spec, "no-such-program-polc"); r.code != sandbox.ExitNotFound || !strings.HasPrefix(r.stderr, "polc sandbox: ") {
			t.Errorf("%s: missing program gave\n%v", n, r)
		}
		if r := run(t, spec, "/etc/shadow"); r.code != sandbox.ExitCannotExec || !strings.HasPrefix(r.stderr, "polc sandbox: exec") {
			t.Errorf("%s: denied program gave\n%v", n, r)
		}
	}
}

func TestRlimitFileSize(t *testing.T) {
	f := newFixture(t)
	big := filepath.Join(f.ws, "sub", "big")
	script := "head -c 1048576 /dev/zero > sub/big; echo status=$?"
	r := direct(t, f.ws, sh(script)...)
	if fi, err := os.Stat(big); err != nil || fi.Size() != 1<<20 || r.stdout != "status=0\n" {
		t.Fatalf("direct: %v %v\n%v", fi, err, r)
	}
	for _, n := range allNetworks {
		os.Remove(big)
		spec := withProxy(t, f.spec(n))
		spec.Limits.FileSizeBytes = 4096
		r := run(t, spec, sh(script)...)
		// head dies of SIGXFSZ (25): the shell reports 128+25.
		if r.stdout != "status=153\n" {
			t.Errorf("%s: %v", n, r)
		}
		if fi, err := os.Stat(big); err != nil || fi.Size() > 4096 {
			t.Errorf("%s: big is %v (%v)", n, fi, err)
		}
	}
}

func TestRlimitCPU(t *testing.T) {
	f := newFixture(t)
	spec := f.spec(sandbox.NetworkAllow)
	spec.Limits.CPUSeconds = 1
	start := time.Now()
	r := run(t, spec, sh("while :; do :; done")...)
	if r.sig != syscall.SIGXCPU {
		t.Fatalf("busy loop under a 1 s CPU limit: %v (after %v)", r, time.Since(start))
	}
}

// Under uid 0 the kernel ignores RLIMIT_NPROC, so Command refuses the limit
// (and so would the launcher, see TestLauncherRefusesVoidProcessLimit).
func TestProcessesLimitRefusedForRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs uid 0")
	}
	f := newFixture(t)
	spec := f.spec(sandbox.NetworkAllow)
	spec.Limits.Processes = 5
	_, err := sandbox.Command(context.Background(), spec, []string{"true"})
	if !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("Command with Processes under uid 0: %v", err)
	}
	if fc, _ := sandbox.Probe().Facet(sandbox.FacetRlimits); fc.State != sandbox.Degraded {
		t.Errorf("Probe rlimits: %+v", fc)
	}
}

func TestLauncherRefusals(t *testing.T) {
	f := newFixture(t)
	marker := filepath.Join(f.ws, "sub", "marker")
	script := "touch " + marker
	refused := func(t *testing.T, what string, cmd *exec.Cmd, wantMsg string) {
		t.Helper()
		r := wait(cmd)
		if r.code != sandbox.ExitRefused || !strings.HasPrefix(r.stderr, "polc sandbox: ") ||
			strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, wantMsg) {
			t.Errorf("%s: want refusal mentioning %q, got\n%v", what, wantMsg, r)
		}
		if exists(marker) {
			t.Errorf("%s: the target ran", what)
			os.Remove(marker)
		}
	}
	ok(t, "direct", direct(t, f.ws, sh(script)...))
	os.Remove(marker)

	t.Run("deny beyond the entry cap", func(t *testing.T) {
		big := filepath.Join(f.ws, "big")
		mustMkdir(t, big)
		for i := range 4097 {
			mustWrite(t, filepath.Join(big, strconv.Itoa(i)), "")
		}
		defer os.RemoveAll(big)
		spec := f.spec(sandbox.NetworkAllow)
		spec.Deny = []string{filepath.Join(big, "0")}
		cmd, err := sandbox.Command(context.Background(), spec, sh(script))
		if err != nil {
			t.Fatal(err)
		}
		refused(t, "cap", cmd, "more than 4096 directory entries")
	})
	t.Run("denied file with two links", func(t *testing.T) {
		if err := os.Link(filepath.Join(f.secrets, "key"), filepath.Join(f.ws, "sub", "keylink")); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(f.ws, "sub", "keylink"))
		spec := f.spec(sandbox.NetworkAllow)
		spec.Deny = []string{filepath.Join(f.secrets, "key")}
		cmd, err := sandbox.Command(context.Background(), spec, sh(script))
		if err != nil {
			t.Fatal(err)
		}
		refused(t, "hard link", cmd, "hard links")
	})
	t.Run("missing write root", func(t *testing.T) {
		spec := f.spec(sandbox.NetworkAllow)
		spec.Write = append(spec.Write, filepath.Join(f.root, "absent"))
		cmd, err := sandbox.Command(context.Background(), spec, sh(script))
		if err != nil {
			t.Fatal(err)
		}
		refused(t, "missing root", cmd, "no such file")
	})
	t.Run("SysProcAttr replaced under network deny", func(t *testing.T) {
		for _, n := range []sandbox.Network{sandbox.NetworkDeny, sandbox.NetworkProxy} {
			cmd, err := sandbox.Command(context.Background(), withProxy(t, f.spec(n)), sh(script))
			if err != nil {
				t.Fatal(err)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			refused(t, n.String(), cmd, "caller's user or network namespace")
		}
	})
	t.Run("SysProcAttr.Setsid kept", func(t *testing.T) {
		for _, n := range allNetworks {
			cmd, err := sandbox.Command(context.Background(), withProxy(t, f.spec(n)), sh("ps -o sid= -p $$"))
			if err != nil {
				t.Fatal(err)
			}
			cmd.SysProcAttr.Setsid = true
			r := wait(cmd)
			ok(t, n.String(), r)
			mine, _ := unix.Getsid(0)
			if sid, _ := strconv.Atoi(strings.TrimSpace(r.stdout)); sid == 0 || sid == mine {
				t.Errorf("%s: the target's session is %q, the test's is %d", n, r.stdout, mine)
			}
		}
	})
}

func TestCommandRejectsInvalidSpecs(t *testing.T) {
	good := sandbox.Spec{Env: baseEnv}
	cases := []struct {
		name string
		mod  func(*sandbox.Spec)
		argv []string
		want string
	}{
		{"empty argv", nil, []string{}, "argv is empty"},
		{"relative read", func(s *sandbox.Spec) { s.Read = []string{"rel"} }, nil, "not absolute"},
		{"unclean write", func(s *sandbox.Spec) { s.Write = []string{"/tmp/../etc"} }, nil, "not clean"},
		{"env without =", func(s *sandbox.Spec) { s.Env = []string{"X"} }, nil, "NAME=value"},
		{"env twice", func(s *sandbox.Spec) { s.Env = []string{"X=1", "X=2"} }, nil, "twice"},
		{"env selects the launcher", func(s *sandbox.Spec) { s.Env = []string{"POLC_SANDBOX_LAUNCHER=exec"} }, nil, "must not set"},
		{"proxy without socket", func(s *sandbox.Spec) { s.Network = sandbox.NetworkProxy; s.ProxyPort = 1 }, nil, "proxy_socket"},
		{"proxy port out of range", func(s *sandbox.Spec) {
			s.Network, s.ProxySocket, s.ProxyPort = sandbox.NetworkProxy, "/tmp/s", 70000
		}, nil, "proxy_port"},
		{"proxy fields without proxy", func(s *sandbox.Spec) { s.ProxyPort = 8080 }, nil, "only for network proxy"},
		{"unknown network", func(s *sandbox.Spec) { s.Network = 9 }, nil, "unknown network"},
	}
	for _, c := range cases {
		spec := good
		if c.mod != nil {
			c.mod(&spec)
		}
		argv := c.argv
		if argv == nil {
			argv = []string{"true"}
		}
		_, err := sandbox.Command(context.Background(), spec, argv)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
}

// Under NetworkProxy the target is the launcher's child: termination signals
// sent to the launcher reach it, and it dies with the launcher.
func TestProxyLauncherLifecycle(t *testing.T) {
	f := newFixture(t)
	spec := withProxy(t, f.spec(sandbox.NetworkProxy))
	ready := filepath.Join(f.ws, "sub", "ready")

	t.Run("SIGTERM is forwarded", func(t *testing.T) {
		defer os.Remove(ready)
		cmd, err := sandbox.Command(context.Background(), spec, sh("trap 'echo got-term; kill $!; exit 3' TERM; sleep 30 >/dev/null 2>&1 & echo $$ > "+ready+"; wait"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, ready)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-res:
			if r.code != 3 || r.stdout != "got-term\n" {
				t.Errorf("after SIGTERM: %v", r)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("the target did not stop after SIGTERM")
		}
	})
	t.Run("SIGKILL of the launcher kills the target", func(t *testing.T) {
		defer os.Remove(ready)
		cmd, err := sandbox.Command(context.Background(), spec, sh("echo $$ > "+ready+"; exec sleep 30"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, ready)))
		if pid == 0 || pid == cmd.Process.Pid {
			cmd.Process.Kill()
			t.Fatalf("target pid %d, launcher pid %d", pid, cmd.Process.Pid)
		}
		if !alive(pid) {
			t.Fatalf("the target is not running")
		}
		cmd.Process.Kill()
		<-res
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatal("the target outlived its launcher")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func waitFile(t *testing.T, p string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 && strings.HasSuffix(string(b), "\n") {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
