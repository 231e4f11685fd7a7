//go:build unix

// Package cputime reads the CPU time a process has used, for benchmarks
// that report CPU per operation next to wall-clock rates.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the CPU time (user and system) the process has used so
// far, every thread included (the garbage collector's too), and whether
// it could be read.
func Process() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
