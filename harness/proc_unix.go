//go:build unix

package harness

import (
	"errors"
	"os"
	"syscall"
)

// spawnSupported reports whether Spawn can run a provider here: it needs
// process groups (to stop a provider with everything it started) and
// flock (the workspace lease).
const spawnSupported = true

// newGroupAttr starts the provider as the leader of a new process group.
func newGroupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills the process group pgid leads.
func killGroup(pgid int) { syscall.Kill(-pgid, syscall.SIGKILL) }

// lockDir takes a non-blocking flock on f, shared or exclusive; busy
// reports that another holder has it.
func lockDir(f *os.File, shared bool) (busy bool, err error) {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

func unlockDir(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// setGroup makes a process started with attr the leader of a new process
// group (attr comes from the sandbox, which sets other fields in it).
func setGroup(attr *syscall.SysProcAttr) { attr.Setpgid = true }
