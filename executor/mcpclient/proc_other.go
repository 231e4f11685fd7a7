//go:build !unix

package mcpclient

import (
	"os"
	"os/exec"
	"syscall"
)

// isolate: without process groups, the server alone is ended.
func isolate(*exec.Cmd) {}

// signalGroup kills the process (the only signal there is here).
func signalGroup(pid int, _ syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

// reapGroup waits for cmd's process.
func reapGroup(cmd *exec.Cmd) { cmd.Wait() }
