//go:build !unix

package builtin

import "time"

// writersGone waits up to timeout for the copies of o's pipes to have
// read to their end: here the pipes' writers cannot be asked for.
func writersGone(o *output, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-o.drained:
		return true
	case <-t.C:
		return false
	}
}

// outputWriters: the processes holding the output cannot be listed
// here; a writer left after pipeGrace counts as escaped.
func outputWriters(*output, time.Time) (bool, error) { return false, errNoProc }
