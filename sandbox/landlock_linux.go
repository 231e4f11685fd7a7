//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// maxDenyEntries caps how many directory entries the launcher lists, per
// spawn, to carve denied paths out of their grants. Above it the launcher
// refuses instead of granting the whole tree.
const maxDenyEntries = 4096

// Landlock access rights the package grants.
const (
	rightsRead  = ll.AccessFSReadFile | ll.AccessFSReadDir
	rightsExec  = rightsRead | ll.AccessFSExecute
	rightsWrite = rightsRead | ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSRefer |
		ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
		ll.AccessFSMakeFifo | ll.AccessFSMakeSym
	// rightsFile are the rights that mean something on a non-directory; the
	// kernel refuses a rule on a file with any other.
	rightsFile = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile |
		ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

func rightsOf(a Access) uint64 {
	var r uint64
	if a&AccessRead != 0 {
		r |= rightsRead
	}
	if a&AccessExecute != 0 {
		r |= rightsExec
	}
	if a&AccessWrite != 0 {
		r |= rightsWrite
	}
	return r
}

func landlockABIVersion() (int, error) { return ll.LandlockGetABIVersion() }
func landlockErrata() (int, error)     { return ll.LandlockGetErrata() }

// landlockRestrictSelf enforces the ruleset on the calling thread only: the
// launcher execs (or forks the target) from that very thread right after.
func landlockRestrictSelf(fd int, flags uint32) error {
	return ll.LandlockRestrictSelf(fd, flags)
}

// go-landlock's presets, one per ABI; landlock.V1 is abiPresets[0].
var abiPresets = []landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// landlockConfig handles every filesystem right and scope the ABI knows (so
// everything not granted is denied), and every network right unless the
// network is allowed. It is used without BestEffort: go-landlock then
// refuses, rather than silently drops, what the kernel lacks.
func landlockConfig(abi int, network Network) landlock.Config {
	p := abiPresets[min(abi, len(abiPresets))-1]
	c := landlock.Config{HandledAccessFS: p.HandledAccessFS, Scoped: p.Scoped}
	if network != NetworkAllow {
		c.HandledAccessNet = p.HandledAccessNet
	}
	return c
}

// buildRuleset creates the Landlock ruleset for w: the network rule through
// go-landlock, then one rule per granted path, carving out denied paths.
func buildRuleset(w *wireSpec, abi int) (fd int, flags uint32, err error) {
	cfg := landlockConfig(abi, w.Network)
	var rules []landlock.Rule
	if w.Network == NetworkProxy {
		rules = append(rules, landlock.ConnectTCP(uint16(w.ProxyPort)))
	}
	for _, f := range w.Forwards {
		rules = append(rules, landlock.ConnectTCP(uint16(f.Port)))
	}
	fd, flags, err = cfg.NewRulesetFD(rules...)
	if err != nil {
		return -1, 0, err
	}
	if fd < 0 {
		return -1, 0, errors.New("go-landlock created no ruleset")
	}
	b := &rulesetBuilder{fd: fd, handled: uint64(cfg.HandledAccessFS)}
	if err := b.addGrants(w); err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, flags, nil
}

type rulesetBuilder struct {
	fd      int
	handled uint64
	listed  int // directory entries listed so far (maxDenyEntries)
}

type grant struct {
	path     string
	rights   uint64
	optional bool // a system path: skipped when missing
}

type deny struct {
	path  string // resolved
	isDir bool
}

func (b *rulesetBuilder) addGrants(w *wireSpec) error {
	var grants []grant
	for _, g := range systemPaths {
		grants = append(grants, grant{g.Path, rightsOf(g.Access), true})
	}
	for _, l := range []struct {
		paths  []string
		rights uint64
	}{{w.Read, rightsRead}, {w.Write, rightsWrite}, {w.Execute, rightsExec}} {
		for _, p := range l.paths {
			grants = append(grants, grant{p, l.rights, false})
		}
	}
	denies, err := resolveDenies(w.Deny)
	if err != nil {
		return err
	}
	for _, g := range grants {
		if len(denies) == 0 {
			// Nothing to carve out: the grant attaches to what the path
			// names now (a system path: what it resolves to), opened once.
			if err := b.addPath(g.path, g.rights&b.handled, g.optional); err != nil {
				if g.optional && errors.Is(err, unix.ENOENT) {
					continue
				}
				return grantError(g.path, err)
			}
			continue
		}
		resolved := g.path // a Spec path: addGrant refuses it if it holds a link
		if g.optional {
			r, err := filepath.EvalSymlinks(g.path)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return fmt.Errorf("grant %q: %w", g.path, err)
			}
			resolved = r
		}
		if err := b.addGrant(resolved, g.rights&b.handled, denies); err != nil {
			return grantError(g.path, err)
		}
	}
	return nil
}

// grantError names the grant that failed (openGrant says why a link on its
// way is refused).
func grantError(path string, err error) error {
	return fmt.Errorf("grant %q: %w", path, err)
}

// resolveDenies resolves symlinks in each denied path (as far as it exists),
// since Landlock rules attach to what a path resolves to.
func resolveDenies(paths []string) ([]deny, error) {
	var out []deny
	for _, p := range paths {
		resolved, err := resolveExisting(p)
		if err != nil {
			return nil, fmt.Errorf("deny %q: %w", p, err)
		}
		var st unix.Stat_t
		d := deny{path: resolved}
		switch err := unix.Lstat(resolved, &st); {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
			// Absent: nothing to hide yet, and nobody in the sandbox can
			// create it, since its parent is on the carved-out way.
		case err != nil:
			return nil, fmt.Errorf("deny %q: %w", p, err)
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			d.isDir = true
		case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1:
			// Another name for the same file may lie under a grant.
			return nil, fmt.Errorf("deny %q: the file has %d hard links; a denied file must have one", p, st.Nlink)
		}
		out = append(out, d)
	}
	return out, nil
}

// resolveExisting resolves symlinks in the longest existing prefix of p and
// appends the rest unchanged.
func resolveExisting(p string) (string, error) {
	cur, rest := p, ""
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
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

// within reports whether p lies strictly beneath dir.
func within(dir, p string) bool {
	if dir == "/" {
		return p != "/" && strings.HasPrefix(p, "/")
	}
	return strings.HasPrefix(p, dir+"/")
}

// addGrant grants rights on the resolved path, minus denied paths: a grant
// at or beneath a denied path is dropped, a grant above one is split.
func (b *rulesetBuilder) addGrant(path string, rights uint64, denies []deny) error {
	if rights == 0 {
		return nil
	}
	var below []deny
	for _, d := range denies {
		if d.path == path || within(d.path, path) {
			return nil // deny dominates
		}
		if within(path, d.path) {
			below = append(below, d)
		}
	}
	// The path must be free of symlinks when it is opened.
	fd, err := openGrant(path, false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if len(below) == 0 {
		return b.addRule(fd, rights, path)
	}
	return b.split(fd, path, rights, below)
}

func (b *rulesetBuilder) addPath(path string, rights uint64, follow bool) error {
	fd, err := openGrant(path, follow)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return b.addRule(fd, rights, path)
}

// addRule adds one path-beneath rule for the opened file or directory.
func (b *rulesetBuilder) addRule(fd int, rights uint64, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= rightsFile
	}
	if rights == 0 {
		return nil
	}
	attr := ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: fd}
	if err := ll.LandlockAddPathBeneathRule(b.fd, &attr, 0); err != nil {
		return fmt.Errorf("landlock_add_rule %q: %w", path, err)
	}
	return nil
}

// split grants rights on every entry of the directory dirfd (at path) except
// the denied ones, descending into entries that lead to a denied path. The
// directory itself gets no right that would reach beneath it, except listing
// when no denied directory lies beneath. Entries are opened without following
// symlinks, and a symlink is never granted: whatever it points to is checked
// on its own when it is followed.
func (b *rulesetBuilder) split(dirfd int, path string, rights uint64, below []deny) error {
	if rights&ll.AccessFSReadDir != 0 && !anyDir(below) {
		attr := ll.PathBeneathAttr{AllowedAccess: ll.AccessFSReadDir, ParentFd: dirfd}
		if err := ll.LandlockAddPathBeneathRule(b.fd, &attr, 0); err != nil {
			return fmt.Errorf("landlock_add_rule %q: %w", path, err)
		}
	}
	names, err := b.list(dirfd, path)
	if err != nil {
		return err
	}
	for _, name := range names {
		child := filepath.Join(path, name)
		var sub []deny
		denied := false
		for _, d := range below {
			if d.path == child {
				denied = true
			} else if within(child, d.path) {
				sub = append(sub, d)
			}
		}
		if denied {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return fmt.Errorf("%q: %w", child, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			continue
		}
		if len(sub) > 0 {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("%q changed while resolving denied paths", child)
			}
			cfd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("%q: %w", child, err)
			}
			err = b.split(cfd, child, rights, sub)
			unix.Close(cfd)
			if err != nil {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("%q: %w", child, err)
		}
		err = b.addRule(cfd, rights, child)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

func anyDir(ds []deny) bool {
	for _, d := range ds {
		if d.isDir {
			return true
		}
	}
	return false
}

// list returns the entry names of the directory dirfd, counting them
// against maxDenyEntries.
func (b *rulesetBuilder) list(dirfd int, path string) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var names []string
	for {
		chunk, err := f.Readdirnames(256)
		b.listed += len(chunk)
		if b.listed > maxDenyEntries {
			return nil, fmt.Errorf("deny: more than %d directory entries to list on the way to denied paths (at %q); refusing rather than granting the whole tree", maxDenyEntries, path)
		}
		names = append(names, chunk...)
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%q: %w", path, err)
		}
	}
}
