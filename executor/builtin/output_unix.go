//go:build unix

package builtin

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// writersGone waits up to timeout for no process to hold a write end of
// o's pipes: poll reports POLLHUP on a pipe's read end once it has no
// writer (asked for no event, poll returns for nothing else). o's read
// ends stay open until finish has returned, so their numbers are theirs.
func writersGone(o *output, timeout time.Duration) bool {
	var fds [2]unix.PollFd
	for i, f := range o.r {
		rc, err := f.SyscallConn()
		if err != nil {
			return false
		}
		// Control, not Fd: Fd would make the descriptor blocking, and
		// closing it would no longer end a copy blocked reading it.
		if err := rc.Control(func(fd uintptr) { fds[i].Fd = int32(fd) }); err != nil {
			return false
		}
	}
	deadline := time.Now().Add(timeout)
	var hup [2]bool
	for polled := false; ; polled = true {
		for i := range fds {
			if fds[i].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				hup[i] = true
				fds[i].Fd = -1 // poll skips it from now on
			}
		}
		if hup[0] && hup[1] {
			return true
		}
		// Asked once at least, so that a timeout of 0 is a look now.
		left := time.Until(deadline)
		if left < 0 && polled {
			return false
		}
		ms := 0
		if left > 0 {
			ms = int(left/time.Millisecond) + 1
		}
		_, err := unix.Poll(fds[:], ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
	}
}
