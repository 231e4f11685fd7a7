package builtin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"polc.dev/polc/normalize"
)

// Bash opens a redirection's file by its path when the redirection runs,
// following every symlink on the way: a link swapped in after the policy
// judged the path (out/ made a link to secrets/ while the command starts)
// led the write elsewhere. So polc opens each file itself before bash
// starts — every component without following a link (openTarget) — and
// bash reopens that very file: the target's word in the command becomes
// /proc/self/fd/K, a descriptor polc passes it, and bash's own open of it
// (with the redirection's flags: >, >>, <, <>) happens when and as often
// as the redirection runs, with no path walk through the workspace.
// docs/executor.md ("How bash redirections open their files") says what
// changes for a command and why.

// firstRedirectFD is the lowest descriptor handed to bash for a target.
// The normalizer counts every descriptor from 10 up as one that may hold
// a file the command opened (so a /dev/fd/K in the command is judged as
// reopening each of them), and bash allocates its own from 10 up only
// among free ones ({NAME}> and the copies it saves).
const firstRedirectFD = 10

// redirectTarget is one file the command's redirections name (its words
// with the same text share it).
type redirectTarget struct {
	target      string // as bash names it
	read, write bool
	path        string // the word's replacement
}

// redirects is what bash needs to open the command's redirection files
// as polc opened them.
type redirects struct {
	text  string     // the command, each target word replaced
	extra []*os.File // exec.Cmd.ExtraFiles: entry K-3 is descriptor K
	// messages maps bash's error prefix for a replaced word back to the
	// target as written ("/proc/self/fd/12: " to "out/f: ").
	messages *strings.Replacer
	// undos remove the files polc created for the command, and started
	// says bash started: a command that never ran (its backend refused
	// to spawn it) leaves no file behind.
	undos   []func(remove bool)
	started bool
}

// close closes polc's copies of the descriptors (bash has its own once
// started) and removes the files created for a command that did not
// start.
func (r *redirects) close() {
	for _, f := range r.extra {
		if f != nil {
			f.Close()
		}
	}
	for _, undo := range r.undos {
		undo(!r.started)
	}
	r.undos = nil
}

// errAbsentDir is a target with a missing directory on its path when the
// command starts: bash would reach it if the command made the directory
// first, but there is no directory for polc to open.
var errAbsentDir = errors.New("a directory on the way does not exist")

// errEscape is a relative target whose ".." leaves the workspace.
var errEscape = errors.New("it leaves the workspace")

// openRedirects opens the files command's redirections name (c is
// command parsed), each beneath the workspace ws (a relative target, or
// an absolute one in the workspace) or the root, with no symlink on the
// way, and returns the command with each target's word replaced. A write
// target that does not exist is created (empty, mode 0666 less the
// umask); a read target that does not exist, or whose directory does
// not, is replaced by a path that fails as bash would (No such file or
// directory) when the redirection runs. The caller closes the result
// once bash has started.
func openRedirects(ws, command string, c normalize.Command) (out *redirects, err error) {
	targets := map[string]*redirectTarget{}
	var order []*redirectTarget
	var words []normalize.Redirect
	for _, r := range c.Redirects {
		if r.End == 0 || !r.JudgedAsPath() {
			continue // a file reopened through /dev/fd/N, /dev/null, a socket
		}
		words = append(words, r)
		t := targets[r.Target]
		if t == nil {
			t = &redirectTarget{target: r.Target}
			targets[r.Target] = t
			order = append(order, t)
		}
		t.read, t.write = t.read || r.Read, t.write || r.Write
	}
	out = &redirects{text: command}
	if len(words) == 0 {
		return out, nil
	}
	if c.ClosesNamedFD {
		return nil, fail("redirect_refused", errors.New("a {NAME}>&- redirection closes a descriptor known only at run time, maybe one polc passes bash for a redirection's file"))
	}
	if err := redirectsSupported(); err != nil {
		return nil, fail("redirect_refused", err)
	}
	// Writes first: a file one redirection creates is there for another
	// that reads it under another spelling.
	slices.SortStableFunc(order, func(a, b *redirectTarget) int {
		switch {
		case a.write == b.write:
			return 0
		case a.write:
			return -1
		}
		return 1
	})
	fd, absent := firstRedirectFD, 0
	var undos []func(remove bool)
	defer func() {
		// A file polc created for a command it then refuses is removed;
		// one for a command that does not start, by close.
		if out != nil {
			out.undos = undos
			return
		}
		for _, undo := range undos {
			undo(true)
		}
	}()
	for _, t := range order {
		f, undo, err := openTarget(ws, t.target, t.write)
		if undo != nil {
			undos = append(undos, undo)
		}
		switch {
		case err == nil:
			for slices.Contains(c.FDs, fd) {
				fd++ // the command names it: it may replace or close it
			}
			for len(out.extra) < fd-3 {
				out.extra = append(out.extra, nil)
			}
			out.extra = append(out.extra, f)
			t.path = "/proc/self/fd/" + strconv.Itoa(fd)
			fd++
		case !t.write && (errors.Is(err, os.ErrNotExist) || errors.Is(err, errAbsentDir)):
			// procfs has no such entry, and nobody can make one.
			absent++
			t.path = "/proc/self/fd/absent-" + strconv.Itoa(absent)
		default:
			out.close()
			out = nil
			return nil, redirectFailure(t, err)
		}
	}
	// Replace the words from the last, so earlier offsets hold.
	slices.SortFunc(words, func(a, b normalize.Redirect) int { return b.Start - a.Start })
	for _, w := range words {
		out.text = out.text[:w.Start] + targets[w.Target].path + out.text[w.End:]
	}
	var pairs []string
	for _, t := range order {
		pairs = append(pairs, t.path+": ", t.target+": ")
	}
	out.messages = strings.NewReplacer(pairs...)
	return out, nil
}

// redirectFailure classes the failure to open t's file before the
// command starts.
func redirectFailure(t *redirectTarget, err error) error {
	class := "not_readable"
	if t.write {
		class = "not_writable"
	}
	switch {
	case errors.Is(err, errSymlink):
		class = "symlink_refused"
	case errors.Is(err, errEscape):
		class = normalize.ReasonPathEscape
	case errors.Is(err, errAbsentDir):
		return fail(class, fmt.Errorf("redirection to %s: %w when the command starts (polc opens redirection files before bash runs): create it in an earlier command", t.target, err))
	}
	return fail(class, fmt.Errorf("redirection to %s: %w", t.target, err))
}

// splitTarget is where the walk of target starts — the workspace for a
// relative target or an absolute one inside it, the root otherwise — and
// the rest of the path as written.
func splitTarget(ws, target string) (inWS bool, rest string) {
	ws = filepath.Clean(ws)
	switch {
	case !strings.HasPrefix(target, "/"):
		return true, target
	case target == ws:
		return true, ""
	case strings.HasPrefix(target, ws+"/"):
		return true, target[len(ws)+1:]
	}
	return false, target
}
