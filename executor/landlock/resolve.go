package landlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

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
