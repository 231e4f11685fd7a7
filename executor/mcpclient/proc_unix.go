//go:build unix

package mcpclient

import (
	"os/exec"
	"syscall"
)

// isolate makes cmd's process the leader of a process group of its own.
func isolate(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// signalGroup sends sig to every process of the group pid leads.
func signalGroup(pid int, sig syscall.Signal) {
	syscall.Kill(-pid, sig)
}
