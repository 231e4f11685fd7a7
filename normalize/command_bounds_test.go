package normalize_test

import (
	"runtime"
	"strings"
	"testing"

	"polc.dev/polc/normalize"
)

// TestCommandSizeBounded: judging a command costs about a kilobyte per
// simple command and, for nested substitutions, time proportional to the
// depth times the length, so a long command cost the machine: 1 MiB of
// "a;" took 18 s and 580 MB, and 9 KB of nested "$(" four seconds and 181
// MB. A command longer than bash -c can be given (the kernel's 128 KiB
// for one argument), nesting deeper than 200 or running more than 10,000
// simple commands is refused before it is judged; the worst inputs within
// the bounds allocate a bounded amount.
func TestCommandSizeBounded(t *testing.T) {
	for name, c := range map[string]struct {
		cmd  string
		want string
	}{
		"too long":      {"echo " + strings.Repeat("x", normalize.MaxCommandBytes), "bash -c takes at most 131071"},
		"deep subst":    {strings.Repeat("$(", 300) + strings.Repeat(")", 300), "nests more than 200 deep"},
		"deep pipeline": {strings.Repeat("a|", 300) + "a", "nests more than 200 deep"},
		"many commands": {strings.Repeat("a;", 10001), "more than 10000 simple commands"},
	} {
		_, nerr := normalize.ParseCommand(c.cmd)
		if nerr == nil || nerr.Reason != normalize.ReasonInvalidCommand || !strings.Contains(nerr.Detail, c.want) {
			t.Errorf("%s: %v, want invalid_command: …%s", name, nerr, c.want)
		}
	}
	if _, nerr := normalize.ParseCommand("echo " + strings.Repeat("x", normalize.MaxCommandBytes-5)); nerr != nil {
		t.Errorf("a command of MaxCommandBytes: %v", nerr)
	}
	if _, nerr := normalize.ParseCommand(strings.Repeat("a|", 40) + "a"); nerr != nil {
		t.Errorf("a 41-stage pipeline: %v", nerr)
	}
	// The costliest shapes at the bounds (refused or not): their
	// allocations stay bounded (before, the first took 75 MB, the
	// nested substitutions grew with the square of their length).
	for _, cmd := range []string{
		strings.Repeat("a;", 9999),
		strings.Repeat("a;", normalize.MaxCommandBytes/2),
		strings.Repeat("$(", 99) + strings.Repeat("x ", normalize.MaxCommandBytes/2-200) + strings.Repeat(")", 99),
		strings.Repeat("$(", 20000) + strings.Repeat(")", 20000),
		strings.Repeat("a|", 190) + strings.Repeat("a ", normalize.MaxCommandBytes/2-200),
	} {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		normalize.ParseCommand(cmd)
		runtime.ReadMemStats(&m1)
		if got := m1.TotalAlloc - m0.TotalAlloc; got > 64<<20 {
			t.Errorf("%q…: %d MB allocated", cmd[:8], got>>20)
		}
	}
}
