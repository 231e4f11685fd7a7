//go:build unix && !aix

package polccli

import (
	"os"
	"syscall"
)

// fileKey identifies a file's content without reading it: its device and
// inode, size, modification time and status change time (ctime). A file
// renamed into place is a new inode. A file rewritten in place keeps its
// inode, and may keep its size and its modification time (cp -p,
// rsync --inplace -t, a fixed SOURCE_DATE_EPOCH), which any process can
// set; its ctime it cannot: the kernel sets it to the current time on
// every write, truncation and utimes, and nothing but a change of the
// system clock sets it back. Two rewrites within one tick of the
// filesystem's clock can still share a ctime: etag remembers no tag for a
// file changed lately (see racyWindow).
type fileKey struct {
	dev, ino, size int64
	mtime, ctime   int64 // nanoseconds
}

// identity is fi's fileKey.
func identity(fi os.FileInfo) (fileKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{dev: int64(st.Dev), ino: int64(st.Ino), size: st.Size,
		mtime: fi.ModTime().UnixNano(), ctime: ctimeOf(st)}, true
}

// changedAt is the file's status change time (ctime) in nanoseconds.
func (k fileKey) changedAt() int64 { return k.ctime }
