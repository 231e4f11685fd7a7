package normalize

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"polc.dev/polc/internal/pattern"
)

// bashFacets puts the command's facets (ParseCommand) in out: its argvs
// and environment names, and the files and connections its redirections
// open (redirectFacets).
func bashFacets(args map[string]string, ws string, out *Normalized) *NormalizeError {
	c, err := ParseCommand(args["command"])
	if err != nil {
		return err
	}
	for _, r := range c.Redirects {
		if err := redirectFacets(r, c.ChangesDir, ws, out); err != nil {
			return err
		}
	}
	for _, argv := range c.Argv {
		// A command pattern's '*' matches '/' and "..": "./scripts/*"
		// would grant "./scripts/../../bin/x". A program path that
		// climbs is refused rather than cleaned, since the kernel
		// resolves ".." after a link, not before it.
		if len(argv) > 0 && strings.Contains(argv[0], "/") && slices.Contains(strings.Split(argv[0], "/"), "..") {
			return Errorf(ReasonInvalidCommand, "program path %q has a \"..\" segment: a command pattern ending in * would grant it; name the program without \"..\"", argv[0])
		}
	}
	out.Commands = append(out.Commands, c.Argv...)
	out.Env = append(out.Env, c.Env...)
	slices.Sort(out.Env)
	out.ShellControl = c.ShellControl
	return nil
}

// redirectFacets adds what redirection r opens to out. Bash itself opens
// a redirection's file, whatever program the command runs, so an
// allowlist of read-only programs with shell allowed would otherwise
// write anywhere ("echo x > /etc/cron.d/x"), and bash connects to
// /dev/tcp/HOST/PORT and /dev/udp/HOST/PORT itself, files or no files.
// /dev/null opens nothing to judge, nor do the descriptor files
// (/dev/stdin, /dev/stdout, /dev/stderr, /dev/fd/N) themselves: what
// they may reopen is in the command's Redirects (reopenedFiles). A
// relative target is judged against the workspace, where the command
// starts; one in a command that may change directory (changesDir) names
// no file the policy can judge and is refused. A target through symbolic
// links is judged as written and as the file they lead to (physicalPath).
func redirectFacets(r Redirect, changesDir bool, ws string, out *Normalized) *NormalizeError {
	t := r.Target
	if _, isFD := descriptorFile(t); isFD || t == "/dev/null" {
		return nil // a file it reopens is in Redirects (reopenedFiles)
	}
	if socketFile(t) {
		rest := t[len("/dev/tcp/"):] // "/dev/udp/" is as long
		// bash splits HOST at the first '/' and resolves it and PORT with
		// getaddrinfo: a service name, a percent sign or a second '/'
		// would be read differently here than there.
		host, port, _ := strings.Cut(rest, "/")
		if host == "" || !pattern.Digits(port) || strings.Trim(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") != "" {
			return Errorf(ReasonInvalidCommand, "%s: bash connects to %q: the host must be a name or address and the port a number", r.Pos, t)
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		hp, err := URLHost("tcp://" + host + ":" + port)
		if err != nil {
			return Errorf(ReasonInvalidCommand, "%s: bash connects to %q: %s", r.Pos, t, err.Detail)
		}
		if !slices.Contains(out.Hosts, hp) {
			out.Hosts = append(out.Hosts, hp)
		}
		return nil
	}
	if changesDir && !filepath.IsAbs(t) {
		return Errorf(ReasonInvalidCommand, "%s: relative redirection target %q in a command that may change directory: use an absolute path", r.Pos, t)
	}
	p, err := NormalizePath(ws, t)
	if err != nil {
		return err
	}
	// Bash opens the path as written, through whatever links it has:
	// judged also is the file that leads to, when it is another.
	abs := t
	if !filepath.IsAbs(abs) {
		abs = ws + "/" + abs
	}
	phys, ok := physicalPath(abs)
	if !ok {
		return Errorf(ReasonInvalidCommand, "%s: redirection target %q leads through /proc or a link loop", r.Pos, t)
	}
	if inWS, ok := workspaceName(ws, phys); ok {
		phys = inWS
	}
	add := func(access string) {
		for _, path := range []string{p, phys} {
			pa := PathAccess{Path: path, Access: access}
			if !slices.Contains(out.Paths, pa) {
				out.Paths = append(out.Paths, pa)
			}
		}
	}
	if r.Read {
		add("read")
	}
	if r.Write {
		add("write")
	}
	return nil
}

// physicalPath is the file the kernel opens for the absolute path p, as
// bash passes it: each symbolic link followed where it stands, so a ".."
// after a link leaves the link's target (with notes/l -> /etc/cron.d,
// "notes/l/../x" is /etc/x, where cleaning p names notes/x), and a link
// whose target does not exist leads there too (open creates it: "echo x >
// notes/dangling" writes the file the link names, which NormalizePath
// judged as notes/dangling). Past a missing component the rest is taken as
// written (bash's open creates at most the last one). ok is false for a
// path through /proc — /dev/fd, /dev/stdin and the like are links there,
// to descriptors of whichever process opens them — and for a link loop.
func physicalPath(p string) (phys string, ok bool) {
	cur := "/"
	rest := strings.Split(p, "/")
	for hops := 0; len(rest) > 0; {
		seg := rest[0]
		rest = rest[1:]
		switch seg {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, seg)
		if within("/proc", next) {
			return "", false
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return filepath.Join(append([]string{next}, rest...)...), true
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		target, err := os.Readlink(next)
		if hops++; err != nil || hops > 40 {
			return "", false
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, true
}

// descriptorFile reports whether t names one of bash's descriptors, and
// which: /dev/stdin, /dev/stdout, /dev/stderr and /dev/fd/N are 0, 1, 2
// and N (a number too large for a descriptor is 1<<30).
func descriptorFile(t string) (fd int, ok bool) {
	switch t {
	case "/dev/stdin":
		return 0, true
	case "/dev/stdout":
		return 1, true
	case "/dev/stderr":
		return 2, true
	}
	if n, ok := strings.CutPrefix(t, "/dev/fd/"); ok && pattern.Digits(n) {
		fd, err := strconv.Atoi(n)
		if err != nil || fd > 1<<30 {
			fd = 1 << 30
		}
		return fd, true
	}
	return 0, false
}

// socketFile reports whether bash connects for t instead of opening it.
func socketFile(t string) bool {
	return strings.HasPrefix(t, "/dev/tcp/") || strings.HasPrefix(t, "/dev/udp/")
}

// reopenedFiles is what the command's descriptor files reopen. On Linux,
// opening /dev/fd/N (or /dev/stdin, /dev/stdout, /dev/stderr) opens anew
// the file descriptor N refers to, with the redirection's own access:
// "exec 3< src/a.go; echo x > /dev/fd/3" truncates and writes src/a.go,
// which the policy judged as a read. The descriptors the redirections set
// (redirFDs), copies of them (N>&M, N<&M) and, once any is set, every
// descriptor from 10 up (bash's {NAME} descriptors and the copies it
// saves of the ones a redirection replaces) may hold a file the command
// opened; for each descriptor file naming one, every file the command
// opens is opened again with that redirection's access (fail closed:
// which one the descriptor holds is known only at run time). The
// descriptors bash starts with, pipes, /dev/null and sockets reopen no
// file to judge.
func reopenedFiles(redirs []*syntax.Redirect, opened []Redirect) []Redirect {
	var files []Redirect
	for _, r := range opened {
		if r.JudgedAsPath() {
			files = append(files, r)
		}
	}
	if len(files) == 0 {
		return nil
	}
	held := map[int]bool{}               // descriptors that may hold a file opened
	copied := map[*syntax.Redirect]int{} // N>&M, N<&M and N>/dev/fd/M: M
	for _, n := range redirs {
		r, _ := redirection(n)
		switch {
		case r == nil:
			if (n.Op == syntax.DplIn || n.Op == syntax.DplOut) && literalWord(n.Word) {
				if src, err := strconv.Atoi(strings.TrimSuffix(wordText(n.Word), "-")); err == nil {
					copied[n] = src
				}
			}
		case r.Target == "/dev/null" || socketFile(r.Target):
		default:
			if src, isFD := descriptorFile(r.Target); isFD {
				copied[n] = src
				continue
			}
			for _, fd := range redirFDs(n) {
				held[fd] = true
			}
		}
	}
	holds := func(fd int) bool { return held[fd] || fd >= 10 && len(held) > 0 }
	for changed := true; changed; {
		changed = false
		for _, n := range redirs {
			if src, ok := copied[n]; !ok || !holds(src) {
				continue
			}
			for _, fd := range redirFDs(n) {
				if !held[fd] {
					held[fd], changed = true, true
				}
			}
		}
	}
	var again []Redirect
	for _, r := range opened {
		if fd, isFD := descriptorFile(r.Target); isFD && holds(fd) {
			for _, f := range files {
				again = append(again, Redirect{Target: f.Target, Read: r.Read, Write: r.Write, Pos: r.Pos})
			}
		}
	}
	return again
}

// redirDescriptors notes in c the descriptors redirection n names: its
// literal number, the literal source of a duplication or move (N>&M,
// N>&M-), and whether it closes a {NAME} descriptor (Command.FDs,
// Command.ClosesNamedFD).
func redirDescriptors(n *syntax.Redirect, c *Command) {
	named := false
	if n.N != nil {
		if fd, err := strconv.Atoi(n.N.Value); err == nil {
			c.FDs = append(c.FDs, fd)
		}
		named = strings.HasPrefix(n.N.Value, "{")
	}
	if (n.Op == syntax.DplIn || n.Op == syntax.DplOut) && literalWord(n.Word) {
		v := wordText(n.Word)
		if fd, err := strconv.Atoi(strings.TrimSuffix(v, "-")); err == nil {
			c.FDs = append(c.FDs, fd)
		}
		c.ClosesNamedFD = c.ClosesNamedFD || named && v == "-"
	}
}

// redirFDs are the descriptors redirection n sets: its number, or the
// operator's default (0 for input, 1 for output, 1 and 2 for &> and
// >&file); a {NAME} descriptor is one from 10 up (10 here).
func redirFDs(n *syntax.Redirect) []int {
	if n.N != nil {
		if fd, err := strconv.Atoi(n.N.Value); err == nil {
			return []int{fd}
		}
		return []int{10}
	}
	switch n.Op {
	case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return []int{0}
	case syntax.RdrAll, syntax.AppAll:
		return []int{1, 2}
	case syntax.DplOut:
		if !literalWord(n.Word) || !pattern.Digits(strings.TrimSuffix(wordText(n.Word), "-")) {
			return []int{1, 2} // >&file is &>file
		}
	}
	return []int{1}
}

// Command is a bash command as the policy judges it (ParseCommand).
type Command struct {
	// Argv lists every simple command found, nested ones included; a word
	// that is not a literal is listed as its source text, so deny patterns
	// still see it.
	Argv [][]string
	// Env are the names the command assigns, sorted.
	Env []string
	// Assign are the command's "NAME=value" prefix assignments, in order,
	// when ShellControl is false (their values are then literal).
	Assign []string
	// ShellControl is set by anything beyond one simple command with
	// literal words: ; && || | & and newlines, redirections, substitutions
	// and expansions (brace expansion included), compound commands, bare
	// assignments. Without it the command is exactly Argv[0] run with
	// Assign in its environment — a glob in it is the literal text the
	// policy saw — and a runner must run it so, not through a shell.
	ShellControl bool
	// Redirects are the command's redirections that open a file, in
	// source order. Descriptor duplications (2>&1, <&-) and here-documents
	// open none; a target known only at run time (a variable, a glob, a
	// brace, a tilde, >&$fd) is refused. Then, for each descriptor file
	// (/dev/fd/N, /dev/stdout, …) that may reopen a file the command
	// opened, every such file again with its access (reopenedFiles).
	Redirects []Redirect
	// ChangesDir is set when a command may change bash's working
	// directory: cd, pushd, popd, eval, source or ., also behind builtin or
	// command, or a command word known only at run time.
	ChangesDir bool
	// FDs are the descriptor numbers the command's redirections name
	// literally (N in N>file and N>&M, M in N>&M and N>&M-), sorted, each
	// once: a runner that hands the command descriptors of its own keeps
	// clear of them.
	FDs []int
	// ClosesNamedFD is set by a {NAME}>&- or {NAME}<&- redirection, which
	// closes the descriptor whose number NAME holds: one known only at run
	// time, which may be any.
	ClosesNamedFD bool
}

// Redirect is a redirection that opens a file.
type Redirect struct {
	// Target is the file as bash names it (quotes removed), relative to
	// the working directory when not absolute.
	Target string
	// Read and Write are the accesses it opens the file with (<> both).
	Read, Write bool
	// Pos is the redirection's "line:col" in the command.
	Pos string
	// Start and End are the byte offsets of the target's word in the
	// command's text, End exclusive: a runner that opens the file itself
	// replaces that word (builtin's bash does). Both are 0 for a file a
	// descriptor file reopens (reopenedFiles), which has no word.
	Start, End int
}

// JudgedAsPath reports whether the policy judged r's target as a path
// (redirectFacets): not /dev/null, a descriptor file (/dev/stdin,
// /dev/stdout, /dev/stderr, /dev/fd/N) nor a socket bash connects to
// (/dev/tcp/…, /dev/udp/…).
func (r Redirect) JudgedAsPath() bool {
	_, isFD := descriptorFile(r.Target)
	return !isFD && r.Target != "/dev/null" && !socketFile(r.Target)
}

// dirCommands are the commands that may change bash's working directory
// or run text as code that may (ChangesDir). trap runs its text in the
// shell itself: "trap 'cd /' DEBUG; cat < etc/shadow" reads /etc/shadow.
var dirCommands = map[string]bool{"cd": true, "pushd": true, "popd": true, "eval": true, "source": true, ".": true, "trap": true}

// redirection is what n opens: nil for a here-document or a descriptor
// duplication, ok false for a target known only at run time.
func redirection(n *syntax.Redirect) (r *Redirect, ok bool) {
	var read, write bool
	switch n.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return nil, true
	case syntax.RdrIn:
		read = true
	case syntax.RdrInOut:
		read, write = true, true
	case syntax.DplIn, syntax.DplOut:
		// N>&M and N>&- duplicate or close a descriptor; N>&$x does too
		// when x holds a number, and opens the file x names otherwise
		// (and >&file is &>file). <&file is an error in bash: judged
		// as a read, it fails closed either way.
		if !literalWord(n.Word) {
			return nil, false
		}
		v := wordText(n.Word)
		if pattern.Digits(strings.TrimSuffix(v, "-")) || v == "-" {
			return nil, true
		}
		read, write = n.Op == syntax.DplIn, n.Op == syntax.DplOut
	default: // >, >>, >|, &>, &>>
		write = true
	}
	if len(n.Word.Parts) == 1 {
		if _, ok := n.Word.Parts[0].(*syntax.ProcSubst); ok {
			return nil, true // >(cmd), <(cmd): a pipe to commands judged themselves
		}
	}
	if !literalWord(n.Word) {
		return nil, false
	}
	if expandedWord(n.Word) {
		return nil, false
	}
	v := wordText(n.Word)
	if v == "" {
		return nil, false
	}
	return &Redirect{Target: v, Read: read, Write: write, Pos: n.Pos().String(),
		Start: int(n.Word.Pos().Offset()), End: int(n.Word.End().Offset())}, true
}

// expandedWord reports whether bash expands the literal word w into
// another text than wordText: an unquoted glob names the files it
// matches, a brace (a{b..b}, c{d,}) or a tilde other words. bash expands a
// tilde at the start of a word and, in a word shaped like an assignment
// (k=~user/x, even as a redirection target), after '=' and ':'; an
// unquoted tilde after one of those, or at the start of any unquoted part,
// counts (a home directory reached through a link in the workspace was
// judged as the path k=~user/x).
func expandedWord(w *syntax.Word) bool {
	for _, p := range w.Parts {
		l, isLit := p.(*syntax.Lit)
		if !isLit {
			continue
		}
		if strings.ContainsAny(l.Value, "*?[{") || strings.Contains(l.Value, "=~") || strings.Contains(l.Value, ":~") ||
			strings.HasPrefix(l.Value, "~") {
			return true
		}
	}
	return false
}
