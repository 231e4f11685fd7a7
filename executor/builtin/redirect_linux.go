//go:build linux

package builtin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// redirectsSupported: bash reopens polc's descriptors through
// /proc/self/fd; without procfs mounted it could not.
func redirectsSupported() error {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		return fmt.Errorf("bash reopens the files polc opens for redirections through /proc/self/fd: %w", err)
	}
	return nil
}

// openTarget opens target, a redirection's file as bash names it, as
// polc passes it to bash: walked one component at a time from the
// workspace ws (a relative target, or an absolute one in it) or the root,
// each component opened with O_PATH|O_NOFOLLOW and refused if it is a
// symlink (errSymlink) — so no link, one swapped in during the walk
// included, is ever followed, on any kernel. ".." goes back to the
// directory the walk came from (it was no link, so that is where the
// kernel's ".." leads), and may not leave the workspace (errEscape).
// Only a missing last component may be created, when write is set: a new
// empty file (O_EXCL, mode 0666 less the umask, never truncating one
// that exists); a missing directory is errAbsentDir, a missing file
// os.ErrNotExist. The file is O_PATH — no reading or writing through it,
// none of bash's uses of a descriptor it is given — and bash opens it
// again through /proc/self/fd with its own flags. For a file it
// created, undo is non-nil: undo(true) removes the file if it is still
// there, undo(false) keeps it; either must be called once.
func openTarget(ws, target string, write bool) (f *os.File, undo func(remove bool), err error) {
	inWS, rest := splitTarget(ws, target)
	base := "/"
	if inWS {
		base = ws // where bash starts: the links in its own path are followed, as cmd.Dir's
	}
	root, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: base, Err: err}
	}
	stack := []int{root} // the directories walked; ".." pops one
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()
	segs := strings.Split(rest, "/")
	names := []string{base} // the path walked, for errors
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case "", ".":
			continue
		case "..":
			if len(stack) == 1 {
				if inWS {
					return nil, nil, &os.PathError{Op: "open", Path: target, Err: errEscape}
				}
				continue // "/.." is "/"
			}
			unix.Close(stack[len(stack)-1])
			stack, names = stack[:len(stack)-1], names[:len(names)-1]
			continue
		}
		names = append(names, seg)
		walked := filepath.Join(names...)
		dir := stack[len(stack)-1]
		fd, created, err := openComponent(dir, seg, last && write)
		if errors.Is(err, unix.ENOENT) && !last {
			err = errAbsentDir
		}
		if err != nil {
			return nil, nil, &os.PathError{Op: "open", Path: walked, Err: err}
		}
		stack = append(stack, fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, nil, &os.PathError{Op: "stat", Path: walked, Err: err}
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return nil, nil, &os.PathError{Op: "open", Path: walked, Err: errSymlink}
		case !last && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return nil, nil, &os.PathError{Op: "open", Path: walked, Err: unix.ENOTDIR}
		}
		if created {
			// Only the last component is created: its directory is
			// kept open to remove it by, if the command is refused.
			dfd, err := unix.Dup(dir)
			if err != nil {
				unix.Unlinkat(dir, seg, 0)
				return nil, nil, err
			}
			undo = func(remove bool) {
				var now unix.Stat_t
				if remove && unix.Fstatat(dfd, seg, &now, unix.AT_SYMLINK_NOFOLLOW) == nil && now.Dev == st.Dev && now.Ino == st.Ino {
					unix.Unlinkat(dfd, seg, 0)
				}
				unix.Close(dfd)
			}
		}
	}
	top := stack[len(stack)-1]
	stack = stack[:len(stack)-1] // kept: the caller's
	return os.NewFile(uintptr(top), target), undo, nil
}

// openComponent opens the entry name of the directory dir without
// following it if it is a link (O_PATH|O_NOFOLLOW gives the link itself,
// which the caller refuses), creating an empty file if none is there and
// create is set.
func openComponent(dir int, name string, create bool) (fd int, created bool, err error) {
	for range 2 {
		fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if !errors.Is(err, unix.ENOENT) || !create {
			return fd, false, err
		}
		fd, err = unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
		if err == nil {
			// Passed on as O_PATH too (pathOf): bash could write through
			// a writable descriptor directly, and it takes one for
			// BASH_XTRACEFD — then closes it when the variable is unset,
			// freeing the number for another file the command opens,
			// which the redirection's /proc/self/fd/K would then reopen.
			pfd, perr := pathOf(fd)
			unix.Close(fd)
			if perr != nil {
				unix.Unlinkat(dir, name, 0)
			}
			return pfd, perr == nil, perr
		}
		if !errors.Is(err, unix.EEXIST) {
			return fd, false, err
		}
		// Made between the two opens: open what is there now.
	}
	return -1, false, unix.EEXIST
}

// pathOf opens the file fd refers to again as O_PATH, through polc's own
// /proc/self/fd (no path: the very file).
func pathOf(fd int) (int, error) {
	return unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_PATH|unix.O_CLOEXEC, 0)
}
