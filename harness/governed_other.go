//go:build !linux

package harness

import "time"

// waitGroupGone waits a fixed time where the process table cannot be
// read: polc mcp closes its session within its grace once its stdin closes.
func waitGroupGone(pgid int, d time.Duration) { time.Sleep(d / 4) }
