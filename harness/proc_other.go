//go:build !unix

package harness

import (
	"errors"
	"os"
	"syscall"
)

// spawnSupported is false: Spawn refuses (see proc_unix.go for what it
// needs). Planning and probing work everywhere.
const spawnSupported = false

var errNoSpawn = errors.New("harness: not supported on this platform")

func newGroupAttr() *syscall.SysProcAttr            { return nil }
func killGroup(int)                                 {}
func lockDir(*os.File, bool) (busy bool, err error) { return false, errNoSpawn }
func unlockDir(*os.File)                            {}

// setGroup: no process groups here (Spawn is unsupported).
func setGroup(*syscall.SysProcAttr) {}
