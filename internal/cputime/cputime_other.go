//go:build !unix

// Package cputime reads the CPU time a process has used, for benchmarks
// that report CPU per operation next to wall-clock rates.
package cputime

import "time"

// Process is not measured here: it reports false.
func Process() (time.Duration, bool) { return 0, false }
