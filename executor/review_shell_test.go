package executor_test

import (
	"testing"

	"polc.dev/polc/decision"
)

// TestReviewShellProgramExpanded: a command pattern judges a program by
// its name as written, and its "*" matches "/" and "..". With shell
// allowed and "./scripts/*" granted, "./scripts/${u:-..}/${u:-..}/bin/rm"
// matched the pattern as text and bash ran bin/rm; brace expansion left
// ./scripts the same way, and so does any program word bash expands (a
// parameter, a substitution, a glob, a tilde). A program word must be
// literal; a relative program path after a directory change names no
// file the policy can judge.
func TestReviewShellProgramExpanded(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["./scripts/*", "./scripts/* *", "command *", "exec *", "cd *"], shell: "allow"}`)
	checkRefused(t, p,
		`./scripts/${u:-..}/${u:-..}/bin/rm victim.txt`,
		`./scripts/{..,}/{..,}/bin/rm victim.txt`,
		`./scripts/{..,x}/{..,x}/bin/rm victim.txt`,
		`u=..; ./scripts/$u/$u/bin/rm victim.txt`,
		`./scripts/"$u"/x`,
		`./scripts/$(echo ..)/x`,
		"./scripts/`echo ..`/x",
		`./scripts/$((1))/x; ./scripts/a`,
		`./scripts/*/../../bin/rm x; ./scripts/a`,
		`./scripts/?/x; ./scripts/a`,
		`./scripts/[.][.]/x; ./scripts/a`,
		`~/x; ./scripts/a`,
		`command ./scripts/${u:-..}/../bin/rm x`,
		`command -- ./scripts/{..,}/x`,
		`exec -a ./scripts/a ./scripts/$u/x`,
		`command ./scripts/../../bin/rm x`,
		`cd ..; ./scripts/a`,
		`cd sub && ./scripts/a`,
		`./scripts/a; cd /`,
	)
	checkAllowed(t, p,
		`./scripts/a "$u" ${u:-..} {a,b} *; ./scripts/b`,
		`./scripts/a; ./scripts/b ../out`,
		`command ./scripts/a; exec ./scripts/b`,
	)
}

// TestReviewShellExtGlob: bash -c runs with extglob off, where
// "!(rm victim.txt)" is "!" and a subshell that runs rm; the parser read
// one word, an extended glob, so neither subprocess.deny nor an approval
// rule saw rm. In [[ ]] bash reads extended globs and runs the $(…) in
// one, which the parser kept as the pattern's text. Every extended glob
// is refused.
func TestReviewShellExtGlob(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allow", deny: ["rm *"], shell: "allow"}`)
	cmds := []string{
		`!(rm victim.txt)`,
		`echo; !(rm victim.txt)`,
		`true && !(rm victim.txt)`,
		`[[ x == @($(rm victim.txt)|x) ]]`,
		`[[ x == !($(rm victim.txt)) ]]`,
		`case x in @(x)) echo;; esac`,
		`echo ?(a) *(a) +(a)`,
	}
	checkRefused(t, p, cmds...)
	if got := decide(t, p, "bash", map[string]any{"command": "! (rm victim.txt)"}); got != decision.Deny {
		t.Errorf("a negated subshell running rm: %s, want deny", got)
	}
	checkAllowed(t, p, `echo '!(x)' "@(y)" \!x`, `[[ x == x* ]] && echo`)
}

// TestReviewShellResolution: a command that changes how its later words
// resolve must need the grant that implies. "unset PATH; git status" ran
// ./git from the workspace (bash searches "." when PATH is unset) with no
// environment grant, though "PATH=. git" needs one: unset assigns too.
// hash -p maps a name to any file, enable -f loads a library and -n lets
// a file on PATH stand for a builtin, fc runs history entries as code:
// refused, under any command grant (with shell control: without it, the
// words are a program's argv, run without bash).
func TestReviewShellResolution(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allow", shell: "allow"}
	environment: inject: ["GIT_*"]`)
	for _, cmd := range []string{
		`unset PATH; git status`,
		`unset -v PATH; git status`,
		`builtin unset PATH; git status`,
		`command unset -- PATH; git status`,
		`unset x PATH; git status`,
	} {
		d, refused := evaluateReview(p, "bash", map[string]any{"command": cmd})
		if refused != "" || d.Disposition == decision.Allow {
			t.Errorf("%q: %s (refused %q), want a denial for the PATH facet", cmd, d.Disposition, refused)
		}
	}
	checkAllowed(t, p, `unset GIT_DIR; git status`, `unset -f git; git status`, `hash; hash -r; hash git; git status`, `enable; enable -a`)
	checkRefused(t, p,
		`hash -p ./evil git; git status`,
		`hash -rp ./evil git; git status`,
		`builtin hash -p ./evil git; git status`,
		`command hash -p ./evil git; git status`,
		`hash $o ./evil git; git status`,
		`enable -f ./evil.so evil; evil`,
		`enable -n echo; echo hi`,
		`enable -n -- test; test`,
		`builtin enable $x`,
		`history -s 'rm victim.txt'; fc -s`,
		`fc -l; echo`,
		`builtin fc -e vi; echo`,
		`builtin nosuchbuiltin x; echo`,
	)
}
