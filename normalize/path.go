package normalize

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

func pathFacets(accesses ...string) func(map[string]string, string, *Normalized) *NormalizeError {
	return func(args map[string]string, ws string, out *Normalized) *NormalizeError {
		p, err := NormalizePath(ws, args["path"])
		if err != nil {
			return err
		}
		for _, a := range accesses {
			out.Paths = append(out.Paths, PathAccess{Path: p, Access: a})
		}
		return nil
	}
}

// NormalizePath makes p absolute against the workspace ws (absolute and
// clean) and cleans it. It reports path_escape when p uses ".." to leave the
// workspace, or when p is inside the workspace and an existing prefix of it
// is a symlink resolving outside. Paths outside the workspace that do not
// escape through ".." are returned for the policy to judge.
func NormalizePath(ws, p string) (string, *NormalizeError) {
	if p == "" {
		return "", Errorf(ReasonInvalidPath, "empty path")
	}
	raw := p
	if !filepath.IsAbs(p) {
		p = ws + "/" + p
	}
	clean := filepath.Clean(p)
	if i := firstDotDot(p); i >= 0 {
		// The part before the first ".." says where the author started.
		if base := filepath.Clean(p[:i]); within(ws, base) && !within(ws, clean) {
			return "", Errorf(ReasonPathEscape, "%q leaves the workspace %s", raw, ws)
		}
	}
	if within(ws, clean) {
		resolved, err := resolveExisting(clean)
		if err != nil {
			return "", Errorf(ReasonInvalidPath, "%q: %v", raw, err)
		}
		inWS, ok := workspaceName(ws, resolved)
		if !ok {
			return "", Errorf(ReasonPathEscape, "%q resolves through a symlink to %s, outside the workspace", raw, resolved)
		}
		return inWS, nil
	}
	return clean, nil
}

// workspaceName names the resolved path p (no symlinks) under the
// workspace ws as the policy names it, ws itself unresolved; ok is false
// when p is outside the workspace's resolved location.
func workspaceName(ws, p string) (string, bool) {
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		realWS = ws // a workspace that does not exist has no symlinks to follow
	}
	if !within(realWS, p) {
		return p, false
	}
	rel, _ := filepath.Rel(realWS, p)
	return filepath.Join(ws, rel), true
}

// firstDotDot returns the byte offset of the first ".." segment of p, or -1.
func firstDotDot(p string) int {
	off := 0
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return off
		}
		off += len(seg) + 1
	}
	return -1
}

// within reports whether p is dir or below it (both clean and absolute).
func within(dir, p string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// resolveExisting resolves symlinks in the longest existing prefix of p.
func resolveExisting(p string) (string, error) {
	rest := ""
	cur := p
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
