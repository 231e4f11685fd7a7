package harness

import (
	"fmt"
	"os"
	"syscall"
)

// fileIdentity is what names the file fi describes beyond its size and
// modification time: its device, inode and change time. A replacement of
// the same size with the mtime kept (npm extracts every file with one
// fixed mtime) is a new inode, or at least a new change time.
func fileIdentity(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d.%d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}
