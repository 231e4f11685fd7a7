//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"polc.dev/polc/sandbox"
)

// BenchmarkSpawn compares a direct exec of /bin/true with the sandboxed one
// per network mode; the difference is the sandbox's cost per spawn.
// "reexec" is the part of it that is this binary's own start-up.
func BenchmarkSpawn(b *testing.B) {
	ws := b.TempDir()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The floor under every sandboxed spawn: starting this binary once more
	// up to Init, which exits at once for an unknown launcher role.
	b.Run("reexec", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command("/proc/self/exe")
			cmd.Env = []string{"POLC_SANDBOX_LAUNCHER=none"}
			var ee *exec.ExitError
			if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != sandbox.ExitRefused {
				b.Fatal(err)
			}
		}
	})
	for _, n := range allNetworks {
		spec := sandbox.Spec{Write: []string{ws}, Network: n, Env: baseEnv}
		if n == sandbox.NetworkProxy {
			spec.ProxySocket, spec.ProxyPort = filepath.Join(ws, "p.sock"), 3128
		}
		b.Run(n.String(), func(b *testing.B) {
			for b.Loop() {
				cmd, err := sandbox.Command(context.Background(), spec, []string{"/bin/true"})
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
