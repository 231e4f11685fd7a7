package executor_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"polc.dev/polc/normalize"
)

// refusal is a command the normalizer must refuse, and what real bash
// does with it: the wrapper program it executes although no judged argv
// names it (ran, "" for none), or, with truncates, that it empties
// victim.txt without any redirection.
type refusal struct {
	src       string
	ran       string
	truncates bool
}

// checkRefusals checks that ParseCommand refuses each command and that
// real bash, in the shell differential rig (shellRig: a PATH of recording
// wrappers, nothing real runs), does what the refusal is for: the class
// is bash's behaviour, not a guess.
func checkRefusals(t *testing.T, cases []refusal) {
	t.Helper()
	r := newShellRig(t)
	for _, c := range cases {
		if _, err := normalize.ParseCommand(c.src); err == nil || err.Reason != normalize.ReasonInvalidCommand {
			t.Errorf("%q: %v, want invalid_command", c.src, err)
		}
		execd, _, err := r.run(c.src)
		if err != nil {
			t.Fatalf("%q under bash: %v", c.src, err)
		}
		if c.ran != "" && !slices.ContainsFunc(execd, func(argv []string) bool { return filepath.Base(argv[0]) == c.ran }) {
			t.Errorf("%q: bash did not execute %s (executed %q): the case shows nothing", c.src, c.ran, execd)
		}
		if c.truncates {
			if b, err := os.ReadFile(filepath.Join(r.ws, "victim.txt")); err != nil || len(b) != 0 {
				t.Errorf("%q: bash left victim.txt %q (%v): the case shows nothing", c.src, b, err)
			}
		}
	}
}

// checkAccepted checks that ParseCommand accepts each command and that
// real bash executes nothing it did not judge (diffCheck).
func checkAccepted(t *testing.T, cmds []string) {
	t.Helper()
	r := newShellRig(t)
	for _, src := range cmds {
		if _, err := normalize.ParseCommand(src); err != nil {
			t.Errorf("%q: %v, want accepted", src, err)
			continue
		}
		problem, _, err := diffCheck(r, src)
		if err != nil {
			t.Fatalf("%q under bash: %v", src, err)
		}
		if problem != "" {
			t.Errorf("%q: %s", src, problem)
		}
	}
}

// TestDeclareRefusesArrayValue: declare, typeset and local read a value
// from '(' to ')' as a compound array assignment when NAME is an array,
// and run the $(…) in it. NAME becomes an array in more ways than a
// parser can follow (${NAME[0]=v} and ${NAME[0]:=v} did unseen), so such
// a value is refused whatever the parser believes of NAME: '(…)' as
// written, or text known only at run time that may begin with '('.
// export and readonly read it so only with -a or -A (bash 5.2: "a=(1);
// export a='($(rm x))'" runs nothing).
func TestDeclareRefusesArrayValue(t *testing.T) {
	checkRefusals(t, []refusal{
		{src: "echo ${a[0]=x}; declare a='($(rm victim.txt) x)'", ran: "rm"},
		{src: "echo ${a[0]:=x}; declare a='($(rm victim.txt) x)'", ran: "rm"},
		{src: "echo ${a[0]=x}; typeset a='($(rm victim.txt) x)'", ran: "rm"},
		{src: "echo ${a[0]=x}; declare -g a='($(rm victim.txt) x)'", ran: "rm"},
		{src: "echo ${a[0]=x}; declare a+='($(rm victim.txt) x)'", ran: "rm"},
		{src: `echo ${a[0]=x}; v='($(rm victim.txt) x)'; declare a="$v"`, ran: "rm"},
		{src: `echo ${a[0]=x}; v='($(rm victim.txt) x)'; declare a=$v`, ran: "rm"},
		{src: `echo ${a[0]=x}; v='($(rm victim.txt) x)'; declare a=${v}`, ran: "rm"},
		{src: "f() { local -a a; local a='($(rm victim.txt) x)'; }; f", ran: "rm"},
		{src: "declare -A a; declare a='([$(rm victim.txt)]=1)'", ran: "rm"},
		{src: "a=(1); declare a='($(rm victim.txt) x)'", ran: "rm"},
		// Not an array here, but nothing shows the parser that it is
		// not one in every run (a function's caller may make it one).
		{src: "f() { local a='($(rm victim.txt) x)'; }; f"},
		{src: "declare a='(x)'"},
		{src: `declare a="$v"`},
		{src: `export -a a="$v"`},
	})
	checkAccepted(t, []string{
		"declare a='x' b=\"x$HOME\" c",
		"a=(1); export a='($(rm victim.txt) x)'",
		"a=(1); readonly a='($(rm victim.txt) x)'",
		`v='($(rm victim.txt) x)'; export a="$v"`,
		"declare a=' ($(rm victim.txt) x)'",
		"echo ${a[0]=x}; declare a='($(rm victim.txt) x) '",
	})
}

// TestIntegerVarsRefuseCodeValues: bash gives BASHPID, HISTCMD, OPTIND,
// RANDOM and SRANDOM the integer attribute itself, so "=" and "+=" (as a
// prefix, bare, or through declare, export, local, read, for, ${NAME=…})
// evaluate the value as arithmetic, and a subscript in it runs its $(…).
// Only an empty or numeric literal value is accepted.
func TestIntegerVarsRefuseCodeValues(t *testing.T) {
	checkRefusals(t, []refusal{
		{src: "BASHPID+='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "BASHPID+='a[$(rm victim.txt)]' echo", ran: "rm"},
		{src: "export BASHPID+='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "declare BASHPID+='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "HISTCMD+='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "OPTIND+='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "RANDOM+='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "SRANDOM+='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "export OPTIND='a[$(rm victim.txt)]'", ran: "rm"},
		{src: "read HISTCMD <<< 'a[$(rm victim.txt)]'", ran: "rm"},
		{src: "for RANDOM in 'a[$(rm victim.txt)]'; do :; done", ran: "rm"},
		{src: "printf -v SRANDOM 'a[$(rm victim.txt)]'; echo", ran: "rm"},
		// Plain "=" to BASHPID is ignored, and a local or ${NAME=…}
		// did not evaluate here: refused all the same (fail closed).
		{src: "BASHPID='a[$(rm victim.txt)]'"},
		{src: "f() { local BASHPID+='a[$(rm victim.txt)]'; }; f"},
		{src: "echo ${OPTIND='a[$(rm victim.txt)]'}"},
		{src: "BASHPID=x"},
	})
	checkAccepted(t, []string{"BASHPID=1; echo", "OPTIND=1; echo", "RANDOM=42; echo", "export SRANDOM=", "BASHPID+=1; echo"})
}

// TestHistoryFileIsNeverTouched: assigning HISTFILESIZE makes bash
// truncate the file HISTFILE names, history on or not, also for one
// command's prefix assignment, and history -w (and -a) writes it, -r and
// -n read it: files no facet names. Any assignment of HISTFILE,
// HISTFILESIZE or HISTSIZE is refused, and history with -a, -n, -r or -w.
func TestHistoryFileIsNeverTouched(t *testing.T) {
	checkRefusals(t, []refusal{
		{src: "HISTFILE=victim.txt HISTFILESIZE=0 echo; echo", truncates: true},
		{src: "HISTFILE=victim.txt; HISTFILESIZE=0", truncates: true},
		{src: "HISTFILE=victim.txt; declare HISTFILESIZE=0", truncates: true},
		{src: "HISTFILE=victim.txt; read HISTFILESIZE <<< 0", truncates: true},
		{src: "HISTFILE=victim.txt; HISTFILESIZE=0 echo", truncates: true},
		{src: "history -w victim.txt; echo", truncates: true},
		{src: "HISTFILE=victim.txt; history -w", truncates: true},
		{src: "history -cw victim.txt; echo", truncates: true},
		{src: "history -r victim.txt; history"},
		{src: "history -a victim.txt; echo"},
		{src: "history -n victim.txt; echo"},
		{src: `history "$x"; echo`},
		{src: "HISTSIZE=0; echo"},
		{src: "unset HISTFILE; echo"},
		{src: "HISTFILE=victim.txt echo"}, // no shell control: still refused
	})
	checkAccepted(t, []string{"history; echo", "history -c; echo", "history -s 'a b'; echo"})
}

// TestPromptVarsRefuseEscapes: bash decodes a prompt string's backslash
// escapes and then expands it, $(…) included: PS4 for each command traced
// under set -x ("\044" is '$', so PS4='\044(rm x) ' ran rm), PS3 for
// select. A prompt variable's value must be literal text of letters,
// digits, blanks and +-_.:,=>#@/% only.
func TestPromptVarsRefuseEscapes(t *testing.T) {
	checkRefusals(t, []refusal{
		{src: `PS4='\044(rm victim.txt) '; set -x; echo`, ran: "rm"},
		{src: `PS4='\140rm victim.txt\140 '; set -x; echo`, ran: "rm"},
		{src: `PS4='$(rm victim.txt) '; set -x; echo`, ran: "rm"},
		{src: `export PS4='\044(rm victim.txt) '; set -x; echo`, ran: "rm"},
		{src: `read -r PS4 <<< '\044(rm victim.txt)'; set -x; echo`, ran: "rm"},
		{src: `: ${PS4='\044(rm victim.txt) '}; set -x; echo`},
		{src: `PS3='\044(rm victim.txt) '; echo`},
		{src: `PS1='\u'; echo`},
		{src: `PROMPT_COMMAND='$(rm victim.txt)'; echo`},
		{src: `PS4='! '; set -x; echo`},
	})
	checkAccepted(t, []string{`PS4='+ '; set -x; echo`, `PS4='+ trace: '; set -x; echo`})
}

// TestTimeOptionsJudgeTheProgram: bash's lexer reads "-p" after the time
// reserved word, and "--" after time or time -p, as time's options
// (TIMEOPT, TIMEIGN): "time -- rm x" runs rm, which the parser read as
// arguments of a program "--". And after '|' or '|&' time is no reserved
// word to bash but the program time. Both are refused: time followed by a
// word starting with '-' (but the parser's -p), and time after a pipe.
func TestTimeOptionsJudgeTheProgram(t *testing.T) {
	checkRefusals(t, []refusal{
		{src: "time -- rm victim.txt", ran: "rm"},
		{src: "time -p -- rm victim.txt", ran: "rm"},
		{src: "! time -- rm victim.txt", ran: "rm"},
		{src: "! time -p -- rm victim.txt", ran: "rm"},
		{src: "time time -- rm victim.txt", ran: "rm"},
		{src: "time -p -- time -- rm victim.txt", ran: "rm"},
		{src: "echo; time -- rm victim.txt", ran: "rm"},
		{src: "echo $(time -- rm victim.txt)", ran: "rm"},
		{src: "time -- ! rm victim.txt", ran: "rm"},
		{src: "time -- rm victim.txt | cat", ran: "rm"},
		{src: "time -p -- rm victim.txt |& cat && echo", ran: "rm"},
		{src: "time -p -p rm victim.txt"},
		{src: "time -- -- rm victim.txt"},
		{src: `time "--" rm victim.txt`},
		{src: `time -\p rm victim.txt`},
		{src: "echo | time -p rm victim.txt"},
		{src: "echo | time rm victim.txt"},
		{src: "echo |& time rm victim.txt"},
		{src: "echo | cat | time rm victim.txt"},
	})
	checkAccepted(t, []string{"time -p rm victim.txt", "time rm victim.txt | cat", "echo && time -p rm victim.txt",
		"{ time rm victim.txt; } | cat", "echo | { time rm victim.txt; }", "! time rm victim.txt", "x=1 time -p rm victim.txt"})
}

// TestCloseDupWordIsProgram: bash's lexer reads an unquoted '-' right after
// >& or <& as the close operator's own token and the rest as the next
// word: ">&-rm victim.txt" closes stdout and runs rm, where the parser
// judged a write to the file "-rm". A duplication word starting with '-'
// other than "-" alone is refused.
func TestCloseDupWordIsProgram(t *testing.T) {
	checkRefusals(t, []refusal{
		{src: ">&-rm victim.txt", ran: "rm"},
		{src: "<&-rm victim.txt", ran: "rm"},
		{src: "2>&-rm victim.txt", ran: "rm"},
		{src: "3<&-rm victim.txt", ran: "rm"},
		{src: ">& -rm victim.txt", ran: "rm"},
		{src: ">&-'rm' victim.txt", ran: "rm"},
		{src: "echo x >&-rm victim.txt"},
		{src: "echo x >&-1"},
		{src: "echo x >&'-rm'"},
		{src: `echo x >&\-rm`},
	})
	checkAccepted(t, []string{"echo x >&-", "echo x 2>&1", "echo x 3>&1-", "echo x >&- ; echo", "echo x 2>&- victim.txt"})
}

// TestDupWordExpandedTwice: a >&WORD whose WORD is no descriptor number
// is &>WORD to bash, which expands the already expanded word again:
// >&'x$(rm victim.txt)' runs rm, where the parser judged a literal file.
// The word must be "-", a number, or a name of letters, digits and
// /._+,:@%=- (not starting with '-'); &>, >, >| and &>> are expanded once.
func TestDupWordExpandedTwice(t *testing.T) {
	checkRefusals(t, []refusal{
		{src: "echo hi >&'x$(rm victim.txt)'", ran: "rm"},
		{src: `echo hi 1>&"x\$(rm victim.txt)"`, ran: "rm"},
		{src: "echo hi >&'x`rm victim.txt`'", ran: "rm"},
		{src: `echo hi >&x\$\(rm\ victim.txt\)`, ran: "rm"},
		{src: "echo hi >&'~/x'"},
		{src: "echo hi >&'x*'"},
		{src: "echo hi >&'{a,b}'"},
		{src: `echo hi >&'y\z'`},
		{src: `echo hi >&"x y"`},
		{src: "echo hi <&'x$(rm victim.txt)'"},
		{src: "echo hi 2>&'x$(rm victim.txt)'"},
	})
	checkAccepted(t, []string{"echo hi >&out", "echo hi >&sub/o.log", "echo hi &>'x$(rm victim.txt)'",
		"echo hi >|'x$(rm victim.txt)'", "echo hi &>>'x$(rm victim.txt)'", "echo hi >'x$(rm victim.txt)'"})
}
