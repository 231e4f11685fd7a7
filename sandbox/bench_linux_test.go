//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/sandbox"
)

// BenchmarkSpawn compares a direct exec of /bin/true with the sandboxed one
// per network mode, first with this test binary re-executed as the
// launcher, then with the dedicated launcher (cmd/polc-sandbox, built into
// a temporary directory, or the one POLC_SANDBOX_BENCH_LAUNCHER names); the
// difference is the sandbox's cost per spawn. "reexec" and
// "dedicated/reexec" are the part of it that is the launcher binary's own
// start-up; "netns" the cost of creating a user and network namespace
// alone (the launcher's probe role, which brings lo up and exits).
func BenchmarkSpawn(b *testing.B) {
	ws := b.TempDir()
	b.Run("direct", func(b *testing.B) {
		var cpu time.Duration
		for b.Loop() {
			cmd := exec.Command("/bin/true")
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			cpu += cpuOf(cmd)
		}
		reportCPU(b, cpu)
	})
	if err := sandbox.UseLauncher(""); err != nil {
		b.Fatal(err)
	}
	benchLaunchers(b, "", "/proc/self/exe", ws)
	launcher := os.Getenv("POLC_SANDBOX_BENCH_LAUNCHER")
	if launcher == "" {
		launcher = buildLauncher(b)
	}
	if err := sandbox.UseLauncher(launcher); err != nil {
		b.Fatal(err)
	}
	defer sandbox.UseLauncher("")
	benchLaunchers(b, "dedicated/", launcher, ws)
}

func benchLaunchers(b *testing.B, prefix, launcher, ws string) {
	// The floor under every sandboxed spawn: starting the launcher binary,
	// which exits at once for an unknown launcher role.
	b.Run(prefix+"reexec", func(b *testing.B) {
		var cpu time.Duration
		defer func() { reportCPU(b, cpu) }()
		for b.Loop() {
			cmd := exec.Command(launcher)
			cmd.Env = []string{"POLC_SANDBOX_LAUNCHER=none"}
			cmd.Stderr = io.Discard
			var ee *exec.ExitError
			if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != sandbox.ExitRefused {
				b.Fatal(err)
			}
			cpu += cpuOf(cmd)
		}
	})
	b.Run(prefix+"netns", func(b *testing.B) {
		var cpu time.Duration
		defer func() { reportCPU(b, cpu) }()
		for b.Loop() {
			cmd := exec.Command(launcher)
			cmd.Env = []string{"POLC_SANDBOX_LAUNCHER=probe"}
			cmd.Stdout = io.Discard
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
			}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			cpu += cpuOf(cmd)
		}
	})
	for _, n := range allNetworks {
		spec := sandbox.Spec{Write: []string{ws}, Network: n, Env: baseEnv}
		if n == sandbox.NetworkProxy {
			spec.ProxySocket, spec.ProxyPort = filepath.Join(ws, "p.sock"), 3128
		}
		b.Run(prefix+n.String(), func(b *testing.B) {
			var cpu time.Duration
			defer func() { reportCPU(b, cpu) }()
			for b.Loop() {
				cmd, err := sandbox.Command(context.Background(), spec, []string{"/bin/true"})
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
				cpu += cpuOf(cmd)
			}
		})
	}
}

// cpuOf is the CPU time (user and system) the command's process used,
// its waited-for children included: on a loaded machine a steadier
// measure of the work than the wall time.
func cpuOf(cmd *exec.Cmd) time.Duration {
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func reportCPU(b *testing.B, cpu time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// buildLauncher builds cmd/polc-sandbox into a temporary directory.
func buildLauncher(tb testing.TB) string {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go toolchain to build cmd/polc-sandbox")
	}
	dir := tb.TempDir()
	out, err := exec.Command(goBin, "build", "-o", dir, "polc.dev/polc/cmd/polc-sandbox").CombinedOutput()
	if err != nil {
		tb.Fatalf("building cmd/polc-sandbox: %v\n%s", err, out)
	}
	return filepath.Join(dir, "polc-sandbox")
}
