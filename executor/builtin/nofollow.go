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
	// Checked before the open too, here: without O_NONBLOCK the open of a
	// FIFO would wait for a writer.
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "open", Path: path, Err: errNotRegular}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return regularOnly(f)
}

// errNotRegular refuses what is not a regular file: a FIFO or a device
// would block the worker, a directory reads as nothing.
var errNotRegular = errors.New("not a regular file")

// regularOnly returns f if it is a regular file, and closes it otherwise.
func regularOnly(f *os.File) (*os.File, error) {
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &os.PathError{Op: "open", Path: f.Name(), Err: errNotRegular}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writeChecked is writeNoFollow by checkNoSymlink, os.MkdirAll and
// atomicfile.WriteFile; a replaced file keeps its permission bits.
func writeChecked(path string, data []byte, perm os.FileMode) error {
	if err := checkNoSymlink(filepath.Dir(path)); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
		perm = fi.Mode().Perm()
	}
	return atomicfile.WriteFile(path, data, perm)
}
