//go:build !unix

package chain

import (
	"errors"
	"os"
)

// lockFile creates path exclusively. Without flock a crashed writer leaves
// the file behind; remove it by hand after checking no writer runs.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil, ErrLocked
	}
	return f, err
}

func unlockFile(f *os.File) error { return os.Remove(f.Name()) }

// lockIndex does nothing here: without flock, one store at a time may have
// a directory open.
func lockIndex(f *os.File, wait bool) (bool, error) { return true, nil }

func unlockIndex(f *os.File) error { return nil }
