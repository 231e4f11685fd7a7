//go:build !linux

package builtin

import (
	"errors"
	"os"
)

// redirectsSupported: elsewhere than on Linux polc has no race-free way
// to open a redirection's file for bash (no O_PATH, no /proc/self/fd to
// reopen it through), so a command with one is refused rather than
// opened through links swapped in after the policy judged its path.
func redirectsSupported() error {
	return errors.New("redirections to files are run only on Linux, where polc opens their files for bash without following symlinks")
}

// openTarget is never reached here (redirectsSupported refuses first).
func openTarget(ws, target string, write bool) (*os.File, func(bool), error) {
	return nil, nil, errors.ErrUnsupported
}
