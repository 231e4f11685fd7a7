//go:build unix

package polccli

import (
	"os"
	"syscall"
)

// lockPublish takes the exclusive flock of path (created if absent),
// waiting for a publish that holds it; unlock releases it.
func lockPublish(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
