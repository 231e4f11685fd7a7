//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Landlock does not restrict chmod, chown, utime or extended attributes, and
// a target running as uid 0 (of polc's user) owns every file polc's user
// owns: on the host as root, every system file. So the launcher gives every
// target a private mount namespace in which the whole tree is read-only
// except the write roots; metadata changes outside them fail with EROFS.
//
// Steps, on the launcher's locked thread (unshare(CLONE_NEWNS) moves only
// this thread, which execs the target):
//
//  1. unshare the mount namespace and make every mount private, recursively,
//     so that nothing done here propagates to the caller's namespace (a
//     namespace made by root without a new user namespace would otherwise
//     keep the host's shared peer groups);
//  2. clone each write root's mount tree (open_tree OPEN_TREE_CLONE |
//     AT_RECURSIVE) while it is still writable;
//  3. make every mount read-only (mount_setattr "/" AT_RECURSIVE
//     MOUNT_ATTR_RDONLY);
//  4. mount each clone back on its write root (move_mount), a file on a file.
//
// Device nodes stay usable on a read-only mount (/dev/null), and connecting
// to a unix socket is not a write to its mount, so the NetworkProxy
// forwarder, which is not in this namespace anyway, is unaffected.

// writeRootsToMount returns the write roots that need a writable mount: each
// one not beneath another (that one's clone holds it) and not at or beneath a
// denied path (its grant is dropped).
func writeRootsToMount(write []string, denies []deny) []string {
	roots := slices.Clone(write)
	slices.Sort(roots)
	roots = slices.Compact(roots)
	var out []string
	for _, r := range roots {
		if len(out) > 0 && within(out[len(out)-1], r) {
			continue
		}
		if slices.ContainsFunc(denies, func(d deny) bool { return d.path == r || within(d.path, r) }) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// privateMounts runs the steps above for w. Write roots are opened with
// RESOLVE_NO_SYMLINKS: a root that is, or lies beneath, a symbolic link is
// refused, so a link swapped in since the caller checked the path cannot
// make a writable mount of its target.
func privateMounts(w *wireSpec) error {
	denies, err := resolveDenies(w.Deny)
	if err != nil {
		return err
	}
	roots := writeRootsToMount(w.Write, denies)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	wd, wdErr := unix.Getwd()
	type clone struct {
		path         string
		target, tree int
	}
	var clones []clone
	defer func() {
		for _, c := range clones {
			unix.Close(c.target)
			unix.Close(c.tree)
		}
	}()
	for _, root := range roots {
		target, err := openGrant(root, false)
		if err != nil {
			return fmt.Errorf("write root %q: %w", root, err)
		}
		tree, err := unix.OpenTree(target, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		if err != nil {
			unix.Close(target)
			return fmt.Errorf("write root %q: cloning its mount: %w", root, err)
		}
		clones = append(clones, clone{root, target, tree})
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("making mounts read-only: %w", err)
	}
	for _, c := range clones {
		if err := unix.MoveMount(c.tree, "", c.target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("write root %q: mounting its clone: %w", c.path, err)
		}
	}
	// The working directory still names the read-only mount beneath a
	// clone; enter it again by name (w.Dir, if set, is entered later).
	if wdErr == nil && w.Dir == "" {
		if err := unix.Chdir(wd); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("re-entering the working directory: %w", err)
		}
	}
	return nil
}
