package landlock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"polc.dev/polc/internal/pattern"
)

// errTooMany: a pattern matched more existing paths than a spawn may
// enumerate.
var errTooMany = errors.New("too many paths to enumerate")

// maxVisits bounds the directory entries one call's patterns may visit.
const maxVisits = 50000

// match is one existing path a pattern matches. subtree says the pattern
// matches the path and everything below it (it ended in "**" there), so a
// rule on the path is exact.
type match struct {
	path    string
	subtree bool
	dir     bool
}

// resolver finds the existing paths path patterns match, bounded by a
// budget of directory entries visited. It never follows a symbolic link
// and never returns one: the normalizer judges a path by where its links
// lead, so a grant through a link would reach a path the policy never
// matched.
type resolver struct {
	visits int
}

// expand returns the existing paths absolute pattern p matches. fold
// matches case-insensitively (deny patterns are stored lowercase and match
// any case).
func (r *resolver) expand(p string, fold bool) ([]match, error) {
	if fold {
		// The whole path folds, the workspace's part too, as the decision
		// engine folds a request's path and workspace for deny rules.
		p = strings.ToLower(p)
	}
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	var found []match
	if err := r.walk("/", segs, fold, &found); err != nil {
		return nil, err
	}
	// The reference matcher has the last word: the walk only proposes.
	out := found[:0]
	for _, m := range found {
		s := m.path
		if fold {
			s = strings.ToLower(s)
		}
		if pattern.Match(pattern.Path, p, s) {
			out = append(out, m)
		}
	}
	return out, nil
}

func (r *resolver) walk(cur string, segs []string, fold bool, out *[]match) error {
	fi, err := os.Lstat(cur)
	if err != nil || fi.Mode()&os.ModeSymlink != 0 {
		return nil // absent, or a link: nothing here is granted
	}
	if len(segs) == 0 {
		*out = append(*out, match{path: cur, dir: fi.IsDir()})
		return nil
	}
	if !fi.IsDir() {
		return nil
	}
	seg := segs[0]
	if seg == "**" {
		if len(segs) == 1 {
			*out = append(*out, match{path: cur, subtree: true, dir: true})
			return nil
		}
		if err := r.walk(cur, segs[1:], fold, out); err != nil {
			return err
		}
		return r.each(cur, func(name string, isDir bool) error {
			if !isDir {
				return nil
			}
			return r.walk(filepath.Join(cur, name), segs, fold, out)
		})
	}
	if !fold && !strings.ContainsAny(seg, "*?") {
		r.visits++
		if r.visits > maxVisits {
			return errTooMany
		}
		return r.walk(filepath.Join(cur, seg), segs[1:], fold, out)
	}
	return r.each(cur, func(name string, _ bool) error {
		n := name
		if fold {
			n = strings.ToLower(n)
		}
		if !pattern.MatchGlob(seg, n) {
			return nil
		}
		return r.walk(filepath.Join(cur, name), segs[1:], fold, out)
	})
}

// each calls f for every entry of dir, counting them against the budget.
func (r *resolver) each(dir string, f func(name string, isDir bool) error) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // unreadable: nothing under it is granted
	}
	r.visits += len(ents)
	if r.visits > maxVisits {
		return errTooMany
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink != 0 {
			continue
		}
		if err := f(e.Name(), e.IsDir()); err != nil {
			return err
		}
	}
	return nil
}

// absPattern is pattern p (absolute or workspace-relative) as an absolute
// pattern.
func absPattern(p, ws string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	return strings.TrimSuffix(ws, "/") + "/" + p
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// absentLiteral returns the literal prefix of deny pattern p (its segments
// before the first one with a wildcard) when no path with that name, in
// any case, exists: expand finds only existing paths, and a deny that
// holds only for what exists at spawn is no deny for what the process
// creates. The sandbox carves an absent denied path out of its parent's
// grant, so nothing can be created in that parent (under any name, so no
// case variant either). p is folded to lower case; the existing part of
// the path is matched case-insensitively and returned as it is spelled on
// disk. A prefix that exists, or runs through a symbolic link or a file,
// adds nothing. A pattern that starts with a wildcard in the middle
// ("ws/**/.env") has an existing prefix (ws), so its gap stays.
func (r *resolver) absentLiteral(p string) ([]string, error) {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	n := 0
	for n < len(segs) && !strings.ContainsAny(segs[n], "*?") {
		n++
	}
	lit := segs[:n]
	var out []string
	var walk func(cur string, i int) error
	walk = func(cur string, i int) error {
		if i == len(lit) {
			return nil // exists: expand matched it
		}
		ents, err := os.ReadDir(cur)
		if err != nil {
			return nil // unreadable: nothing is granted under it
		}
		r.visits += len(ents)
		if r.visits > maxVisits {
			return errTooMany
		}
		found := false
		for _, e := range ents {
			if strings.ToLower(e.Name()) != lit[i] {
				continue
			}
			found = true
			if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
				if err := walk(filepath.Join(cur, e.Name()), i+1); err != nil {
					return err
				}
			}
		}
		if !found {
			out = append(out, filepath.Join(append([]string{cur}, lit[i:]...)...))
		}
		return nil
	}
	if err := walk("/", 0); err != nil {
		return nil, err
	}
	return out, nil
}

// literal returns the paths that deny the clean absolute path p, read
// literally (a '*' or '?' in it is a character like any other, never a
// wildcard): p itself, which the sandbox resolves through its links, and
// every spelling of it on disk in another case, since a case-folding file
// system opens p under a name the sandbox would otherwise grant as a
// sibling. Each spelling is as on disk up to its first absent component,
// which is kept (with the rest as p spells it) so that the sandbox carves
// it out of its parent and nothing can create it. The walk follows no
// symbolic link: where p's own links lead is p's resolution.
func (r *resolver) literal(p string) ([]string, error) {
	out := []string{p}
	if p == "/" {
		return out, nil
	}
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	var walk func(cur string, i int) error
	walk = func(cur string, i int) error {
		ents, err := os.ReadDir(cur)
		if err != nil {
			return nil // unreadable here: p itself stays denied
		}
		r.visits += len(ents)
		if r.visits > maxVisits {
			return errTooMany
		}
		found := false
		for _, e := range ents {
			if !strings.EqualFold(e.Name(), segs[i]) {
				continue
			}
			found = true
			next := filepath.Join(cur, e.Name())
			switch {
			case i == len(segs)-1:
				out = append(out, next)
			case e.IsDir() && e.Type()&os.ModeSymlink == 0:
				if err := walk(next, i+1); err != nil {
					return err
				}
			}
		}
		if !found {
			out = append(out, filepath.Join(append([]string{cur}, segs[i:]...)...))
		}
		return nil
	}
	if err := walk("/", 0); err != nil {
		return nil, err
	}
	return out, nil
}

// resolveExisting resolves the symbolic links of the longest existing
// prefix of the absolute path p and appends the rest as written.
func resolveExisting(p string) (string, error) {
	cur, rest := filepath.Clean(p), ""
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", err
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
