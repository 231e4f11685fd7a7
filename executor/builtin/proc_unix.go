//go:build unix && !linux

package builtin

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// isolate makes cmd start a session of its own.
func isolate(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
}

// waitCommand waits for cmd, started by startCommand, killing its
// process group when ctx is done, and kills what is left of the group
// once cmd.Wait has returned (after pipeGrace when a process left
// running holds the output). Elsewhere than on Linux the main process is
// reaped before that kill (no waitid WNOWAIT here), processes that
// left the group (bash's jobs under set -m) are not found, no
// backgroundGrace is given, and the kill is counted as one process.
func waitCommand(ctx context.Context, cmd *exec.Cmd) (ended, error) {
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		syscall.Kill(-pgid, syscall.SIGKILL)
		err = <-done
	}
	var e ended
	if syscall.Kill(-pgid, syscall.SIGKILL) == nil && ctx.Err() == nil {
		e.killed = 1
	}
	return e, err
}

// outputWriters: without /proc the processes holding the output cannot
// be listed; a writer left after pipeGrace counts as escaped.
func outputWriters(*output, time.Time) (bool, error) { return false, errNoProc }
