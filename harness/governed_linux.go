package harness

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// waitGroupGone waits up to d for every live (not zombie) process of the
// process group pgid to exit: after a governed run, polc mcp, which the
// provider started and left, closes its session (task_closed, the
// certificate) once its stdin closes. Killing it first would lose both.
func waitGroupGone(pgid int, d time.Duration) {
	deadline := time.Now().Add(d)
	for groupLive(pgid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// groupLive reports whether a process of group pgid is alive. A zombie
// (exited, not yet reaped by whoever inherited it) has done its work.
func groupLive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			return true
		}
	}
	return false
}
