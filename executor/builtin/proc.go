package builtin

import (
	"os/exec"
	"time"
)

// A bash call's processes end with the call: the command starts in a
// session and process group of its own (startCommand), and when its main
// process has exited — or the call's deadline passed, or its context was
// cancelled — every process still in that session is killed and gone
// before the callable returns (waitCommand). A program that leaves the
// session (setsid()) is not seen; the in-process backend contains nothing
// (docs/executor.md).

// backgroundGrace is how long processes the main process left running
// (a process substitution's reader, a job put in the background) may
// take to end on their own before they are killed: "cmd > >(tee log)"
// leaves tee writing for a moment after bash exits.
const backgroundGrace = 200 * time.Millisecond

// pipeGrace is cmd.WaitDelay: once every process of the session is gone,
// what is left in the output pipes is read for at most this long. A
// process that left the session and holds them cannot keep the call from
// returning (exec.ErrWaitDelay, class background_escaped).
const pipeGrace = time.Second

// killWait bounds how long waitCommand waits for killed processes to be
// gone (one in an uninterruptible sleep ends only when that ends); one
// still there after it counts as escaped.
const killWait = 5 * time.Second

// startCommand starts cmd in a session of its own (so in a process group
// of its own, with no controlling terminal).
func startCommand(cmd *exec.Cmd) error {
	isolate(cmd)
	cmd.WaitDelay = pipeGrace
	return cmd.Start()
}

// ended is how the processes of a call ended besides its main process.
type ended struct {
	// killed counts processes still running after the main process had
	// exited and backgroundGrace had passed, which were killed.
	killed int
	// survived counts processes of the session still there killWait
	// after they were killed.
	survived int
}
