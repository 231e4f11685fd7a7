package polccli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// protectGuardID is the id of the guard that keeps a session's actions
// off the session's own files: its refusals are guard:protected_path.
const protectGuardID = "protected_path"

// launcherFile is the sandbox launcher's file name (sandbox.LauncherFile,
// defined on Linux only): the launcher lies next to the polc executable.
const launcherFile = "polc-sandbox"

// protectedPaths lists the paths no action of the session may reach,
// whatever its policy grants (docs/executor.md "The session's own
// files"). files are the session file, its snapshot, the evidence
// directory, the certificate, the signer key, the state database and the
// files SQLite keeps beside it, the trust file, every approval file, the
// approvals and approval-requests directories and the Unix socket the
// session listens on; programs are the polc executable and the sandbox
// launcher beside it, and upstream, the files the session's MCP servers
// run (serverFiles), which only changing or creating them would harm.
// Relative flags are taken from the working directory, as the session
// opens them. Each path is listed as written (absolute and clean) and as
// it resolves (the links of its longest existing prefix followed), since
// an action may name either, and under every other name a mount of polc's
// mount namespace shows it (expandMounts); each list is sorted and
// without duplicates.
func protectedPaths(e *env, p *runParams, scenPath, snapPath, exe string, upstream []string) (files, programs []string, err error) {
	named := []string{scenPath, snapPath}
	for _, f := range []string{p.evidence, p.cert, p.signKey, p.trust, p.approvalDir, p.approvalRequests, p.socket} {
		if f != "" {
			named = append(named, e.abs(f))
		}
	}
	if p.state != "" {
		db := e.abs(p.state)
		named = append(named, db, db+"-wal", db+"-shm", db+"-journal")
	}
	for _, f := range p.approvals {
		named = append(named, e.abs(f))
	}
	if files, err = bothForms(named); err != nil {
		return nil, nil, err
	}
	if programs, err = bothForms(append([]string{exe, filepath.Join(filepath.Dir(exe), launcherFile)}, upstream...)); err != nil {
		return nil, nil, err
	}
	// A mount can show a file under a name no link leads to (a bind
	// mount of a parent directory): each such name is protected too.
	if files, err = expandMounts(files); err != nil {
		return nil, nil, err
	}
	if programs, err = expandMounts(programs); err != nil {
		return nil, nil, err
	}
	return files, programs, nil
}

// bothForms is each of paths (absolute) clean and resolved, sorted and
// without duplicates.
func bothForms(paths []string) ([]string, error) {
	var out []string
	for _, f := range paths {
		if !filepath.IsAbs(f) {
			return nil, fmt.Errorf("%s: not an absolute path", f)
		}
		f = filepath.Clean(f)
		r, err := resolvePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		out = append(out, f, r)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// resolvePrefix resolves the links of the longest existing prefix of the
// clean absolute path p and appends the rest as written. A dangling link
// is a name whose target does not exist: it stays as it is.
func resolvePrefix(p string) (string, error) {
	cur, rest := p, ""
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

// protectGuard is the guard (stage 6) that refuses a request naming a
// protected path: any access at or under one, and a write at a directory
// holding one (removing or replacing that directory would take the file
// with it); reading a directory that holds one is left to the policy.
// Paths are compared case-insensitively — a case-folding file system
// opens a protected file under any case of its name, and refusing too
// much is the safe side — each as the request names it and as it
// resolves through links. A path that cannot be resolved is refused.
func protectGuard(protected []string) executor.Guard {
	low := make([]string, len(protected))
	for i, p := range protected {
		low[i] = strings.ToLower(p)
	}
	check := func(_ context.Context, req *normalize.Normalized) error {
		for _, pa := range req.Paths {
			if !filepath.IsAbs(pa.Path) {
				return fmt.Errorf("%s: not an absolute path", pa.Path)
			}
			r, err := resolvePrefix(filepath.Clean(pa.Path))
			if err != nil {
				return fmt.Errorf("%s: %v", pa.Path, err)
			}
			for _, path := range []string{pa.Path, r} {
				path = strings.ToLower(filepath.Clean(path))
				for _, d := range low {
					if within(d, path) || pa.Access == "write" && within(path, d) {
						return fmt.Errorf("%s %s reaches the session's file %s", pa.Access, pa.Path, d)
					}
				}
			}
		}
		return nil
	}
	return executor.Guard{ID: protectGuardID, Check: check}
}

// within reports whether p is dir or lies below it (both clean and
// absolute).
func within(dir, p string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// executable is the running polc program's path (os.Executable): the
// sandbox launcher is looked for next to it.
func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("the polc executable, which a session's actions must not reach, cannot be found: %v", err)
	}
	return exe, nil
}
