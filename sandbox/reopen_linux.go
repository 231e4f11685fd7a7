//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// A descriptor the caller passes (stdin, stdout, stderr, ExtraFiles) was
// opened in the caller's mount namespace, on a writable mount: through it,
// or through its /proc/self/fd/N magic link (which resolves to the very
// same mount, not to a path), the target could chmod, utime or set extended
// attributes on a file outside the write roots, which Landlock does not
// check and the read-only mounts are there to refuse. So the exec launcher,
// once its mounts are read-only and before Landlock restricts it, reopens
// each such descriptor by its path in its own namespace and puts the new
// one in its place (reopenPassed): the target then holds the file on the
// read-only mount outside the write roots, on the writable clone inside
// them.
//
// What is reopened: regular files and directories (O_PATH ones too, whose
// magic link chmod follows as well) and the harmless memory devices
// (/dev/null, zero, full, random, urandom: a target that is host uid 0 owns
// them). Pipes, sockets, terminals and other devices are left as they are:
// reopening a device may have effects of its own (a new pseudo-terminal
// from /dev/ptmx) and a pipe or socket has no path to reopen.

// reopenPassed reopens every inherited descriptor below specFD that refers
// to a reopenable file (see above), in this mount namespace, with the
// original's access mode and status flags (never O_CREAT or O_TRUNC),
// without following a symbolic link, and at the original's offset; the
// reopened file must be the original one (same device and inode). Descriptors
// that shared one open file description (2>&1) share the new one. It fails
// when any cannot be reopened: a file deleted since it was opened, a path
// that now names another file or goes through a link, and a file open for
// writing outside the write roots (EROFS).
func reopenPassed(specFD int) error {
	type passed struct {
		fd     int
		st     unix.Stat_t
		leader int // index of the first descriptor sharing its description
	}
	var ps []passed
	for fd := 0; fd < specFD; fd++ {
		fdFlags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || fdFlags&unix.FD_CLOEXEC != 0 {
			continue // closed, or this launcher's own (Go's fork left it closed)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("descriptor %d: %w", fd, err)
		}
		if !reopenable(&st) {
			continue
		}
		p := passed{fd: fd, st: st, leader: len(ps)}
		for i, q := range ps {
			if q.leader == i && sameDescription(q.fd, fd) {
				p.leader = i
				break
			}
		}
		ps = append(ps, p)
	}
	// Every comparison above is made on the originals, before any is
	// replaced.
	for i, p := range ps {
		if p.leader != i {
			continue
		}
		nfd, err := reopenOne(p.fd, &p.st)
		if err != nil {
			return err
		}
		for _, q := range ps[i:] {
			if q.leader == i {
				if err := unix.Dup3(nfd, q.fd, 0); err != nil {
					unix.Close(nfd)
					return fmt.Errorf("descriptor %d: dup3: %w", q.fd, err)
				}
			}
		}
		unix.Close(nfd)
	}
	return nil
}

// reopenable says whether a passed file of this type is reopened.
func reopenable(st *unix.Stat_t) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
		return true
	case unix.S_IFCHR:
		// The memory devices: null, zero, full, random, urandom.
		switch unix.Major(uint64(st.Rdev)) {
		case 1:
			switch unix.Minor(uint64(st.Rdev)) {
			case 3, 5, 7, 8, 9:
				return true
			}
		}
	}
	return false
}

// sameDescription says whether descriptors a and b of this process share
// one open file description (kcmp KCMP_FILE). Without kcmp (a kernel
// built without it) they are taken as separate: each gets its own
// description, which only loses a shared offset.
func sameDescription(a, b int) bool {
	const kcmpFile = 0
	pid := uintptr(unix.Getpid())
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, pid, pid, kcmpFile, uintptr(a), uintptr(b), 0)
	return errno == 0 && r == 0
}

// reopenedFlags are the status flags a reopened descriptor keeps.
const reopenedFlags = unix.O_ACCMODE | unix.O_APPEND | unix.O_NONBLOCK | unix.O_DSYNC | unix.O_SYNC |
	unix.O_DIRECT | unix.O_NOATIME | unix.O_LARGEFILE

// reopenOne opens the file descriptor fd refers to again by its path and
// returns the new, close-on-exec descriptor.
func reopenOne(fd int, st *unix.Stat_t) (int, error) {
	link := fmt.Sprintf("/proc/self/fd/%d", fd)
	buf := make([]byte, unix.PathMax+1)
	n, err := unix.Readlink(link, buf)
	if err != nil {
		return -1, fmt.Errorf("passed descriptor %d: %w", fd, err)
	}
	if n > unix.PathMax {
		return -1, fmt.Errorf("passed descriptor %d: its path is too long to reopen", fd)
	}
	path := string(buf[:n])
	what := fmt.Sprintf("passed descriptor %d (%s)", fd, path)
	if !strings.HasPrefix(path, "/") {
		return -1, fmt.Errorf("%s: no path to reopen it by in the target's mount namespace", what)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: F_GETFL: %w", what, err)
	}
	how := unix.OpenHow{Resolve: unix.RESOLVE_NO_SYMLINKS}
	isPath := fl&unix.O_PATH != 0
	if isPath {
		how.Flags = unix.O_PATH | unix.O_CLOEXEC
	} else {
		how.Flags = uint64(fl&reopenedFlags) | unix.O_CLOEXEC | unix.O_NOCTTY
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			how.Flags |= unix.O_DIRECTORY
		}
	}
	nfd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	switch {
	case errors.Is(err, unix.EROFS):
		return -1, fmt.Errorf("%s: open for writing, but outside the write roots (a passed file outside them is read-only)", what)
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("%s: its path goes through a symbolic link", what)
	case errors.Is(err, unix.ENOENT) && strings.HasSuffix(path, " (deleted)"):
		return -1, fmt.Errorf("%s: deleted: it has no path to reopen it by", what)
	case err != nil:
		return -1, fmt.Errorf("%s: reopening: %w", what, err)
	}
	var nst unix.Stat_t
	if err := unix.Fstat(nfd, &nst); err != nil {
		unix.Close(nfd)
		return -1, fmt.Errorf("%s: %w", what, err)
	}
	if nst.Dev != st.Dev || nst.Ino != st.Ino || nst.Rdev != st.Rdev || nst.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		unix.Close(nfd)
		return -1, fmt.Errorf("%s: its path names another file now", what)
	}
	if !isPath && st.Mode&unix.S_IFMT != unix.S_IFCHR {
		off, err := unix.Seek(fd, 0, unix.SEEK_CUR)
		if err == nil && off != 0 {
			_, err = unix.Seek(nfd, off, unix.SEEK_SET)
		}
		if err != nil {
			unix.Close(nfd)
			return -1, fmt.Errorf("%s: keeping its offset: %w", what, err)
		}
	}
	return nfd, nil
}
