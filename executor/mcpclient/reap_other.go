//go:build unix && !linux

package mcpclient

import (
	"os/exec"
	"syscall"
)

// reapGroup waits for cmd's process and kills what is left of its
// process group. Without waitid's WNOWAIT the process is reaped first:
// the group's id could in principle have been taken since.
func reapGroup(cmd *exec.Cmd) {
	cmd.Wait()
	signalGroup(cmd.Process.Pid, syscall.SIGKILL)
}
