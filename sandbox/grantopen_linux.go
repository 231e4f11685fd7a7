//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// errGrantLink: a Spec path is, or goes through, a symbolic link when the
// launcher opens it. The caller checked the path (the landlock backend
// refuses links in what it grants), but a contained process with a write
// root above or at a granted name can swap it for a link between that check
// and the spawn; following the link would grant its target.
var errGrantLink = errors.New("is or goes through a symbolic link (a Spec path must be free of links when the process starts)")

// openGrant opens path O_PATH for a Landlock rule or a mount. A Spec path
// (follow false) is opened without following any symbolic link
// (openat2 RESOLVE_NO_SYMLINKS; without openat2, one component at a time
// with O_NOFOLLOW). System paths (follow true) keep following links: /bin
// and /lib64 are links on merged-/usr systems, and the target cannot write
// them.
func openGrant(path string, follow bool) (int, error) {
	if follow {
		return unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ELOOP):
		return -1, errGrantLink
	case !errors.Is(err, unix.ENOSYS):
		return -1, err
	}
	return openNoFollow(path)
}

// openNoFollow walks path from "/" one component at a time with
// O_PATH|O_NOFOLLOW, refusing a component that is a symbolic link.
func openNoFollow(path string) (int, error) {
	if !strings.HasPrefix(path, "/") {
		return -1, fmt.Errorf("%q is not absolute", path)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" {
			continue
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(next)
			return -1, errGrantLink
		}
		fd = next
	}
	return fd, nil
}
