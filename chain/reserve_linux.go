//go:build linux && (amd64 || arm64)

package chain

import (
	"os"
	"syscall"
)

// reserveSupported reports whether the file store keeps a reserve (see
// FileStore): it needs fdatasync and sync_file_range (called directly on
// the 64-bit architectures whose system call takes the offsets as single
// arguments, so that certverify needs nothing outside the standard
// library).
const reserveSupported = true

// datasync makes f's data durable together with the metadata needed to
// read it back (its size), but not its timestamps: over the reserve no
// metadata changes, so no journal commit is needed.
func datasync(f *os.File) error {
	return control(f, "fdatasync", func(fd int) error { return syscall.Fdatasync(fd) })
}

// sync_file_range flags (linux/fs.h).
const (
	syncFileRangeWaitBefore = 1
	syncFileRangeWrite      = 2
	syncFileRangeWaitAfter  = 4
)

// writeBack writes f's dirty pages in [off, off+n) to the device and waits
// for them, without a cache flush: it keeps the zeros of the reserve from
// being written by the next group's fdatasync.
func writeBack(f *os.File, off, n int64) error {
	return control(f, "sync_file_range", func(fd int) error {
		_, _, errno := syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, uintptr(fd), uintptr(off), uintptr(n),
			syncFileRangeWaitBefore|syncFileRangeWrite|syncFileRangeWaitAfter, 0, 0)
		if errno != 0 {
			return errno
		}
		return nil
	})
}

// control runs call on f's descriptor (kept open for the call), retrying
// on EINTR.
func control(f *os.File, op string, call func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if cerr = call(int(fd)); cerr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if cerr != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: cerr}
	}
	return nil
}
