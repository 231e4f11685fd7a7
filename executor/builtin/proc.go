package builtin

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// A bash call's processes end with the call: the command starts in a
// session and process group of its own (startCommand), and when its main
// process has exited — or the call's deadline passed, or its context was
// cancelled — every process still in that session is killed and gone
// before the callable returns (waitCommand). A program that leaves the
// session (setsid()) is not seen, unless it holds the command's output
// (output.finish); the in-process backend contains nothing
// (docs/executor.md).

// backgroundGrace is how long processes the main process left running
// (a process substitution's reader, a job put in the background) may
// take to end on their own before they are killed: "cmd > >(tee log)"
// leaves tee writing for a moment after bash exits.
const backgroundGrace = 200 * time.Millisecond

// pipeGrace is how long, once every process of the session is gone, the
// output pipes may still have a writer before the writers are looked
// for (output.finish). A process that left the session and holds them
// cannot keep the call from returning: the pipes are closed, and the
// call fails background_escaped.
const pipeGrace = time.Second

// killWait bounds how long waitCommand waits for killed processes to be
// gone (one in an uninterruptible sleep ends only when that ends); one
// still there after it counts as escaped.
const killWait = 5 * time.Second

// startCommand starts cmd in a session of its own (so in a process group
// of its own, with no controlling terminal), its stdout and stderr the
// write ends of out's pipes, which polc then closes and reads.
func startCommand(cmd *exec.Cmd, out *output) error {
	isolate(cmd)
	cmd.Stdout, cmd.Stderr = out.w[0], out.w[1]
	err := cmd.Start()
	out.started(err == nil)
	return err
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

// output is a command's stdout and stderr, through pipes polc makes
// itself (not os/exec's): polc knows them, so when the command's session
// has ended it asks the kernel whether any process still holds a write
// end (finish), instead of taking a copy that has not yet read the end
// of its pipe for a writer — under load a goroutine that was woken by
// the pipe's end may run only seconds later, and os/exec's WaitDelay
// then reports a writer that does not exist.
type output struct {
	stdout, stderr limitedBuffer
	r, w           [2]*os.File
	// drained is closed when both copies have read to the end of their
	// pipe (or to its closing).
	drained chan struct{}
}

// newOutput makes the pipes of a command's output, of which the first
// max bytes of each are kept.
func newOutput(max int64) (*output, error) {
	o := &output{drained: make(chan struct{})}
	o.stdout.max, o.stderr.max = max, max
	for i := range o.r {
		r, w, err := os.Pipe()
		if err != nil {
			o.started(false)
			return nil, err
		}
		o.r[i], o.w[i] = r, w
	}
	return o, nil
}

// started closes polc's write ends (the command holds its own) and, if
// the command started, copies what it writes; if not, closes the rest.
func (o *output) started(ok bool) {
	for i, f := range o.w {
		if f != nil {
			f.Close()
		}
		o.w[i] = nil
	}
	if !ok {
		for _, f := range o.r {
			if f != nil {
				f.Close()
			}
		}
		return
	}
	var wg sync.WaitGroup
	for i, buf := range []*limitedBuffer{&o.stdout, &o.stderr} {
		wg.Go(func() { io.Copy(buf, o.r[i]) })
	}
	go func() {
		wg.Wait()
		close(o.drained)
	}()
}

// finish waits, once the command's session has ended, until no process
// holds a write end of the output pipes, and then until what they hold
// has been read; and closes them. A writer still there after pipeGrace
// is looked up (outputWriters): the transient copy a concurrent call's
// child holds between its fork and its exec (every descriptor of polc's
// is copied into a fork; close-on-exec ones close at exec) is waited for,
// up to killWait; any other writer, found on two looks 50 ms apart, is a
// process that holds the output from outside the session, and escaped
// reports it, as it does writers that cannot be listed or outlast
// killWait (fail closed). The pipes are then closed without waiting for
// it.
func (o *output) finish(ctx context.Context) (escaped bool) {
	deadline := time.Now().Add(pipeGrace)
	hard := time.Now().Add(killWait)
	seen := 0 // scans in a row that found a foreign writer
	for !writersGone(o, time.Until(deadline)) {
		foreign, err := outputWriters(o, hard)
		if foreign {
			seen++
		} else {
			seen = 0
		}
		if err != nil || seen == 2 || time.Now().After(hard) {
			escaped = true
			break
		}
		if deadline = time.Now().Add(50 * time.Millisecond); deadline.After(hard) {
			deadline = hard
		}
	}
	if !escaped {
		// No writer is left, so what the pipes hold is bounded by their
		// capacity, and the copies end once they have read it — unless a
		// writer came back: a process that can open a read end's path
		// (/proc/PID/fd/N) can open the pipe for writing again after
		// poll saw none. Reading the rest is given killWait (a copy woken
		// under load may run seconds late); past it the output is held
		// from outside, and the call must not wait for it.
		// The call's deadline or cancellation ends the wait sooner: what
		// is unread then is lost with the call, and a writer that is
		// back is reported.
		t := time.NewTimer(killWait)
		select {
		case <-o.drained:
		case <-t.C:
			escaped = true
		case <-ctx.Done():
			escaped = !writersGone(o, 0)
		}
		t.Stop()
	}
	for _, f := range o.r {
		f.Close() // ends the copies: a Read blocked in the poller returns
	}
	<-o.drained
	return escaped
}

// errScanTooLong says the output's writers were not all listed in time.
var errScanTooLong = errors.New("listing the processes holding the output took too long")

// errNoProc says the output's writers cannot be listed here.
var errNoProc = errors.New("the processes holding the output cannot be listed here")
