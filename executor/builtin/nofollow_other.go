//go:build !linux

package builtin

import "os"

// openNoFollow opens path for reading, refusing a symlink in any of its
// components (checked before the open: see checkNoSymlink).
func openNoFollow(path string) (*os.File, error) { return openChecked(path) }

// writeNoFollow replaces path with data atomically, refusing a symlink in
// its directories (checked before the write: see checkNoSymlink).
func writeNoFollow(path string, data []byte, perm os.FileMode) error {
	return writeChecked(path, data, perm)
}
