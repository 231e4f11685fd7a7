package executor_test

import (
	"testing"

	"polc.dev/polc/executor"
)

// TestAttackCloseDupWordIsProgram: bash's grammar reads ">&-" and "<&-"
// as the operator and a "-" token of their own, so in ">&-rm victim.txt"
// the descriptor is closed and "rm" is the next word of the command: bash
// runs "rm victim.txt". The parser reads one word "-rm" as the target of
// ">&" (a file, as &>), so ParseCommand's commands are ["victim.txt"] and
// a redirection writing the file "-rm": with shell allowed and writes
// allowed where the command runs, "polc eval" allows ">&-rm echo x" under
// an allowlist of echo alone, and any runner of the judged text (a
// backend that runs it, or bash fed the decision's text) runs rm. The
// built-in bash callable happens to mask it, since it replaces the word
// "-rm" by /proc/self/fd/K before bash reads the text. Checked against
// real bash by the shell differential rig: bash executed an argv polc did
// not judge.
func TestAttackCloseDupWordIsProgram(t *testing.T) {
	r := newShellRig(t)
	for _, src := range []string{">&-rm victim.txt", "echo x >&-rm victim.txt", "<&-rm victim.txt"} {
		c, nerr := executor.ParseCommand(src)
		if nerr != nil {
			continue // refused: nothing runs
		}
		problem, ran, err := diffCheck(r, src)
		if err != nil {
			t.Fatal(err)
		}
		if problem != "" {
			t.Errorf("%q (judged commands %q): %s", src, c.Argv, problem)
		} else if !ran {
			t.Errorf("%q was not run", src)
		}
	}
}

// TestAttackTimeDashDash: bash 5.2's lexer reads "--" after the time
// keyword (and after "time -p") as the end of time's options (TIMEIGN),
// so "time -- rm victim.txt" runs "rm victim.txt"; the parser keeps "--"
// as the program, and the judged command is ["--", "rm", "victim.txt"].
// A deny or approval pattern "rm *" (or "git push *") does not match it,
// although the argv bash executes is exactly the one it names.
func TestAttackTimeDashDash(t *testing.T) {
	r := newShellRig(t)
	for _, src := range []string{"time -- rm victim.txt", "time -p -- rm victim.txt"} {
		c, nerr := executor.ParseCommand(src)
		if nerr != nil {
			continue
		}
		problem, ran, err := diffCheck(r, src)
		if err != nil {
			t.Fatal(err)
		}
		if problem != "" {
			t.Errorf("%q (judged commands %q): %s", src, c.Argv, problem)
		} else if !ran {
			t.Errorf("%q was not run", src)
		}
	}
}

// TestAttackDupWordExpandedTwice: for ">&WORD" (and "1>&WORD") whose
// WORD is no number, bash 5.2 turns the redirection into "&>" and expands
// the already expanded word again, so quoted text in it runs:
// "echo hi >&'x$(rm victim.txt)'" runs rm and writes the file x. The
// parser reads the single-quoted word as the literal file name
// "x$(rm victim.txt)", a path facet under the write rules, and the judged
// commands are only ["echo", "hi"]. The built-in bash callable masks it by
// replacing the word with /proc/self/fd/K; a runner that runs the judged
// text does not.
func TestAttackDupWordExpandedTwice(t *testing.T) {
	r := newShellRig(t)
	for _, src := range []string{"echo hi >&'x$(rm victim.txt)'", `echo hi 1>&"x\$(rm victim.txt)"`} {
		c, nerr := executor.ParseCommand(src)
		if nerr != nil {
			t.Logf("%q refused: %v", src, nerr)
			continue
		}
		problem, ran, err := diffCheck(r, src)
		if err != nil {
			t.Fatal(err)
		}
		if problem != "" {
			t.Errorf("%q (judged commands %q): %s", src, c.Argv, problem)
		} else if !ran {
			t.Errorf("%q was not run", src)
		}
	}
}
