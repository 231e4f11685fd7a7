//go:build unix

package polccli

import (
	"os"
	"syscall"
)

// fileKey identifies a file's content as long as it is replaced only by
// renames: its device and inode, size and modification time. (A file
// renamed into place is a new inode; an inode number reused by a later
// file comes with another modification time.)
type fileKey struct {
	dev, ino, size int64
	mtime          int64 // nanoseconds
}

// identity is fi's fileKey.
func identity(fi os.FileInfo) (fileKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{dev: int64(st.Dev), ino: int64(st.Ino), size: st.Size,
		mtime: fi.ModTime().UnixNano()}, true
}
