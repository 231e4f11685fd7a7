package builtin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"polc.dev/polc/internal/atomicfile"
)

// errSymlink is the refusal of a path that goes through a symlink: the
// policy decided on the path as written (the normalizer resolves links
// inside the workspace before the policy sees the path), so following a
// link would make the access another file's.
var errSymlink = errors.New("the path goes through a symlink")

// checkNoSymlink refuses a path with a symlink in any existing component.
// It is the portable check (and the fallback for kernels without
// openat2): a link swapped in between this check and the open is not
// seen.
func checkNoSymlink(path string) error {
	cur := "/"
	for _, c := range strings.Split(strings.Trim(filepath.ToSlash(path), "/"), "/") {
		if c == "" {
			continue
		}
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			return nil // nothing below a missing component exists
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return &os.PathError{Op: "open", Path: cur, Err: errSymlink}
		}
	}
	return nil
}

// openChecked is openNoFollow by checkNoSymlink and os.Open.
func openChecked(path string) (*os.File, error) {
	if err := checkNoSymlink(path); err != nil {
		return nil, err
	}
	return os.Open(path)
}

// writeChecked is writeNoFollow by checkNoSymlink, os.MkdirAll and
// atomicfile.WriteFile.
func writeChecked(path string, data []byte, perm os.FileMode) error {
	if err := checkNoSymlink(filepath.Dir(path)); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, perm)
}
