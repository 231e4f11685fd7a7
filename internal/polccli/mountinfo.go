package polccli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// mountInfoFile is where Linux lists the mounts of polc's mount
// namespace; a variable so that a test can show an unreadable one.
var mountInfoFile = "/proc/self/mountinfo"

// maxMountInfo bounds what is read of mountInfoFile: a namespace with
// more mounts than this describes is refused rather than half-read.
const maxMountInfo = 64 << 20

// mount is one line of a mountinfo file: the device (major:minor), the
// directory of that file system the mount shows (root) and where it
// shows it (point), both decoded and clean.
type mount struct {
	dev, root, point string
}

// parseMountInfo reads a mountinfo file (proc(5)): per line, the mount
// id, the parent id, major:minor, the root, the mount point, then
// options. Root and mount point escape space, tab, newline and backslash
// as \ and three octal digits. A line of another form is an error: a
// mount misread could hide an alias.
func parseMountInfo(r io.Reader) ([]mount, error) {
	var out []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 5 || !strings.Contains(f[2], ":") {
			return nil, fmt.Errorf("line %d: not a mountinfo line", n)
		}
		root, err := unescapeMount(f[3])
		if err != nil {
			return nil, fmt.Errorf("line %d: root: %v", n, err)
		}
		point, err := unescapeMount(f[4])
		if err != nil {
			return nil, fmt.Errorf("line %d: mount point: %v", n, err)
		}
		if !filepath.IsAbs(root) || !filepath.IsAbs(point) {
			// Mounts outside polc's root (chroot) have no name here.
			continue
		}
		out = append(out, mount{dev: f[2], root: filepath.Clean(root), point: filepath.Clean(point)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// unescapeMount decodes mountinfo's \NNN (octal) escapes.
func unescapeMount(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("%q: a truncated escape", s)
		}
		v := 0
		for _, c := range s[i+1 : i+4] {
			if c < '0' || c > '7' {
				return "", fmt.Errorf("%q: \\%s is not an octal escape", s, s[i+1:i+4])
			}
			v = v*8 + int(c-'0')
		}
		if v > 0xff {
			return "", fmt.Errorf("%q: \\%s is out of range", s, s[i+1:i+4])
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// mountAliases is each of paths (absolute, clean, links resolved) and
// every other name under which mounts show the same file: for the mount
// that holds a path (the longest mount point it lies under; of equal
// ones the last listed, which covers the others), the path within its
// file system is that mount's root and the rest; every mount of the
// same device whose root holds it shows it at that mount's point and the
// rest (a bind mount of a parent directory, or of the file itself), and
// every mount of the same device whose root lies inside it shows part of
// it at its mount point, which is listed whole. The result holds paths,
// sorted and without duplicates.
func mountAliases(paths []string, mounts []mount) []string {
	out := slices.Clone(paths)
	for _, p := range paths {
		holder := -1
		for i, m := range mounts {
			if within(m.point, p) && (holder < 0 || len(m.point) >= len(mounts[holder].point)) {
				holder = i
			}
		}
		if holder < 0 {
			continue
		}
		h := mounts[holder]
		inner := filepath.Join(h.root, strings.TrimPrefix(p, h.point))
		for _, m := range mounts {
			if m.dev != h.dev {
				continue
			}
			switch {
			case within(m.root, inner):
				out = append(out, filepath.Join(m.point, strings.TrimPrefix(inner, m.root)))
			case within(inner, m.root):
				out = append(out, m.point)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// expandMounts is paths with mountAliases' other names of each, from
// polc's own mount namespace. Off Linux there is no mountinfo to read and
// the paths are returned as they are. On Linux a mountinfo that cannot be
// read or parsed is an error: the aliases it would name are unknown.
func expandMounts(paths []string) ([]string, error) {
	if runtime.GOOS != "linux" {
		return paths, nil
	}
	f, err := os.Open(mountInfoFile)
	if err != nil {
		return nil, fmt.Errorf("the mounts that could show the session's files under other names: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMountInfo+1))
	if err == nil && len(b) > maxMountInfo {
		err = fmt.Errorf("more than %d bytes", maxMountInfo)
	}
	var mounts []mount
	if err == nil {
		mounts, err = parseMountInfo(bytes.NewReader(b))
	}
	if err != nil {
		return nil, fmt.Errorf("the mounts that could show the session's files under other names: %s: %v", mountInfoFile, err)
	}
	return mountAliases(paths, mounts), nil
}
