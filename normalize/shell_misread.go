package normalize

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"polc.dev/polc/internal/pattern"
)

// Places where bash 5.2 reads the source otherwise than the parser
// (mvdan.cc/sh) does, so that the commands it runs are not the ones the
// facets list. Each is refused (fail closed); each ran "touch x" under a
// policy that allows echo and cat only.

// commentMisread: a comment runs to the end of its line in bash, a
// backslash at its end included; the parser reads backslash-newline there
// as a line continuation and goes on with the command: "echo a # \" and
// "touch x" on the next line is one echo to it, two commands to bash.
func commentMisread(src string, c *syntax.Comment) *NormalizeError {
	off := int(c.Hash.Offset())
	if off > len(src) {
		return nil
	}
	if line, _, ok := strings.Cut(src[off:], "\n"); ok && strings.HasSuffix(line, "\\") {
		return Errorf(ReasonInvalidCommand, "%s: comment ending in a backslash: bash ends it at the newline", c.Hash)
	}
	return nil
}

// backquoteMisread: bash ends `…` at the first backquote not escaped by a
// backslash, within single quotes too; the parser skips a quoted one:
// "echo `echo '`;touch x;'` #'" ran touch, a string to the parser. A
// nested (escaped) backquote is refused with it: write $(…).
func backquoteMisread(src string, cs *syntax.CmdSubst) *NormalizeError {
	if !cs.Backquotes {
		return nil
	}
	l, r := int(cs.Left.Offset()), int(cs.Right.Offset())
	if l < r && r <= len(src) && strings.Contains(src[l+1:r], "`") {
		return Errorf(ReasonInvalidCommand, "%s: a backquote within `…`: bash ends the substitution there; write $(…)", cs.Left)
	}
	return nil
}

// quotedDefaultMisread: in ${x-w}, ${x:-w}, ${x+w}, ${x:+w}, ${x=w} and
// ${x:=w} within double quotes (or an unquoted here-document), a single
// quote in w is a character to bash, not a quote: the $(…) between two of
// them runs ("${x:-'$(touch x)'}"); the parser reads a quoted string there.
// So is $'…' in ${x?w} and ${x:?w} ("${x:?$'$(touch x)'}"), whose '…'
// bash reads as a quote.
func quotedDefaultMisread(n syntax.Node) *NormalizeError {
	var bad *NormalizeError
	syntax.Walk(n, func(m syntax.Node) bool {
		switch m := m.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return false // quoted anew inside: the main walk visits them
		case *syntax.ParamExp:
			if m.Exp == nil || m.Exp.Word == nil || bad != nil {
				break
			}
			var dollarOnly bool
			switch m.Exp.Op {
			case syntax.DefaultUnset, syntax.DefaultUnsetOrNull, syntax.AlternateUnset, syntax.AlternateUnsetOrNull,
				syntax.AssignUnset, syntax.AssignUnsetOrNull:
			case syntax.ErrorUnset, syntax.ErrorUnsetOrNull:
				dollarOnly = true
			default:
				return true
			}
			syntax.Walk(m.Exp.Word, func(q syntax.Node) bool {
				switch q := q.(type) {
				case *syntax.CmdSubst, *syntax.ProcSubst:
					return false
				case *syntax.SglQuoted:
					if bad == nil && (q.Dollar || !dollarOnly) {
						bad = Errorf(ReasonInvalidCommand, "%s: quotes in %s within double quotes or a here-document: bash reads them otherwise", m.Pos(), nodeSource(m))
					}
				}
				return true
			})
		}
		return bad == nil
	})
	return bad
}

// heredocMisread: a here-document's delimiter is its word with the quotes
// removed as bash removes them ("E\"F" is E"F, $'E\x41' is EA); the
// parser keeps a backslash in double quotes and does not decode $'…', so
// the two ended the body on different lines, and what one read as the
// body the other ran. Bash also ends the body at lines the parser reads
// otherwise (bashEndsElsewhere), and within a command or process
// substitution (inSubst) at a line that starts with the delimiter and
// goes on ("EOF)" or "EOF ) ; cmd": the rest of the line is code), where
// the parser ends it at the delimiter alone.
func heredocMisread(src string, r *syntax.Redirect, inSubst bool) *NormalizeError {
	if r.Op != syntax.Hdoc && r.Op != syntax.DashHdoc {
		return nil
	}
	stop, quoted := parserHdocStop(r.Word)
	if !literalWord(r.Word) || wordText(r.Word) != stop {
		return Errorf(ReasonInvalidCommand, "%s: here-document delimiter %s: bash ends the body on another line than the parser", r.Pos(), nodeSource(r.Word))
	}
	if r.Hdoc == nil {
		return nil
	}
	// The body's source up to and with the line the parser ended it at
	// (the end of r.Hdoc).
	start, end := int(r.Hdoc.Pos().Offset()), min(int(r.Hdoc.End().Offset()), len(src))
	for start >= 2 && start <= len(src) && src[start-2:start] == "\\\n" {
		start -= 2 // the parser skips a body's leading backslash-newlines
	}
	if start > end {
		return nil
	}
	body := src[start:end]
	if inSubst {
		for line := range strings.SplitSeq(body, "\n") {
			if r.Op == syntax.DashHdoc {
				line = strings.TrimLeft(line, "\t")
			}
			if strings.HasPrefix(line, stop) && line != stop {
				return Errorf(ReasonInvalidCommand, "%s: here-document line %q in a substitution: bash ends the body there", r.Pos(), line)
			}
		}
	}
	if bashEndsElsewhere(body, stop, r.Op == syntax.DashHdoc, !quoted) {
		return Errorf(ReasonInvalidCommand, "%s: here-document: bash ends the body on another line than the parser", r.Pos())
	}
	if quoted {
		return nil
	}
	return quotedDefaultMisread(r.Hdoc)
}

// bashEndsElsewhere reports whether bash ends a here-document on another
// line than the parser did; body is the body's source, its last line the
// delimiter the parser ended it at. Bash reads the body line by line —
// joining, when the delimiter is unquoted (join), a line that ends in an
// odd number of backslashes with the next ("E\" then "OF" is EOF) — and
// ends it at the first line equal to the delimiter, also one inside a
// $(…), `…` or ${…} of the body, or quotes in them, which the parser reads
// as part of a word: "$(echo '", "EOF", "touch x", "')" ran touch. With
// <<- the leading tabs go, of the first line joined or of each (either
// counts).
func bashEndsElsewhere(body, stop string, dash, join bool) bool {
	lines := strings.Split(body, "\n")
	lines = lines[:len(lines)-1] // the parser's delimiter line
	var first, each strings.Builder
	pending := false
	for _, l := range lines {
		t := l
		if dash {
			t = strings.TrimLeft(l, "\t")
			if !pending {
				l = t
			}
		}
		n := len(t) - len(strings.TrimRight(t, "\\"))
		if join && n%2 == 1 {
			first.WriteString(l[:len(l)-1])
			each.WriteString(t[:len(t)-1])
			pending = true
			continue
		}
		first.WriteString(l)
		each.WriteString(t)
		if first.String() == stop || each.String() == stop {
			return true
		}
		first.Reset()
		each.Reset()
		pending = false
	}
	return pending // bash joins the parser's delimiter line to the last
}

// parserHdocStop is the delimiter the parser ends a here-document at
// (mvdan.cc/sh's unquotedWordBytes), and whether the word is quoted.
func parserHdocStop(w *syntax.Word) (string, bool) {
	var b strings.Builder
	quoted := false
	var part func(p syntax.WordPart, inQuotes bool)
	part = func(p syntax.WordPart, inQuotes bool) {
		switch p := p.(type) {
		case *syntax.Lit:
			for i := 0; i < len(p.Value); i++ {
				if c := p.Value[i]; c == '\\' && !inQuotes {
					if i++; i < len(p.Value) {
						b.WriteByte(p.Value[i])
					}
					quoted = true
				} else {
					b.WriteByte(c)
				}
			}
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
			quoted = true
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				part(q, true)
			}
			quoted = true
		}
	}
	for _, p := range w.Parts {
		part(p, false)
	}
	return b.String(), quoted
}

// declValue is a NAME=value argument of a declare, local, typeset, export
// or readonly, whose value bash may read as a compound array assignment.
type declValue struct {
	clause   *syntax.DeclClause
	arg      *syntax.Assign
	arrayOpt bool // the clause has -a or -A
	anyArray bool // the value counts whatever NAME is (declare, local, typeset)
}

// mayCompound reports whether the value w of a declare argument may be
// a compound array assignment to bash: text from '(' to ')' ("(a $(id))"),
// or text known only at run time that may begin with '('.
func mayCompound(w *syntax.Word) bool {
	if literalWord(w) {
		v := wordText(w)
		return strings.HasPrefix(v, "(") && strings.HasSuffix(v, ")")
	}
	lead := leadText(w)
	return lead == "" || lead[0] == '('
}

// modeVars are the variables whose assignment changes how bash reads the
// lines after: POSIXLY_CORRECT turns POSIX mode on (where an assignment
// before a special builtin stays: "LC_ALL=zh_CN.GBK :"), BASH_COMPAT
// selects an older grammar.
var modeVars = map[string]bool{"POSIXLY_CORRECT": true, "BASH_COMPAT": true}

// specialBuiltins are POSIX's special builtins (and bash's source): in
// POSIX mode an assignment before one stays in the shell.
var specialBuiltins = map[string]bool{"break": true, ":": true, ".": true, "continue": true, "eval": true, "exec": true,
	"exit": true, "export": true, "readonly": true, "return": true, "set": true, "shift": true, "source": true,
	"times": true, "trap": true, "unset": true}

// Shell options that change how bash reads or runs the lines after the
// one that sets them, which the parser reads as bash starts (badSetOpts
// by their set -o names, badSetFlags as set letters, badShopts for
// shopt): keyword (-k) makes NAME=value anywhere in a command an
// assignment ("set -k" then "cat f LD_PRELOAD=notes/x.so" gave cat the
// library, no env facet said so); histexpand (-H) with history expands
// "!!" — in double quotes too — into the text of an earlier line
// (echo '$(touch x)', then echo "!!:1", ran touch); posix changes the
// grammar and keeps assignments before special builtins;
// expand_aliases runs aliases; extquote and the compat levels change
// how quotes in ${…} read.
var (
	badSetOpts  = map[string]bool{"keyword": true, "histexpand": true, "history": true, "posix": true}
	badSetFlags = "kH"
	badShopts   = map[string]bool{"expand_aliases": true, "extquote": true, "compat31": true, "compat32": true,
		"compat40": true, "compat41": true, "compat42": true, "compat43": true, "compat44": true}
)

// optionsMisread refuses a set or shopt (also through builtin or
// command) that may change an option of badSetOpts, badSetFlags or
// badShopts, or whose options are known only at run time ("set -e",
// "set -euo pipefail", "shopt -s nullglob" are fine).
func optionsMisread(call *syntax.CallExpr) *NormalizeError {
	args := call.Args
	for len(args) > 0 && literalWord(args[0]) && (wordText(args[0]) == "builtin" || wordText(args[0]) == "command") {
		args = args[1:]
		for len(args) > 0 && literalWord(args[0]) && strings.HasPrefix(wordText(args[0]), "-") {
			args = args[1:]
		}
	}
	if len(args) == 0 || !literalWord(args[0]) {
		return nil
	}
	cmd := wordText(args[0])
	if cmd != "set" && cmd != "shopt" {
		return nil
	}
	bad := func(what string) *NormalizeError {
		return Errorf(ReasonInvalidCommand, "%s: %s %s: bash reads the lines after it otherwise than the parser", call.Pos(), cmd, what)
	}
	setNames := cmd == "set" // shopt -o: set -o names
	for i := 1; i < len(args); i++ {
		w := args[i]
		if !literalWord(w) {
			if lead := leadText(w); lead == "" || lead[0] == '-' || lead[0] == '+' {
				return bad(nodeSource(w)) // an option known only at run time
			}
			if cmd == "set" {
				return nil // positional parameters
			}
			return bad(nodeSource(w))
		}
		v := wordText(w)
		if v == "--" || v == "-" {
			if cmd == "set" {
				return nil
			}
			continue
		}
		if (v[0] == '-' || v[0] == '+') && len(v) > 1 {
			for _, f := range v[1:] {
				switch {
				case cmd == "set" && strings.ContainsRune(badSetFlags, f):
					return bad(v)
				case f == 'o' && cmd == "set":
					if i+1 < len(args) {
						i++
						if !literalWord(args[i]) || badSetOpts[wordText(args[i])] {
							return bad(v + " " + nodeSource(args[i]))
						}
					}
				case f == 'o':
					setNames = true
				}
			}
			continue
		}
		if cmd == "set" {
			return nil // positional parameters
		}
		if badShopts[v] || setNames && badSetOpts[v] {
			return bad(v)
		}
	}
	return nil
}

// arrayMisread: in a compound array assignment within $(…) or <(…), bash
// 5.2 loses an unquoted backslash, so "\(", "\;", "\|" are syntax errors
// to it — after which it goes on with the next line, which the parser
// read as more of the array ("$(a=(\(" then "touch x" then "))" ran
// touch) — and "\"" opens a quote.
func arrayMisread(a *syntax.ArrayExpr) *NormalizeError {
	for _, e := range a.Elems {
		if e.Value == nil {
			continue
		}
		for _, p := range e.Value.Parts {
			if l, ok := p.(*syntax.Lit); ok && strings.Contains(l.Value, "\\") {
				return Errorf(ReasonInvalidCommand, "%s: backslash in an array assignment within a substitution: bash reads it otherwise (quote the element)", e.Pos())
			}
		}
	}
	return nil
}

// extGlobMisread: bash -c starts with extglob off, and reads "!(rm x)" as
// "!" and a subshell running rm, and "@(…)", "?(…)", "*(…)", "+(…)" as a
// syntax error; the parser reads an extended glob, a word ("!(rm x)" ran
// rm under a policy denying it). Within [[ ]] bash does read extended
// globs, and runs the $(…) in one, which the parser keeps as the
// pattern's text ("[[ x == @($(rm x)|x) ]]" ran rm). Refused everywhere.
func extGlobMisread(g *syntax.ExtGlob) *NormalizeError {
	return Errorf(ReasonInvalidCommand, "%s: %s…): bash reads it otherwise than the parser (extglob is off, and in [[ ]] it runs the substitutions in it)", g.OpPos, g.Op)
}

// timeMisread: bash 5.2's lexer reads "time" as the reserved word and
// then "-p" and, after "time" or "time -p", "--" as tokens of its own
// (TIMEOPT, TIMEIGN) that end time's options: "time -- rm x" runs rm.
// The parser takes "-p" only, so it judged the program "--". The first
// word after time (and the parser's -p) starting with '-' is refused:
// bash reads any other such word as the program, as the parser does,
// but there is no command worth the doubt.
func timeMisread(tc *syntax.TimeClause) *NormalizeError {
	// The word after time is the first of the pipeline it times: the
	// parser's time clause holds the whole pipeline ("time -- a | b").
	st := tc.Stmt
	for st != nil {
		b, ok := st.Cmd.(*syntax.BinaryCmd)
		if !ok {
			break
		}
		st = b.X
	}
	if st == nil {
		return nil
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil
	}
	if w := call.Args[0]; literalWord(w) && strings.HasPrefix(wordText(w), "-") || strings.HasPrefix(leadText(w), "-") {
		return Errorf(ReasonInvalidCommand, "%s: time followed by %s: bash reads -p and -- after time as its options, not as the program; write time -p COMMAND", tc.Pos(), nodeSource(w))
	}
	return nil
}

// pipedTimeMisread: bash reads "time" as the reserved word only where a
// pipeline starts (time_command_acceptable), not after '|' or '|&': "echo
// | time -p rm x" runs the program time with the arguments "-p rm x". The
// parser reads the reserved word there too, and judged "rm x". y is the
// right-hand side of a pipe; its first element must not be a time clause.
func pipedTimeMisread(y *syntax.Stmt) *NormalizeError {
	for y != nil {
		switch c := y.Cmd.(type) {
		case *syntax.TimeClause:
			return Errorf(ReasonInvalidCommand, "%s: time after | is the program time to bash, not the reserved word: write { time COMMAND; }", c.Pos())
		case *syntax.BinaryCmd:
			if c.Op != syntax.Pipe && c.Op != syntax.PipeAll {
				return nil
			}
			y = c.X
			continue
		}
		return nil
	}
	return nil
}

// dupSafe are the characters a file named by >&WORD or <&WORD may hold.
const dupSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+,:@%=-"

// dupWordMisread refuses a duplication's word (>&WORD, <&WORD, N>&WORD,
// N<&WORD) that bash reads otherwise than the parser. Bash's lexer reads
// an unquoted '-' right after >& or <& (blanks between them too) as the
// close operator's own token, and the rest as the next word: ">&-rm x"
// closes stdout and runs "rm x", where the parser judged a write to the
// file "-rm" and the program x. And a WORD that is no descriptor number
// makes >&WORD the file redirection &>WORD, for which bash expands the
// already expanded word again: >&'x$(rm v)' runs rm (and <&WORD, 2>&WORD
// are errors after the same expansion). So the word must be "-", a
// number (N or N-, a move), or a file name of dupSafe characters not
// starting with '-': no quote, backslash, '$', '`', glob, brace or tilde
// in its text (write &>FILE for any other name).
func dupWordMisread(n *syntax.Redirect) *NormalizeError {
	if n.Op != syntax.DplIn && n.Op != syntax.DplOut || !literalWord(n.Word) {
		return nil // a word known only at run time is refused (redirection)
	}
	v := wordText(n.Word)
	switch {
	case v == "-" || pattern.Digits(strings.TrimSuffix(v, "-")):
		return nil
	case strings.HasPrefix(v, "-"):
		return Errorf(ReasonInvalidCommand, "%s: %s%s: bash reads %s- as closing the descriptor and the rest as the next word", n.Pos(), n.Op, nodeSource(n.Word), n.Op)
	case strings.Trim(v, dupSafe) != "":
		return Errorf(ReasonInvalidCommand, "%s: %s%s: bash expands the file name of %s a second time; name the file with letters, digits and /._+,:@%%=- only, or write &>FILE", n.Pos(), n.Op, nodeSource(n.Word), n.Op)
	}
	return nil
}

// fdNumberMisread refuses a redirection whose descriptor number does not
// fit in a C int: bash 5.2 takes the digits before < or > as the
// descriptor only when they do, and otherwise as a word of the command
// (an argument, or the program), redirecting the operator's default
// descriptor instead — "cat 2147483648<f >/dev/stdin" makes f stdin and
// then truncates it through /dev/stdin, where the parser saw f on a
// descriptor of its own.
func fdNumberMisread(n *syntax.Redirect) *NormalizeError {
	if n.N == nil || strings.HasPrefix(n.N.Value, "{") {
		return nil
	}
	if fd, err := strconv.ParseInt(n.N.Value, 10, 64); err == nil && fd <= math.MaxInt32 {
		return nil
	}
	return Errorf(ReasonInvalidCommand, "%s: %s%s: bash reads a descriptor number past %d as a word of the command, not as the descriptor", n.Pos(), n.N.Value, n.Op, math.MaxInt32)
}

// programWords are the words of a simple command that name a program:
// the first, and the one that command, builtin and exec (after their
// options: command -p -v -V, exec -c -l -a NAME, "--") run.
func programWords(args []*syntax.Word) []*syntax.Word {
	var out []*syntax.Word
	for len(args) > 0 {
		out = append(out, args[0])
		if !literalWord(args[0]) {
			return out
		}
		v := wordText(args[0])
		if v != "command" && v != "builtin" && v != "exec" {
			return out
		}
		args = args[1:]
		for len(args) > 0 && literalWord(args[0]) {
			o := wordText(args[0])
			if o == "--" {
				args = args[1:]
				break
			}
			if len(o) < 2 || o[0] != '-' {
				break
			}
			args = args[1:]
			if i := strings.IndexByte(o, 'a'); v == "exec" && i == len(o)-1 && len(args) > 0 {
				args = args[1:] // exec -a NAME: the name argv[0] gets
			}
		}
	}
	return out
}

// programMisread refuses a program word w whose program the policy cannot
// know from its text. A command pattern judges the program's name as
// written, and "*" in one matches "/" and "..": with shell control
// (shell), a word bash expands names a program known only at run time
// ("./scripts/${u:-..}/../bin/rm" matched "./scripts/*" and ran bin/rm;
// "./scripts/{..,}/…" and "r{m,}" too), so it must be literal, without an
// unquoted glob, brace or tilde ("[" aside: bash leaves it as it is). A
// path with a ".." segment is refused too (cleaning it would be wrong
// after a link), and a relative path in a command that may change
// directory (changesDir) names no file the policy can judge ("cd ..;
// ./scripts/x" runs a program outside the workspace).
func programMisread(w *syntax.Word, shell, changesDir bool) *NormalizeError {
	if !literalWord(w) {
		return Errorf(ReasonInvalidCommand, "%s: program %s is known only when bash expands it: name the program literally", w.Pos(), nodeSource(w))
	}
	v := wordText(w)
	if shell && expandedWord(w) && v != "[" {
		return Errorf(ReasonInvalidCommand, "%s: program %s: bash expands its glob, brace or tilde: name the program literally", w.Pos(), nodeSource(w))
	}
	if !strings.Contains(v, "/") {
		return nil
	}
	if slices.Contains(strings.Split(v, "/"), "..") {
		return Errorf(ReasonInvalidCommand, "program path %q has a \"..\" segment: a command pattern ending in * would grant it; name the program without \"..\"", v)
	}
	if shell && changesDir && !filepath.IsAbs(v) {
		return Errorf(ReasonInvalidCommand, "%s: relative program path %q in a command that may change directory: use an absolute path", w.Pos(), v)
	}
	return nil
}

// builtinClass is what a bash builtin does that the policy must know of
// (docs/decisions.md lists them).
type builtinClass uint8

const (
	// builtinPlain runs nothing and changes what no later word names.
	builtinPlain builtinClass = iota + 1
	// builtinAssigns assigns or unsets the variables it names: they are
	// environment facets (nameBuiltins, DeclClause), so "unset PATH"
	// needs the grant "PATH=." needs.
	builtinAssigns
	// builtinRuns runs its arguments as code or as a program: what it runs
	// is granted with it, by a command rule naming it.
	builtinRuns
	// builtinChdir changes the working directory (Command.ChangesDir).
	builtinChdir
	// builtinOptions sets shell options; those that change how bash reads
	// or runs the lines after are refused (optionsMisread).
	builtinOptions
	// builtinRefused changes what later words name or run in a way the
	// policy cannot follow; refused in the forms builtinMisread names.
	builtinRefused
)

// shellBuiltins classifies every builtin of bash 5.2 (compgen -b; a test
// checks the list against the bash installed). "builtin NAME" with any
// other NAME is refused: a builtin polc does not know (a newer bash's)
// is one it cannot judge.
var shellBuiltins = map[string]builtinClass{
	":": builtinPlain, "true": builtinPlain, "false": builtinPlain, "echo": builtinPlain, "pwd": builtinPlain,
	"test": builtinPlain, "[": builtinPlain, "type": builtinPlain, "help": builtinPlain, "times": builtinPlain,
	"umask": builtinPlain, "ulimit": builtinPlain, "kill": builtinPlain, "dirs": builtinPlain, "caller": builtinPlain,
	"logout": builtinPlain, "exit": builtinPlain, "return": builtinPlain, "break": builtinPlain, "continue": builtinPlain,
	"shift": builtinPlain, "suspend": builtinPlain, "disown": builtinPlain, "bg": builtinPlain, "fg": builtinPlain,
	// alias: aliases expand only with
	// expand_aliases (refused); complete, compopt and bind act only in
	// interactive line editing, which bash -c never does.
	"alias": builtinPlain, "unalias": builtinPlain, "complete": builtinPlain,
	"compopt": builtinPlain, "bind": builtinPlain,
	"read": builtinAssigns, "mapfile": builtinAssigns, "readarray": builtinAssigns, "printf": builtinAssigns,
	"getopts": builtinAssigns, "wait": builtinAssigns, "unset": builtinAssigns, "declare": builtinAssigns,
	"typeset": builtinAssigns, "local": builtinAssigns, "export": builtinAssigns, "readonly": builtinAssigns,
	"let": builtinAssigns,
	// eval, source, . and trap run text as code, exec, command and
	// builtin the program or builtin named, jobs -x a program, compgen
	// -C and -F a command or function (mapfile -C: its callback is an
	// argv of its own).
	"eval": builtinRuns, "source": builtinRuns, ".": builtinRuns, "trap": builtinRuns, "exec": builtinRuns,
	"command": builtinRuns, "builtin": builtinRuns, "jobs": builtinRuns, "compgen": builtinRuns,
	"cd": builtinChdir, "pushd": builtinChdir, "popd": builtinChdir,
	"set": builtinOptions, "shopt": builtinOptions,
	// history: an entry runs only through fc (refused) or history
	// expansion (set -H, refused), but -a, -n, -r and -w read or write
	// a file (builtinMisread).
	"enable": builtinRefused, "hash": builtinRefused, "fc": builtinRefused, "history": builtinRefused,
}

// builtinMisread refuses a call (also through builtin or command) of a
// builtin in a form that changes what later words name or run beyond what
// the policy sees: enable with operands or options that change anything
// (-f loads a shared object into bash, -n turns a builtin off so its name
// runs a file from PATH), hash -p ("hash -p ./evil git; git status" ran
// ./evil), fc (it runs history entries as code: "history -s 'rm x'; fc
// -s" ran rm), and builtin naming anything shellBuiltins does not list.
func builtinMisread(call *syntax.CallExpr) *NormalizeError {
	args := call.Args
	viaBuiltin := false
	for len(args) > 0 && literalWord(args[0]) && (wordText(args[0]) == "builtin" || wordText(args[0]) == "command") {
		viaBuiltin = viaBuiltin || wordText(args[0]) == "builtin"
		args = args[1:]
		for len(args) > 0 && literalWord(args[0]) && strings.HasPrefix(wordText(args[0]), "-") {
			args = args[1:]
		}
	}
	if len(args) == 0 || !literalWord(args[0]) {
		return nil // a program word known at run time: refused (programMisread)
	}
	name := wordText(args[0])
	class, known := shellBuiltins[name]
	if viaBuiltin && !known {
		return Errorf(ReasonInvalidCommand, "%s: builtin %s: not a bash builtin polc knows", call.Pos(), nodeSource(args[0]))
	}
	if class != builtinRefused {
		return nil
	}
	refused := func(why string) *NormalizeError {
		return Errorf(ReasonInvalidCommand, "%s: %s: %s", call.Pos(), nodeSource(call), why)
	}
	switch name {
	case "fc":
		return refused("fc runs history entries as code")
	case "enable":
		for _, w := range args[1:] {
			if v := wordText(w); !literalWord(w) || len(v) < 2 || v[0] != '-' || strings.Trim(v[1:], "aps") != "" {
				return refused("enable changes which builtins bash has (-f loads a library, -n lets a file on PATH run instead)")
			}
		}
	case "history":
		// -a, -n, -r, -w FILE (or HISTFILE's file): "history -w f"
		// truncates f and "history -r secrets/key; history" prints it,
		// files no facet names. -c, -d, -s, -p and listing touch none.
		for _, w := range args[1:] {
			if v := wordText(w); !literalWord(w) || strings.HasPrefix(v, "-") && strings.ContainsAny(v, "anrw") {
				return refused("history -a, -n, -r and -w read or write a file no facet names")
			}
		}
	case "hash":
		for _, w := range args[1:] {
			if v := wordText(w); !literalWord(w) || strings.HasPrefix(v, "-") && strings.Contains(v, "p") {
				return refused("hash -p makes a command name run any file")
			}
		}
	}
	return nil
}
