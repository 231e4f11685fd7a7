//go:build unix

package atomicfile

import (
	"errors"
	"os"
	"syscall"
)

// lockTemp takes the exclusive flock that marks a temporary file as in
// use (a new file: nobody else holds it).
func lockTemp(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

// tryLockTemp takes f's exclusive flock if nobody holds it.
func tryLockTemp(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case err != syscall.EINTR:
			return false, err
		}
	}
}

// openRename: a file open (and locked) here can be renamed.
const openRename = true
