package normalize

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"polc.dev/polc/internal/pattern"
)

// ParseCommand parses src with a real shell parser (bash) into the
// facets the policy judges. A command that does not parse is
// invalid_command; one with nothing to run is empty_command.
func ParseCommand(src string) (Command, *NormalizeError) {
	var c Command
	if len(src) > MaxCommandBytes {
		// Linux passes one argument of at most 128 KiB with its NUL
		// (MAX_ARG_STRLEN): bash -c could not be given the text.
		return c, Errorf(ReasonInvalidCommand, "the command is %d bytes; bash -c takes at most %d (the kernel's limit on one argument)", len(src), MaxCommandBytes)
	}
	if i := strings.IndexByte(src, '\r'); i >= 0 {
		// A carriage return is a character of a word to bash. The parser
		// reads it as a blank, and drops it before a newline (backslash,
		// CR, LF is a line continuation to it): "echo \", CR, LF,
		// "touch x" ran touch, which the parser saw as arguments of echo,
		// and in "echo CR#`touch x`" it saw a comment.
		return c, Errorf(ReasonInvalidCommand, "carriage return at byte %d: bash reads it as a character of a word", i)
	}
	if i := strings.Index(src, "$\\\n"); i >= 0 {
		// Bash joins the lines first: echo "$\ newline (touch x)" ran
		// touch; the parser read the text "$(touch x)", no command.
		return c, Errorf(ReasonInvalidCommand, "line continuation after '$' at byte %d: bash reads the '$' with the next line", i)
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true)).Parse(strings.NewReader(src), "")
	if err != nil {
		return c, Errorf(ReasonInvalidCommand, "%v", err)
	}
	if err := commandSize(f); err != nil {
		return c, err
	}
	shell := strings.ContainsAny(src, "\n\r") || len(f.Stmts) != 1
	env := map[string]bool{}
	var hidden syntax.Node // where bash would run text as code (hiddenCode)
	hide := func(n syntax.Node, unsafe bool) {
		if unsafe && hidden == nil {
			hidden = n
		}
	}
	// misread is the first place where bash reads the source otherwise
	// than the parser does (commentMisread, …): a command there may be
	// one no facet shows.
	var misread *NormalizeError
	misreads := func(err *NormalizeError) {
		if misread == nil {
			misread = err
		}
	}
	// localeSet: the command sets a variable that selects bash's
	// character set for the lines it reads next (localeVars); modeSet,
	// one that changes its grammar (modeVars).
	localeSet, modeSet := false, ""
	assigns := func(name string) {
		env[name] = true
		localeSet = localeSet || localeVars[name]
		if modeVars[name] && modeSet == "" {
			modeSet = name
		}
	}
	var declValues []declValue
	// inSubst are the redirections and arrays within a $(…), `…`, <(…)
	// or >(…).
	inSubst := map[syntax.Node]bool{}
	markSubst := func(n syntax.Node) {
		syntax.Walk(n, func(m syntax.Node) bool {
			switch m.(type) {
			case *syntax.Redirect, *syntax.ArrayExpr:
				inSubst[m] = true
			}
			return true
		})
	}
	var builtins []*syntax.CallExpr
	var progs []*syntax.Word          // the words naming a program (programWords)
	var runtimeRedir *syntax.Redirect // the first redirection opening a file known only at run time
	var redirs []*syntax.Redirect     // every redirection, for reopenedFiles
	var badCoproc *NormalizeError
	syntax.Walk(f, func(node syntax.Node) bool {
		switch n := node.(type) { // text bash would run as code
		case *syntax.Comment:
			misreads(commentMisread(src, n))
		case *syntax.CmdSubst:
			misreads(backquoteMisread(src, n))
			markSubst(n)
		case *syntax.ProcSubst:
			markSubst(n)
		case *syntax.ExtGlob:
			misreads(extGlobMisread(n))
		case *syntax.ArrayExpr:
			if inSubst[n] {
				misreads(arrayMisread(n))
			}
		case *syntax.DblQuoted:
			misreads(quotedDefaultMisread(n))
			if n.Dollar {
				// $"…" is translated through the message catalog that
				// TEXTDOMAIN, TEXTDOMAINDIR and the locale choose (the
				// command may set them), and the translation is then
				// expanded like "…": 'echo $"hello"' ran the $(…) a
				// catalog in the workspace translated hello to.
				misreads(Errorf(ReasonInvalidCommand, "%s: $\"…\" is translated at run time, and its translation expanded: use \"…\"", n.Pos()))
			}
		case *syntax.ArithmExp:
			hide(n, !constArithm(n.X))
		case *syntax.ArithmCmd:
			hide(n, !constArithm(n.X))
		case *syntax.LetClause:
			for _, x := range n.Exprs {
				hide(n, !constArithm(x))
			}
		case *syntax.CStyleLoop:
			hide(n, !constArithm(n.Init) || !constArithm(n.Cond) || !constArithm(n.Post))
		case *syntax.ParamExp:
			hide(n, n.Index != nil && !allIndex(n.Index) && !constArithm(n.Index))
			hide(n, n.Slice != nil && (!constArithm(n.Slice.Offset) || !constArithm(n.Slice.Length)))
			hide(n, n.Excl && n.Names == 0 && (n.Index == nil || !allIndex(n.Index))) // ${!name}: indirect
			hide(n, n.Exp != nil && n.Exp.Op == syntax.OtherParamOps && (n.Exp.Word == nil || !literalWord(n.Exp.Word) || strings.Contains(wordSource(n.Exp.Word), "P")))
			if n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) && n.Param != nil {
				// ${NAME=word}, ${NAME:=word}: an assignment (with a
				// subscript it makes NAME an array: declValues)
				assigns(n.Param.Value)
				hide(n, !specialValueSafe(n.Param.Value, n.Exp.Word, true))
			}
		case *syntax.TimeClause:
			misreads(timeMisread(n))
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				misreads(pipedTimeMisread(n.Y))
			}
		case *syntax.CoprocClause:
			// Bash names a coprocess only before a compound command
			// ("coproc NAME { …; }"); before anything else the word is
			// the command it runs, which the parser keeps as the name
			// when a redirection or a declaration builtin follows:
			// "coproc bash < script" ran bash with no argv saying so.
			name := "COPROC"
			if n.Name != nil {
				switch n.Stmt.Cmd.(type) {
				case *syntax.Block, *syntax.Subshell, *syntax.IfClause, *syntax.WhileClause, *syntax.ForClause,
					*syntax.CaseClause, *syntax.ArithmCmd, *syntax.TestClause:
				default:
					if badCoproc == nil {
						badCoproc = Errorf(ReasonInvalidCommand, "%s: coproc %s: bash runs this word as the command: write coproc { …; }", n.Pos(), nodeSource(n.Name))
					}
				}
				if !literalWord(n.Name) && badCoproc == nil {
					badCoproc = Errorf(ReasonInvalidCommand, "%s: coproc name known only at run time: %s", n.Pos(), nodeSource(n.Name))
				}
				name = wordText(n.Name)
			}
			// It assigns NAME (its descriptors) and NAME_PID.
			if syntax.ValidName(name) {
				assigns(name)
				assigns(name + "_PID")
			}
		case *syntax.Redirect:
			misreads(heredocMisread(src, n, inSubst[n]))
			misreads(dupWordMisread(n))
			misreads(fdNumberMisread(n))
			redirs = append(redirs, n)
			redirDescriptors(n, &c)
			if r, ok := redirection(n); !ok && runtimeRedir == nil {
				runtimeRedir = n
			} else if r != nil {
				c.Redirects = append(c.Redirects, *r)
			}
			if n.N == nil {
				break
			}
			if v, ok := strings.CutPrefix(n.N.Value, "{"); ok {
				// {NAME}>file assigns the descriptor's number to NAME
				v = strings.TrimSuffix(v, "}")
				hide(n, !safeName(v))
				if name, _, _ := strings.Cut(v, "["); syntax.ValidName(name) {
					assigns(name)
				}
			}
		case *syntax.Assign:
			hide(n, n.Index != nil && !constArithm(n.Index))
			if n.Name != nil && !n.Naked {
				hide(n, n.Array != nil && specialVar(n.Name.Value) || !specialValueSafe(n.Name.Value, n.Value, true))
			}
		case *syntax.ArrayElem:
			hide(n, n.Index != nil && !constArithm(n.Index))
		case *syntax.BinaryTest:
			switch n.Op {
			case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
				x, xok := n.X.(*syntax.Word)
				y, yok := n.Y.(*syntax.Word)
				hide(n, !xok || !yok || !testConst(x) || !testConst(y))
			}
		case *syntax.UnaryTest:
			if n.Op == syntax.TsVarSet || n.Op == syntax.TsRefVar {
				w, ok := n.X.(*syntax.Word)
				hide(n, !ok || !plainName(w))
			}
		case *syntax.WordIter:
			if n.Name != nil {
				assigns(n.Name.Value) // for NAME in …: an assignment
				hide(n, !specialValueSafe(n.Name.Value, nil, false))
			}
		case *syntax.DeclClause:
			// declare, export, local, readonly, typeset: assignments
			// (their names are env like NAME=value's); declare's (and
			// local's, typeset's) -i makes later assignments arithmetic
			// and -n makes a name a reference (export -n only unexports),
			// and a name computed at run time is unknown.
			intRef := n.Variant.Value != "export" && n.Variant.Value != "readonly"
			arrayOpt := false // -a or -A: the names are arrays
			for _, a := range n.Args {
				if a.Naked && a.Value != nil && literalWord(a.Value) && strings.HasPrefix(wordSource(a.Value), "-") {
					arrayOpt = arrayOpt || strings.ContainsAny(wordSource(a.Value), "aA")
				}
			}
			for _, a := range n.Args {
				switch {
				case a.Name != nil:
					assigns(a.Name.Value)
					if a.Value != nil && a.Array == nil {
						declValues = append(declValues, declValue{clause: n, arg: a, arrayOpt: arrayOpt, anyArray: intRef})
					}
				case a.Naked && a.Value != nil && literalWord(a.Value) && strings.HasPrefix(wordSource(a.Value), "-"):
					hide(n, intRef && strings.ContainsAny(wordSource(a.Value), "in"))
				default:
					hide(n, true)
				}
			}
		}
		switch n := node.(type) {
		case *syntax.Stmt:
			if len(n.Redirs) > 0 || n.Background || n.Negated || n.Coprocess || n.Disown {
				shell = true
			}
			if n.Cmd == nil {
				shell = true
			}
		case *syntax.CallExpr:
			// A bare assignment stays, and so does one before a special
			// builtin in POSIX mode; one before any other command is
			// for that command's run only.
			stays := len(n.Args) == 0 || !literalWord(n.Args[0]) || specialBuiltins[wordText(n.Args[0])]
			for _, a := range n.Assigns {
				if a.Name != nil && stays {
					assigns(a.Name.Value)
				} else if a.Name != nil {
					env[a.Name.Value] = true
				}
				if a.Name == nil || a.Append || a.Naked || a.Index != nil || a.Array != nil {
					shell = true // only NAME=word means an environment entry
					continue
				}
				if a.Value == nil {
					c.Assign = append(c.Assign, a.Name.Value+"=")
				} else if v, ok := literalValue(a.Value); ok {
					c.Assign = append(c.Assign, a.Name.Value+"="+v)
				} else {
					shell = true
				}
			}
			if len(n.Args) == 0 {
				shell = true // a bare assignment only means something to a shell
				return true
			}
			for i, w := range n.Args {
				// builtin and command (options aside) run the command
				// their next word names. A glob or brace may name cd
				// too ("c? /" with a file cd, "c{d,} x").
				if !literalWord(w) || expandedWord(w) && wordText(w) != "[" {
					c.ChangesDir = true
					break
				}
				v := wordText(w)
				if dirCommands[v] {
					c.ChangesDir = true
					break
				}
				if v != "builtin" && v != "command" && (i == 0 || !strings.HasPrefix(v, "-")) {
					break
				}
			}
			argv := make([]string, 0, len(n.Args))
			for _, w := range n.Args {
				if !literalWord(w) {
					shell = true
					argv = append(argv, wordSource(w))
					continue
				}
				fields, err := expand.Fields(newExpandConfig(), w)
				if err != nil || len(fields) != 1 {
					// A literal word is exactly one field ("" included).
					shell = true
					argv = append(argv, wordSource(w))
					continue
				}
				argv = append(argv, fields[0])
			}
			c.Argv = append(c.Argv, argv)
			builtins = append(builtins, n)
			progs = append(progs, programWords(n.Args)...)
		case *syntax.BinaryCmd, *syntax.Subshell, *syntax.Block, *syntax.IfClause, *syntax.WhileClause,
			*syntax.ForClause, *syntax.CaseClause, *syntax.FuncDecl, *syntax.ArithmCmd, *syntax.TestClause,
			*syntax.DeclClause, *syntax.LetClause, *syntax.TimeClause, *syntax.CoprocClause, *syntax.TestDecl,
			*syntax.CmdSubst, *syntax.ProcSubst, *syntax.ParamExp, *syntax.ArithmExp, *syntax.ExtGlob, *syntax.BraceExp:
			shell = true
		}
		return true
	})
	if len(c.Argv) == 0 && len(f.Stmts) == 0 {
		return c, Errorf(ReasonEmptyCommand, "no command")
	}
	if shell {
		for _, call := range builtins {
			misreads(optionsMisread(call))
			misreads(builtinMisread(call))
			names, callbacks, ok := builtinNames(call)
			hide(call, !ok)
			for _, cb := range callbacks {
				c.Argv = append(c.Argv, []string{cb})
			}
			for _, name := range names {
				assigns(name) // read NAME, printf -v NAME, …: assignments
				hide(call, !specialValueSafe(name, nil, false))
			}
		}
	}
	for _, d := range declValues {
		// declare -a NAME='(…)' (and local, typeset; export and
		// readonly with -a or -A), or declare NAME="$v" with NAME an
		// array: bash reads a value from '(' to ')' as a compound
		// assignment, and runs the $(…) in it. The text may be known
		// only at run time: then any value that may start with '('.
		// Whether NAME is an array when the declare runs is not
		// something the parser can know for sure (${NAME[0]=v},
		// read -a, a function's caller, …): for declare, typeset and
		// local every such value is refused, array or not. export and
		// readonly (bash 5.2) read a compound value only with -a or -A.
		hide(d.clause, (d.arrayOpt || d.anyArray) && mayCompound(d.arg.Value))
	}
	for _, w := range progs {
		misreads(programMisread(w, shell, c.ChangesDir))
	}
	if misread != nil {
		return Command{}, misread
	}
	if modeSet != "" {
		return Command{}, Errorf(ReasonInvalidCommand, "the command sets %s: bash reads the lines after it otherwise than the parser", modeSet)
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if historyVars[name] {
			// Any assignment, a prefix of one command's too (bash sets
			// it for the builtin's run and truncates then), and unset.
			return Command{}, Errorf(ReasonInvalidCommand, "the command assigns %s: bash truncates or writes the history file (HISTFILE) itself, a file no facet names", name)
		}
	}
	if localeSet {
		if i := nonASCII(src); i >= 0 {
			// Bash reads each line in the character set of the locale set
			// when it reads it: in GBK, Big5 or GB18030 a byte from 0x80
			// takes the next one into its character, '\' and '`' included,
			// so after LC_ALL=zh_CN.GBK the line 'echo "€\"; touch x #"'
			// (UTF-8 "€" is E2 82 AC) is an echo and a touch to bash, one
			// echo to the parser, which reads bytes as UTF-8.
			return Command{}, Errorf(ReasonInvalidCommand, "byte %d is not ASCII in a command that sets the locale (%s): bash may read it in another character set", i, strings.Join(localeNames(env), ", "))
		}
	}
	if hidden != nil {
		// Bash evaluates text it only knows when it runs (a variable's
		// value, a quoted string) as an arithmetic expression or a name,
		// and an array subscript in that text runs its command
		// substitutions: "[[ 'a[$(rm -rf ~)]' -eq 0 ]]" runs rm, though
		// no command of it says so. The policy cannot judge what it
		// cannot see: refuse.
		return Command{}, Errorf(ReasonInvalidCommand, "%s: bash may run text known only at run time as code: %s", hidden.Pos(), nodeSource(hidden))
	}
	if badCoproc != nil {
		return Command{}, badCoproc
	}
	if runtimeRedir != nil {
		// The policy judges the file a redirection opens; a name bash
		// only knows when it runs (a variable, a glob, a tilde) is none.
		return Command{}, Errorf(ReasonInvalidCommand, "%s: redirection %s to a file known only at run time: %s", runtimeRedir.Pos(), runtimeRedir.Op, nodeSource(runtimeRedir.Word))
	}
	c.Redirects = append(c.Redirects, reopenedFiles(redirs, c.Redirects)...)
	slices.Sort(c.FDs)
	c.FDs = slices.Compact(c.FDs)
	for name := range env {
		c.Env = append(c.Env, name)
	}
	slices.Sort(c.Env)
	c.ShellControl = shell
	if shell {
		c.Assign = nil
	}
	return c, nil
}

// literalValue is an assignment's value when it is a literal word.
func literalValue(w *syntax.Word) (string, bool) {
	if !literalWord(w) {
		return "", false
	}
	return wordText(w), true
}

// literalWord reports whether w has no expansion: only literals and
// quotes whose text is fixed (wordText). $"…" is not: bash translates it
// through the message catalog that TEXTDOMAIN, TEXTDOMAINDIR and the
// locale variables name — which the command itself may assign on an
// earlier line — so '> $"notes/a"' can open any file and '$"echo" x' run
// any program. Nor is $'…' with an escape bash decodes otherwise than
// expand does (ansiCFixed).
func literalWord(w *syntax.Word) bool {
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
		case *syntax.SglQuoted:
			if p.Dollar && !ansiCFixed(p.Value) {
				return false
			}
		case *syntax.DblQuoted:
			if p.Dollar {
				return false
			}
			for _, q := range p.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// ansiCFixed reports whether bash decodes the $'…' text s as expand does
// (expand.Format). Only the escapes both read alike are accepted: the
// single-character ones (\a \b \e \E \f \n \r \t \v \\ \' \" \?), \x
// with a hex digit after it, and octal up to \377. Every other escape is
// refused, since a reading bash does not share lets a word hide what bash
// makes of it: \cX is a control character to bash (\c@ ends the string, so
// "$'/etc/x\c@/../../ws/notes/a'" was judged as /ws/notes/a while bash
// opened /etc/x), an octal escape above \377 wraps around (\457 is '/'),
// \u and \U depend on the locale, and bash 5.2 reads \x{HH} as a hex
// escape that expand keeps as text ("<<$'E\x{41}'" ended a here-document
// at a line polc never saw end it).
func ansiCFixed(s string) bool {
	for i := 0; i < len(s)-1; i++ {
		if s[i] != '\\' {
			continue
		}
		i++
		switch c := s[i]; {
		case strings.IndexByte(`abeEfnrtv\'"?`, c) >= 0:
		case c == 'x':
			if i+1 >= len(s) || !isHex(s[i+1]) {
				return false // \x{…}, or \x with no digit
			}
		case isOctal(c):
			if c >= '4' && i+2 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) {
				return false // three digits from \400: more than a byte
			}
		default:
			return false
		}
	}
	return true
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// MaxCommandBytes is the longest bash command ParseCommand accepts:
// Linux's limit on one argument (MAX_ARG_STRLEN, 128 KiB with the
// terminating NUL), which bash -c TEXT must fit in.
const MaxCommandBytes = 128<<10 - 1

// maxCommandDepth and maxSimpleCommands bound the syntax tree a command
// may have. Judging a command costs about a kilobyte per simple command
// and, for nested substitutions, time proportional to the depth times the
// length: a 9 KB text of nested $( took four seconds and 181 MB. No
// command an agent writes nests 200 deep or runs 10,000 commands.
const (
	maxCommandDepth   = 200
	maxSimpleCommands = 10000
)

// commandSize refuses a syntax tree deeper than maxCommandDepth or with
// more than maxSimpleCommands simple commands, before it is judged. (The
// walk stops at the bound, so it costs at most the bound.)
func commandSize(f *syntax.File) *NormalizeError {
	depth, calls := 0, 0
	var over *NormalizeError
	syntax.Walk(f, func(n syntax.Node) bool {
		if over != nil {
			return false
		}
		if n == nil {
			depth--
			return true
		}
		if depth++; depth > maxCommandDepth {
			over = Errorf(ReasonInvalidCommand, "%s: the command nests more than %d deep", n.Pos(), maxCommandDepth)
			return false
		}
		if _, ok := n.(*syntax.CallExpr); ok {
			if calls++; calls > maxSimpleCommands {
				over = Errorf(ReasonInvalidCommand, "%s: the command has more than %d simple commands", n.Pos(), maxSimpleCommands)
				return false
			}
		}
		return true
	})
	return over
}

// newExpandConfig is a fresh expansion state for one call. mvdan.cc/sh's
// expand functions given a nil *Config use one package-level Config whose
// field and string buffers they reuse in place, so concurrent requests
// crossed each other's argv (an allowed echo ran as another request's rm).
// Every expansion gets its own; no expansion state outlives the call.
func newExpandConfig() *expand.Config { return &expand.Config{} }

// wordText is the text bash makes of a literal word (literalWord): its
// quotes removed. expand.Literal keeps an unquoted backslash, which bash
// removes ('\/dev/tcp/…' is /dev/tcp/…, '\.\.' is .., '\cd' is cd).
func wordText(w *syntax.Word) string {
	if !literalWord(w) {
		return wordSource(w) // never expanded: expand.Literal panics on <(…)
	}
	var b strings.Builder
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok {
			b.WriteString(unescapeUnquoted(l.Value))
			continue
		}
		// Quoted text: expand.Literal decodes it as bash does (for
		// $'…' that ansiCFixed admits).
		v, _ := expand.Literal(newExpandConfig(), &syntax.Word{Parts: []syntax.WordPart{p}})
		b.WriteString(v)
	}
	return b.String()
}

// unescapeUnquoted removes the backslashes of unquoted text: bash reads
// "\X" as X; a trailing backslash stays (the parser already dropped
// backslash-newline).
func unescapeUnquoted(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// constArithm reports whether an arithmetic expression (nil: absent) has
// only numeric constants as operands: a name, or any expansion, is text
// that bash evaluates as an expression in turn (hiddenCode).
func constArithm(x syntax.ArithmExpr) bool {
	switch x := x.(type) {
	case nil:
		return true
	case *syntax.BinaryArithm:
		return constArithm(x.X) && constArithm(x.Y)
	case *syntax.UnaryArithm:
		return constArithm(x.X)
	case *syntax.ParenArithm:
		return constArithm(x.X)
	case *syntax.Word:
		if len(x.Parts) != 1 {
			return false
		}
		switch p := x.Parts[0].(type) {
		case *syntax.Lit:
			return numericConst(p.Value)
		case *syntax.ParamExp:
			// $?, $#, $$ and $! expand to numbers (or nothing), and so
			// does a length ${#name} (${#a[@]}, ${#a[2]}: the index is
			// checked like any subscript), never to text bash evaluates.
			return numericParam(p) || p.Length && p.Param != nil && syntax.ValidName(p.Param.Value) &&
				!p.Excl && p.Slice == nil && p.Repl == nil && p.Names == 0 && p.Exp == nil &&
				(p.Index == nil || allIndex(p.Index) || constArithm(p.Index))
		}
	}
	return false
}

// numericConst reports whether s is a bash integer constant: decimal,
// octal, 0x hexadecimal or base#digits.
func numericConst(s string) bool {
	if base, ds, ok := strings.Cut(s, "#"); ok {
		if !pattern.Digits(base) || ds == "" {
			return false
		}
		for _, r := range ds {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '@' || r == '_') {
				return false
			}
		}
		return true
	}
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		if h == "" {
			return false
		}
		for _, r := range h {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
				return false
			}
		}
		return true
	}
	return pattern.Digits(s)
}

// testConst reports whether a [[ ]] arithmetic operand is a numeric
// constant, signed or not ("-1").
func testConst(w *syntax.Word) bool {
	if len(w.Parts) == 1 {
		switch p := w.Parts[0].(type) {
		case *syntax.Lit:
			v := strings.TrimLeft(p.Value, "+-")
			return len(p.Value)-len(v) <= 1 && numericConst(v)
		case *syntax.ParamExp:
			return constArithm(w) // $?, $#, ${#name}: numbers
		}
	}
	return false
}

// allIndex reports whether a subscript is "@" or "*" (every element).
func allIndex(x syntax.ArithmExpr) bool {
	w, ok := x.(*syntax.Word)
	if !ok || len(w.Parts) != 1 {
		return false
	}
	l, ok := w.Parts[0].(*syntax.Lit)
	return ok && (l.Value == "@" || l.Value == "*")
}

// plainName reports whether w is a literal variable name, or one with a
// constant subscript ("a", "a[2]", "a[@]").
func plainName(w *syntax.Word) bool {
	if !literalWord(w) {
		return false
	}
	return safeName(wordText(w))
}

func safeName(v string) bool {
	name, sub, hasSub := strings.Cut(v, "[")
	if hasSub {
		sub, ok := strings.CutSuffix(sub, "]")
		if !ok || !(pattern.Digits(sub) || sub == "@" || sub == "*") {
			return false
		}
	}
	return syntax.ValidName(name)
}

// nameSpec says where a bash builtin takes variable names (with shell
// control a name is bash's: "read 'a[$(id)]'" runs id).
type nameSpec struct {
	nameOpts string // options whose argument is a name (printf -v)
	argOpts  string // options whose argument is something else (read -d)
	codeOpts string // options whose argument bash runs as code (mapfile -C)
	operands int    // which operands are names: -1 all, 0 none, k the k-th
	assigns  bool   // the names are assigned (environment facets)
	decl     bool   // declare family: NAME=value operands, +x options
	intRef   bool   // -i (arithmetic) and -n (a reference) are refused
	test     bool   // test/[: the argument after -v or -R is a name
	funcOpts string // options that make the operands function names (unset -f)
}

// nameBuiltins are the bash builtins that take variable names, with the
// options of each that take an argument (bash's internal_getopt).
var nameBuiltins = map[string]nameSpec{
	"read":      {nameOpts: "a", argOpts: "dinNptu", operands: -1, assigns: true},
	"mapfile":   {argOpts: "dnOsuc", codeOpts: "C", operands: -1, assigns: true},
	"readarray": {argOpts: "dnOsuc", codeOpts: "C", operands: -1, assigns: true},
	"printf":    {nameOpts: "v", assigns: true},
	"wait":      {nameOpts: "p", assigns: true},
	"getopts":   {operands: 2, assigns: true},
	"unset":     {operands: -1, assigns: true, funcOpts: "f"}, // unset PATH: bash searches "." (env facet PATH)
	"declare":   {operands: -1, assigns: true, decl: true, intRef: true},
	"typeset":   {operands: -1, assigns: true, decl: true, intRef: true},
	"local":     {operands: -1, assigns: true, decl: true, intRef: true},
	"export":    {operands: -1, assigns: true, decl: true},
	"readonly":  {operands: -1, assigns: true, decl: true},
	"test":      {test: true},
	"[":         {test: true},
}

// builtinNames reports whether a command's name arguments, if it is (or
// wraps through builtin/command) a builtin of nameBuiltins, are literal
// names with constant subscripts (safeName), and returns the names it
// assigns and the commands it calls back (mapfile -C, one plain word). A
// word bash could read as an option or a name whose text is known only at
// run time is unsafe too (printf "$o" x, with o='-va[$(id)]'). A builtin
// called through anything else (a non-literal word) is not checked here:
// its argv is the source text, which allow patterns judge.
func builtinNames(call *syntax.CallExpr) (assigned, callbacks []string, ok bool) {
	args := call.Args
	var spec nameSpec
	for {
		if len(args) == 0 || !literalWord(args[0]) {
			return nil, nil, true
		}
		v := wordText(args[0])
		args = args[1:]
		if v == "builtin" || v == "command" {
			// Their own options: "command -p read", "builtin -- read".
			for len(args) > 0 && literalWord(args[0]) && strings.HasPrefix(wordText(args[0]), "-") {
				args = args[1:]
			}
			continue
		}
		if v == "let" {
			return nil, nil, false // arithmetic on its arguments
		}
		var found bool
		if spec, found = nameBuiltins[v]; !found {
			return nil, nil, true
		}
		break
	}
	var names []string
	funcs := false // the operands are function names
	name := func(s string) bool {
		if !safeName(s) {
			return false
		}
		n, _, _ := strings.Cut(s, "[")
		names = append(names, n)
		return true
	}
	if spec.test {
		if !testShapeSafe(call.Args[len(call.Args)-len(args)-1], args) {
			return nil, nil, false
		}
		// test has no options: "-v NAME" and "-R NAME" anywhere.
		for i := 1; i < len(args); i++ {
			if prev := args[i-1]; literalWord(prev) {
				if p := wordText(prev); p == "-v" || p == "-R" {
					if !literalWord(args[i]) || !safeName(wordText(args[i])) {
						return nil, nil, false
					}
				}
			}
		}
		return nil, nil, true
	}
	// Options, as bash's internal_getopt reads them: words starting with
	// '-' (not "-" alone; '+' too for declare) up to "--" or the first
	// operand; a letter taking an argument takes the rest of its word or
	// the next word.
opts:
	for len(args) > 0 {
		w := args[0]
		if !literalWord(w) {
			if lead := leadText(w); lead == "" || lead[0] == '-' || spec.decl && lead[0] == '+' {
				return nil, nil, false // an option or a name known only at run time
			}
			break
		}
		s := wordText(w)
		if s == "--" {
			args = args[1:]
			break
		}
		if len(s) < 2 || s[0] != '-' && !(spec.decl && s[0] == '+') {
			break
		}
		args = args[1:]
		if spec.intRef && s[0] == '-' && strings.ContainsAny(s, "in") {
			return nil, nil, false // declare -i: arithmetic; -n: a reference
		}
		for j := 1; j < len(s); j++ {
			c := s[j : j+1]
			funcs = funcs || strings.Contains(spec.funcOpts, c)
			isName, isCode := strings.Contains(spec.nameOpts, c), strings.Contains(spec.codeOpts, c)
			if !isName && !isCode && !strings.Contains(spec.argOpts, c) {
				continue
			}
			arg := s[j+1:]
			if arg == "" {
				if len(args) == 0 {
					break opts
				}
				next := args[0]
				args = args[1:]
				if !literalWord(next) {
					if isName || isCode {
						return nil, nil, false
					}
					continue opts
				}
				arg = wordText(next)
			}
			if isName && !name(arg) {
				return nil, nil, false
			}
			if isCode {
				// mapfile -C CALLBACK: bash runs "CALLBACK INDEX LINE"
				// as code ('touch x #' ran touch): a command the policy
				// judges, so one word naming it.
				if !plainWord(arg) {
					return nil, nil, false
				}
				callbacks = append(callbacks, arg)
			}
			continue opts
		}
	}
	for i, w := range args {
		if spec.operands != -1 && spec.operands != i+1 {
			continue
		}
		if !literalWord(w) {
			return nil, nil, false
		}
		s := wordText(w)
		if spec.decl {
			var value string
			s, value, _ = strings.Cut(s, "=") // NAME=value
			if strings.HasPrefix(value, "(") && strings.HasSuffix(value, ")") {
				return nil, nil, false // a compound assignment (mayCompound)
			}
		}
		if !name(s) {
			return nil, nil, false
		}
	}
	if !spec.assigns || funcs {
		names = nil
	}
	return names, callbacks, true
}

// plainWord reports whether bash reads s, given as code, as one command
// word of itself: letters, digits and _ - . / + : , @ only, and not a
// reserved word ("time", "coproc" run the next word).
func plainWord(s string) bool {
	if s == "" || syntax.IsKeyword(s) {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./+:,@", r)) {
			return false
		}
	}
	return true
}

// leadText is the literal text a word starts with, "" when it starts
// with an expansion — which decides whether bash could read the word as
// an option. A word that is only a numeric special parameter ($!, $?,
// $#, $$: "wait $!") reads as "0".
func leadText(w *syntax.Word) string {
	if len(w.Parts) == 0 {
		return ""
	}
	first := w.Parts[0]
	if q, ok := first.(*syntax.DblQuoted); ok && len(q.Parts) > 0 {
		if q.Dollar {
			return "" // translated at run time (literalWord)
		}
		if l, ok := q.Parts[0].(*syntax.Lit); ok {
			return l.Value // in double quotes "\-" stays "\-"
		}
		first = q.Parts[0]
	}
	switch p := first.(type) {
	case *syntax.Lit:
		return unescapeUnquoted(p.Value) // \-v"$n" is -v… to bash
	case *syntax.SglQuoted:
		if !p.Dollar {
			return p.Value
		}
		if !ansiCFixed(p.Value) {
			return "" // not known before run time
		}
		return wordText(&syntax.Word{Parts: []syntax.WordPart{p}}) // $'\055v' is -v
	case *syntax.ParamExp:
		if len(w.Parts) == 1 && numericParam(p) {
			return "0"
		}
	}
	return ""
}

// numericParam reports whether p expands to a number or nothing: $!, $?,
// $#, $$ without any operation.
func numericParam(p *syntax.ParamExp) bool {
	return p.Param != nil && strings.Contains("!?#$", p.Param.Value) && len(p.Param.Value) == 1 &&
		!p.Excl && !p.Length && !p.Width && !p.IsSet && p.Index == nil && p.Slice == nil && p.Repl == nil && p.Names == 0 && p.Exp == nil
}

// integerVars are the variables bash 5.2 gives the integer attribute
// itself ("declare -pi" in a clean bash; TestIntegerVarsFromBash checks
// the list against the bash installed): a value assigned to one, with =
// or +=, is evaluated as arithmetic, and an array subscript in it runs
// its $(…) ("BASHPID+='a[$(id)]'" runs id). EUID, PPID and UID are
// read-only (bash refuses the assignment before evaluating it); they are
// listed so that the list is bash's.
var integerVars = map[string]bool{"BASHPID": true, "EUID": true, "HISTCMD": true, "OPTIND": true, "PPID": true,
	"RANDOM": true, "SRANDOM": true, "UID": true}

// promptVars are bash's prompt strings and PROMPT_COMMAND. Bash decodes a
// prompt's backslash escapes ("\044" is '$', "\$" is '$' for a user other
// than root) and then expands the result, $(…) included: PS4 for every
// command traced under set -x, PS3 for select, the others in interactive
// shells. A value is accepted only as literal text of promptSafe
// characters.
var promptVars = map[string]bool{"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true, "PROMPT_COMMAND": true}

// promptSafe are the characters a prompt variable's value may hold: no
// backslash (an escape), '$' or '`' (an expansion), '!' (the history
// number) or anything else bash's prompt decoding gives a meaning.
const promptSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +-_.:,=>#@/%"

// specialVar reports whether bash evaluates a value assigned to name as
// code (integerVars, promptVars).
func specialVar(name string) bool { return integerVars[name] || promptVars[name] }

// specialValueSafe reports whether assigning value (nil: none; known:
// the value is the word) to the variable name runs no code unseen.
func specialValueSafe(name string, value *syntax.Word, known bool) bool {
	if !specialVar(name) || known && value == nil {
		return true
	}
	if !known || !literalWord(value) {
		return false
	}
	v := wordText(value)
	if promptVars[name] {
		return strings.Trim(v, promptSafe) == ""
	}
	return v == "" || numericConst(v)
}

// historyVars are the variables whose assignment makes bash touch the
// history file: assigning HISTFILESIZE (also for one command, also with
// history off) truncates the file HISTFILE names to that many lines
// ("HISTFILE=secrets/key HISTFILESIZE=0 echo; echo" emptied secrets/key),
// and history -a/-w write it. HISTSIZE only bounds the list in memory, but
// is refused with them: a command has no use for any of them, and no
// value of them is safe while another is assigned.
var historyVars = map[string]bool{"HISTFILE": true, "HISTFILESIZE": true, "HISTSIZE": true}

// nodeSource is n's source text for a message, shortened.
func nodeSource(n syntax.Node) string {
	var b strings.Builder
	syntax.NewPrinter().Print(&b, n)
	s := b.String()
	if r := []rune(s); len(r) > 60 {
		s = string(r[:60]) + "…"
	}
	return strconv.Quote(s)
}

func wordSource(w *syntax.Word) string {
	var b strings.Builder
	syntax.NewPrinter().Print(&b, w)
	return b.String()
}

// testShapeSafe reports whether a test or [ command (cmd, then args), run
// by bash with shell control, can only read its run-time words as
// operands. Bash's test decides by the number of words and the values of
// some of them whether a word is an operator, and "-v NAME" (or "-R")
// evaluates NAME's subscript as arithmetic: o=-v; [ "$o" "$n" ] runs
// whatever $(…) $n holds. So a word known only at run time must be one
// quoted word (an unquoted expansion, glob or brace may become several, or
// none) in a position where the grammar takes an operand whatever its value:
// [ W ], [ OP W ] and [ ! W ], [ W BINOP W ], [ ! OP W ], [ ( W ) ],
// [ ! W BINOP W ], OP a unary operator other than -v and -R. Anything else
// with a run-time word is refused (fail closed: [ -f $f ] must quote $f).
func testShapeSafe(cmd *syntax.Word, args []*syntax.Word) bool {
	if c := wordText(cmd); c == "[" && len(args) > 0 {
		if last := wordText(args[len(args)-1]); literalWord(args[len(args)-1]) && last == "]" {
			args = args[:len(args)-1]
		}
	}
	lits := make([]string, len(args)) // "" with isLit false: known at run time
	isLit := make([]bool, len(args))
	runtime := false
	for i, w := range args {
		if !oneWord(w) {
			return false
		}
		if literalWord(w) {
			lits[i] = wordText(w)
			isLit[i] = true
		} else {
			runtime = true
		}
	}
	if !runtime {
		return true
	}
	lit := func(i int, set map[string]bool) bool { return isLit[i] && set[lits[i]] }
	bang := map[string]bool{"!": true}
	switch len(args) {
	case 1:
		return true
	case 2:
		return lit(0, bang) || lit(0, testUnary)
	case 3:
		return lit(1, testBinary) || (lit(0, bang) && lit(1, testUnary)) ||
			(lit(0, map[string]bool{"(": true}) && lit(2, map[string]bool{")": true}))
	case 4:
		return lit(0, bang) && lit(2, testBinary)
	}
	return false
}

// oneWord reports whether bash expands w to exactly one word: only
// literal text without glob or brace characters, and quoted parts.
func oneWord(w *syntax.Word) bool {
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "*?[{") {
				return false
			}
		case *syntax.SglQuoted:
		case *syntax.DblQuoted:
			// "$@", "${a[@]}" and "${!prefix@}" are a word per element.
			for _, q := range p.Parts {
				if pe, ok := q.(*syntax.ParamExp); ok && (pe.Param != nil && pe.Param.Value == "@" || pe.Names != 0 ||
					pe.Index != nil && allIndex(pe.Index)) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// testUnary and testBinary are bash test's operators that take operands
// as values (-v and -R, which take a variable name, are left out).
var (
	testUnary = map[string]bool{"-a": true, "-b": true, "-c": true, "-d": true, "-e": true, "-f": true, "-g": true, "-h": true,
		"-k": true, "-p": true, "-r": true, "-s": true, "-t": true, "-u": true, "-w": true, "-x": true, "-G": true, "-L": true,
		"-N": true, "-O": true, "-S": true, "-z": true, "-n": true, "-o": true}
	testBinary = map[string]bool{"=": true, "==": true, "!=": true, "<": true, ">": true, "-eq": true, "-ne": true, "-lt": true,
		"-le": true, "-gt": true, "-ge": true, "-nt": true, "-ot": true, "-ef": true, "-a": true, "-o": true}
)

// localeVars are the variables that choose the character set bash reads
// its input in (LC_ALL over LC_CTYPE over LANG). Assigned by the command
// itself — not only as a prefix of one command, which lasts for that
// command's run — they apply to every line bash reads after (misread).
var localeVars = map[string]bool{"LANG": true, "LC_ALL": true, "LC_CTYPE": true}

// localeNames are the locale variables among the names env assigns.
func localeNames(env map[string]bool) []string {
	var names []string
	for name := range env {
		if localeVars[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// nonASCII is the offset of the first byte of s from 0x80, or -1.
func nonASCII(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return i
		}
	}
	return -1
}
