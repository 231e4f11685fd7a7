//go:build linux

package builtin

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noSymlinks makes the kernel refuse a symlink (and /proc magic links) in
// any component of a path: the file reached is the path the policy
// decided on, with no window between a check and the open.
const noSymlinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openNoFollow opens path (absolute and clean) for reading. Only a regular
// file is opened: O_NONBLOCK keeps the open of a FIFO (or a device that
// waits) from blocking the worker beyond any deadline, and fstat refuses
// what is not a regular file.
func openNoFollow(path string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK, Resolve: noSymlinks})
	if errors.Is(err, unix.ENOSYS) {
		return openChecked(path) // a kernel before 5.6
	}
	if err != nil {
		return nil, pathError("open", path, err)
	}
	return regularOnly(os.NewFile(uintptr(fd), path))
}

// writeNoFollow replaces path (absolute and clean) with data atomically
// (a temporary file in the same directory, fsync, rename, fsync of the
// directory), creating missing directories one component at a time, none
// of them reached through a symlink. A symlink at path itself is replaced,
// not followed.
func writeNoFollow(path string, data []byte, perm os.FileMode) error {
	dir, name := filepath.Split(path)
	dfd, err := openDirCreating(dir)
	if errors.Is(err, unix.ENOSYS) {
		return writeChecked(path, data, perm)
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	// Replacing a file keeps its permission bits: a 0600 file of secrets
	// must not become readable by others because it was edited.
	var st unix.Stat_t
	if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		perm = os.FileMode(st.Mode & 0o777)
	}
	tmp := "." + name + ".tmp-" + strconv.FormatUint(tmpSeq.Add(1), 36) + "-" + strconv.Itoa(os.Getpid())
	tfd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return pathError("create", filepath.Join(dir, tmp), err)
	}
	f := os.NewFile(uintptr(tfd), filepath.Join(dir, tmp))
	renamed := false
	defer func() {
		if !renamed {
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm.Perm()) // the umask narrowed the create
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return pathError("rename", path, err)
	}
	renamed = true
	return unix.Fsync(dfd)
}

var tmpSeq atomic.Uint64

// openDirCreating opens dir (absolute) as a directory, creating missing
// components, refusing a symlink anywhere on the way.
func openDirCreating(dir string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: noSymlinks})
	if err != nil {
		return -1, err
	}
	walked := "/"
	for _, c := range strings.Split(strings.Trim(dir, "/"), "/") {
		if c == "" {
			continue
		}
		walked = filepath.Join(walked, c)
		how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: noSymlinks}
		next, err := unix.Openat2(fd, c, how)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat2(fd, c, how)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, pathError("open", walked, err)
		}
		fd = next
	}
	return fd, nil
}

// pathError names a refused symlink plainly (RESOLVE_NO_SYMLINKS answers
// ELOOP); other errors as os does.
func pathError(op, path string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		return &os.PathError{Op: op, Path: path, Err: errSymlink}
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}
