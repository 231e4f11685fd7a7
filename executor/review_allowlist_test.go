package executor_test

import (
	"testing"

	"polc.dev/polc/decision"
	"polc.dev/polc/normalize"
)

// allowlistReviewPolicy is the allowlist docs/policies.md calls a
// boundary: shell allowed for a few programs and builtins that run
// nothing themselves, the locale variables granted, reads in the
// workspace, writes in notes/ only, no network. Whatever such a command
// is, bash must run no other program or builtin than those its argvs
// show. Each refused command below that names "touch pwned" ran it under
// bash 5.2.15 (checked one by one in a scratch directory), most of them
// with no argv of the normalizer saying so.
const allowlistReviewPolicy = `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "ls *", "grep *", "printf *", "true", "test *", "[ *", "read *", ": *", "sort *", "head *", "wc *"], shell: "allow"}
	environment: inject: ["LANG", "LC_*"]
	filesystem: {read: ["/ws/**"], write: ["/ws/notes/**"]}
	network: mode: "deny"`

func checkAllowed(t *testing.T, p *decision.Policy, cmds ...string) {
	t.Helper()
	for _, cmd := range cmds {
		if got := decideReasons(t, p, "bash", map[string]any{"command": cmd}); got != "allowed" {
			t.Errorf("%q: %s, want allowed", cmd, got)
		}
	}
}

func checkRefused(t *testing.T, p *decision.Policy, cmds ...string) {
	t.Helper()
	for _, cmd := range cmds {
		if got := decideReasons(t, p, "bash", map[string]any{"command": cmd}); got != normalize.ReasonInvalidCommand {
			t.Errorf("%q: %s, want %s", cmd, got, normalize.ReasonInvalidCommand)
		}
	}
}

// TestReviewAllowlistLocaleCharset: bash reads each line of the command
// in the character set of the locale in force when it reads the line. In
// GBK, GB18030 or Big5 a byte from 0x80 starts a two-byte character whose
// second byte may be '\' or '`': after LC_ALL=zh_CN.GBK, UTF-8 "€" (E2 82
// AC) followed by '\' is two characters to bash, E2 82 and AC 5C, and the
// backslash escapes nothing. The parser reads UTF-8, so 'echo "€\"; touch
// pwned # "' was one echo to it and an echo and a touch to bash (with the
// zh_CN.GBK or zh_TW.BIG5 locale installed, as locales-all does). The
// locale variables are ordinary grants ("LC_*"); every way of assigning
// one for the lines after is refused together with a non-ASCII byte.
func TestReviewAllowlistLocaleCharset(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	const payload = "\necho \"€\\\"; touch pwned # \""
	checkRefused(t, p,
		"LC_ALL=zh_CN.GBK"+payload,
		"LANG=zh_TW.BIG5"+payload,
		"LC_CTYPE=zh_CN.GB18030"+payload,
		"export LC_ALL=zh_CN.GBK"+payload,
		"read LC_ALL <<< zh_CN.GBK"+payload,
		": ${LC_CTYPE:=zh_CN.GBK}"+payload,
		"printf -v LANG %s zh_CN.GBK"+payload,
		"for LC_ALL in zh_CN.GBK; do echo; done"+payload,
	)
	// A prefix lasts for its command's run, which parses nothing; ASCII
	// reads alike in every locale bash can run in; without a locale
	// assigned, bash reads as the parser.
	checkAllowed(t, p,
		"LC_ALL=C sort notes/a | grep é",
		"LC_ALL=C.UTF-8 grep -c 'ü' notes/a; echo done",
		"export LC_ALL=C.UTF-8; echo hello",
		"echo \"héllo €\"\necho 'ünïcode'",
	)
}

// TestReviewAllowlistCommentBackslash: a comment runs to the end of its
// line in bash, a backslash at its end included. The parser read the
// backslash-newline as a line continuation and carried on with the
// commented command: "echo a # x\" then "touch pwned" was "echo a touch
// pwned" to it.
func TestReviewAllowlistCommentBackslash(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		"echo a # x\\\ntouch pwned",
		"echo a #\\\ntouch pwned",
		"echo a \\\n# x \\\ntouch pwned",
		"echo a;#\\\ntouch pwned",
	)
	checkAllowed(t, p,
		"echo a # a comment\necho b",
		"echo a \\\n  b # done",
		"echo 'a # \\\nb'",
		"echo a\\#b",
	)
}

// TestReviewAllowlistDollarContinuation: bash removes backslash-newline
// before it reads a '$' with what follows; the parser did not: echo
// "$\ newline (touch pwned)" was the text "$(touch pwned)" to it, a
// command substitution to bash.
func TestReviewAllowlistDollarContinuation(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		"echo \"$\\\n(touch pwned)\"",
		"echo \"${x:-$\\\n(touch pwned)}\"",
		"echo 'a' \"a\\\\\n$\\\n(touch pwned)\"",
	)
	checkAllowed(t, p, "echo \"$LANG\" \\\n  \"${LC_X}\"")
}

// TestReviewAllowlistCarriageReturn: a carriage return is a character of
// a word to bash; the parser reads it as a blank and drops it before a
// newline (backslash, CR, LF is a line continuation to it). "echo \" CR
// LF "touch pwned" was one echo to the parser, and in "echo CR#`touch
// pwned`" it saw a comment; bash ran touch.
func TestReviewAllowlistCarriageReturn(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		"echo a \\\r\ntouch pwned",
		"echo \r#`touch pwned`",
		"echo\r#x `touch pwned`",
		"cat <<'E\r'\nE\r\ntouch pwned\nE\r\r\n",
		"echo a\r\necho b",
	)
	checkAllowed(t, p, "printf 'a\\r\\n'", "echo a\necho b")
}

// TestReviewAllowlistQuotedDefaultSingleQuotes: within double quotes (and
// an unquoted here-document), a single quote in the word of ${x:-w},
// ${x-w}, ${x:+w}, ${x+w}, ${x:=w} and ${x=w} is a character to bash, so
// the $(…) between two of them runs; the parser read a quoted string
// there and listed no command. In ${x?w} and ${x:?w} bash reads '…' as a
// quote but not $'…': "${x:?$'$(touch pwned)'}" ran touch.
func TestReviewAllowlistQuotedDefaultSingleQuotes(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		`echo "${x:-'$(touch pwned)'}"`,
		`echo "${x-'$(touch pwned)'}"`,
		`echo "${x-$'$(touch pwned)'}"`,
		`echo "${x:?$'$(touch pwned)'}"`,
		`LANG=C; echo "${LANG:+'$(touch pwned)'}"`,
		`LANG=C; echo "${LANG+'$(touch pwned)'}"`,
		`echo "${LANG:='$(touch pwned)'}"`,
		`echo "a ${x:-${y:-'$(touch pwned)'}}"`,
		`echo "${x:-'"'}" ; touch pwned ; echo "'"`,
		"cat <<E\n${x:-'$(touch pwned)'}\nE",
		"cat <<E\n${x-'`touch pwned`'}\nE",
	)
	// Pattern words keep their quotes in bash too, and so do words
	// outside double quotes; a quoted here-document expands nothing.
	checkAllowed(t, p,
		`echo "${x:-default}" "${x#'a'}" "${x%'*'}" "${x/'a'/'b'}" ${x:-'a b'}`,
		"cat <<'E'\n${x:-'$(touch pwned)'}\nE",
		`echo "${x:?'not set'}"`,
	)
}

// TestReviewAllowlistHeredocDelimiter: bash and the parser ended a
// here-document on different lines, and each ran as commands what the
// other read as the body. Bash removes the quotes of the delimiter word
// as everywhere ("E\"F" is E"F, "E\\F" is E\F, $'E\x41' is EA) where the
// parser kept the backslashes and did not decode $'…'; in a body bash
// expands, bash joins backslash-newline lines before it compares a line
// with the delimiter ("E\" then "OF", or "\" then "EOF", end the body);
// and bash compares every line of the body, also one inside a $(…), `…`
// or ${…} spanning lines, which the parser reads as part of a word.
func TestReviewAllowlistHeredocDelimiter(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		"cat <<\"E\\\"F\"\nE\"F\ntouch pwned\nE\\\"F",
		"cat <<\"E\\\\F\"\nE\\F\ntouch pwned\nE\\\\F",
		"cat <<\"E\\$F\"\nE$F\ntouch pwned\nE\\$F",
		"cat <<$'E\\x41'\nEA\ntouch pwned\nE\\x41\n",
		"cat <<EOF\nE\\\nOF\ntouch pwned\nEOF",
		"cat <<EOF\nEO\\\nF\ntouch pwned\nEOF",
		"cat <<EOF\n\\\nEOF\ntouch pwned\nEOF",
		"cat <<-EOF\n\tE\\\nOF\ntouch pwned\nEOF",
		"cat <<EOF\na\\\\\\\nEOF\necho 'x\nEOF\ntouch pwned\n'",
		"cat <<EOF\n$(echo '\nEOF\ntouch pwned\n')\nEOF",
		"cat <<EOF\n$(echo \"\nEOF\ntouch pwned\n\")\nEOF",
		"cat <<EOF\n`echo '\nEOF\ntouch pwned\n'`\nEOF",
		"cat <<EOF\n${x:-\nEOF\ntouch pwned\n}\nEOF",
		"cat <<EOF\n$(cat <<'X'\nEOF\ntouch pwned\nX\n)\nEOF",
	)
	checkAllowed(t, p,
		"cat <<EOF\nline $LANG\nEOF",
		"cat <<'EOF'\na \\\nEOF\necho b",
		"cat <<\"EOF\"\n$x\nEOF",
		"cat <<E\\OF\n$x\nEOF",
		"cat <<-'EOF'\n\ta\n\tEOF",
		"cat <<EOF\na \\\\\nEOF",
		"cat > notes/b.sh <<EOF\n./configure \\\n  --prefix=/ws/out\nmake\nEOF",
		"cat <<EOF\n$(echo 'a\nb')\nEOF",
	)
}

// TestReviewAllowlistHeredocInSubstitution: within $(…) or <(…), bash
// ends a here-document at a line that starts with the delimiter and
// reads the rest of the line as code ("EOF)", "EOF) ; cmd"); the parser
// ends it only at the delimiter alone, so what bash ran after "EOF)" was
// body text to it.
func TestReviewAllowlistHeredocInSubstitution(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		"echo $(cat <<EOF\nx\nEOF)\ntouch pwned\nEOF\n)",
		"echo $(cat <<EOF\nx\nEOF) ; touch pwned #\nEOF\n)",
		"echo \"$(cat <<'X'\nX)\"\ntouch pwned\nX\n)\"",
		"echo $(cat <<-EOF\nx\n\tEOF )\ntouch pwned\nEOF\n)",
		"echo <(cat <<EOF\nx\nEOFx)\ntouch pwned\nEOF\n)",
		"echo ${x:-$(echo; cat <<EOF\nx\nEOF)}\ntouch pwned\nEOF\n)}",
	)
	checkAllowed(t, p,
		"echo \"$(cat <<EOF\nline\n EOF\nEOF\n)\"",
		"( cat <<EOF\nx\nEOF)\nEOF\n)",
		"{ cat <<EOF\nx\nEOF}\nEOF\n}",
	)
}

// TestReviewAllowlistArrayInSubstitution: in a compound array assignment
// within $(…) or <(…), bash 5.2 loses an unquoted backslash: "\(", "\|",
// "\;" are syntax errors to it, after which it goes on with the next
// line — which the parser read as more elements of the array.
func TestReviewAllowlistArrayInSubstitution(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		"echo $(LC_A=(\\(\ntouch pwned\n))",
		"echo \"$(LC_A=(a \\|\ntouch pwned\n))\"",
		"cat <(declare -a LC_A=(\\;\ntouch pwned\n))",
	)
	checkAllowed(t, p,
		"echo $(LC_A=(a \"\\(\" '|'\necho\n))",
		"LC_A=(\\( \\|); echo",
	)
}

// TestReviewAllowlistBackquoteQuotes: bash ends `…` at the first
// backquote a backslash does not escape, within single quotes too; the
// parser read "'`;touch pwned;'" as a quoted string inside the
// substitution.
func TestReviewAllowlistBackquoteQuotes(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		"echo `echo '`;touch pwned;'` #'",
		"echo `echo \\`touch pwned\\``",
	)
	checkAllowed(t, p, "echo `echo a` \"`ls notes`\"", "echo `echo '\"'`")
}

// TestReviewAllowlistDeclareCompound: declare, local and typeset with -a
// or -A (export and readonly too), or of a name that is an array already,
// read a value from '(' to ')' — quoted, or expanded at run time — as a
// compound array assignment and run its $(…): declare -a
// LC_X='($(touch pwned))' needed only the LC_X grant.
func TestReviewAllowlistDeclareCompound(t *testing.T) {
	p := reviewPolicy(t, allowlistReviewPolicy)
	checkRefused(t, p,
		`declare -a LC_X='($(touch pwned))'`,
		`declare -A LC_X='([k]=$(touch pwned))'`,
		`typeset -ga LC_X+='($(touch pwned))'`,
		`export -a LC_X='($(touch pwned))'`,
		`readonly -a LC_X='(`+"`touch pwned`"+`)'`,
		`LC_X=(a); declare LC_X='($(touch pwned))'`,
		`read -a LC_X <<< a; declare LC_X='($(touch pwned))'`,
		`LC_V='($(touch pwned))'; declare -a LC_X="$LC_V"`,
		`f() { local -a LC_X='($(touch pwned))'; }; f`,
		// Whatever the parser believes of the name: declare, local and
		// typeset refuse every value that may be compound
		// (TestDeclareRefusesArrayValue).
		`declare LC_X='(a)' LC_Y="$LANG"`,
	)
	checkAllowed(t, p,
		`declare -a LC_X=(a b) LC_Y`,
		`declare LC_X='a' LC_Y="x$LANG"; export LC_Z="$LC_X"`,
		`LC_X=(a); export LC_X='($(touch pwned))'`,
		`declare -a LC_X=' (a)'`,
	)
	// Through builtin or command, with shell control, the same.
	p = reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "builtin *"], shell: "allow"}
	environment: inject: ["*"]`)
	checkRefused(t, p, `echo; builtin declare -a x='($(touch pwned))'`)
	checkAllowed(t, p, `echo; builtin declare -a x`)
}

// TestReviewAllowlistMapfileCallback: mapfile -C runs its callback as
// code, "CALLBACK INDEX LINE": a granted mapfile with a literal callback
// 'touch pwned #' ran touch. The callback must be one plain word, judged
// as a command.
func TestReviewAllowlistMapfileCallback(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "mapfile *", "readarray *"], shell: "allow"}
	environment: inject: ["*"]
	filesystem: read: ["/ws/**"]`)
	checkRefused(t, p,
		`mapfile -C 'touch pwned #' -c 1 a <<< x`,
		`echo; readarray -c1 -tC'touch pwned;:' a <<< x`,
		`mapfile -C time -c 1 a <<< x`, // "time 0 x" runs 0
	)
	checkReasons(t, p, map[string]string{
		`mapfile -C progress -c 1 a < f`: "not_allowed:command,not_allowed:shell",
		`mapfile -C echo -c 1 a < f`:     "allowed",
		`mapfile -t a < f`:               "allowed",
	})
}

// TestReviewAllowlistShellOptions: the parser reads the whole command as
// bash starts, but a line may change how bash reads or runs the lines
// after it. With set granted (for set -e): set -k made "cat f
// LD_PRELOAD=notes/x.so" an assignment bash gave cat, which no env facet
// showed; set -H -o history expanded "!!:1" in double quotes into the
// text of the line before, '$(touch pwned)', and ran it. POSIX mode
// (set -o posix, shopt -o, POSIXLY_CORRECT) keeps an assignment before a
// special builtin, so "LC_ALL=zh_CN.GBK :" changed the character set
// (TestReviewAllowlistLocaleCharset) for the next line.
func TestReviewAllowlistShellOptions(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "set *", "shopt *", "command *", ": *"], shell: "allow"}
	environment: inject: ["*"]
	filesystem: read: ["/ws/**"]`)
	checkRefused(t, p,
		"set -k\ncat f LD_PRELOAD=/ws/notes/x.so",
		"set -ko pipefail; echo",
		"set -o keyword; echo",
		"set -H -o history\necho '$(touch pwned)'\necho \"!!:1\"",
		"command set +o histexpand -o history; echo",
		"o=-k; set $o; echo",
		"shopt -s expand_aliases; echo",
		"shopt -so posix; echo",
		"shopt -s compat41; echo",
		"POSIXLY_CORRECT=1\nLC_ALL=zh_CN.GBK :\necho \"€\\\"; touch pwned # \"",
		"LC_ALL=zh_CN.GBK :\necho \"€\\\"; touch pwned # \"", // in POSIX mode, which the environment may set
		"export POSIXLY_CORRECT=1; echo",
		"BASH_COMPAT=41; echo",
	)
	checkAllowed(t, p,
		"set -euo pipefail; echo",
		"set -e; set -x; set +x; echo",
		"set -- a b; echo \"$@\"",
		"shopt -s nullglob extglob dotglob; echo",
		"POSIXLY_CORRECT=1 cat f; echo",
	)
}

// TestReviewAllowlistTranslatedString: bash translates $"…" through the
// message catalog TEXTDOMAIN, TEXTDOMAINDIR and the locale name choose
// (the command may assign them; C.UTF-8 translates, C does not), and then
// expands the translation like a double-quoted string: with
// notes/C.UTF-8/LC_MESSAGES/d.mo translating "hello" to "$(touch pwned)",
// echo $"hello" ran touch. $"…" is refused wherever it is.
func TestReviewAllowlistTranslatedString(t *testing.T) {
	p := reviewPolicy(t, redirectReviewPolicy)
	checkRefused(t, p, "TEXTDOMAINDIR=/ws/notes TEXTDOMAIN=d LC_ALL=C.UTF-8\necho $\"hello\"")
}
