//go:build !unix

package atomicfile

import "os"

// lockTemp does nothing where flock is not available.
func lockTemp(f *os.File) error { return nil }

// tryLockTemp cannot tell a live writer's file from an abandoned one.
func tryLockTemp(f *os.File) (bool, error) { return false, nil }

// openRename: Windows does not rename a file open without sharing its
// deletion, which os.Open does not share: it is closed first.
const openRename = false
