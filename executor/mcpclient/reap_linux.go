package mcpclient

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// reapGroup waits for cmd's process to exit, kills its process group
// while the process, exited but not yet reaped, still holds the group's
// id (so that no other group can have taken it), then reaps it.
func reapGroup(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	signalGroup(pid, syscall.SIGKILL)
	cmd.Wait()
}
