//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
)

// LauncherFile is the file name of the dedicated launcher program
// (cmd/polc-sandbox). When a file of that name lies next to the running
// executable, Command starts it instead of re-executing the running
// binary; see the package documentation ("Which launcher").
const LauncherFile = "polc-sandbox"

// launcherChoice is the program Command starts as the launcher.
type launcherChoice struct {
	path string // absolute; selfExe for the running binary
	err  error  // a dedicated launcher that is present but not trusted
}

var (
	launcherMu     sync.Mutex
	launcherChosen *launcherChoice
)

// currentLauncher returns the launcher, looked for once.
func currentLauncher() launcherChoice {
	launcherMu.Lock()
	defer launcherMu.Unlock()
	if launcherChosen == nil {
		c := findLauncher()
		launcherChosen = &c
	}
	return *launcherChosen
}

// findLauncher looks for LauncherFile next to the running executable. An
// absent file means the running binary; a present one that fails
// checkLauncher is an error, not a silent fallback: it is a broken or
// tampered installation.
func findLauncher() launcherChoice {
	exe, err := os.Executable()
	if err != nil {
		return launcherChoice{path: selfExe}
	}
	return launcherIn(filepath.Dir(exe))
}

// launcherIn is the launcher Command uses when the running executable lies
// in dir.
func launcherIn(dir string) launcherChoice {
	p := filepath.Join(dir, LauncherFile)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return launcherChoice{path: selfExe}
	}
	return launcherChoice{path: p, err: checkLauncher(p)}
}

// UseLauncher makes Command and Probe start the program at path as the
// launcher from now on, after the checks a launcher found next to the
// executable passes; an empty path selects re-executing the running binary
// (/proc/self/exe). It is meant for tests and benchmarks, and for programs
// that install the launcher elsewhere. Probe probes again with the new
// launcher.
func UseLauncher(path string) error {
	c := launcherChoice{path: selfExe}
	if path != "" {
		if err := checkLauncher(path); err != nil {
			return fmt.Errorf("sandbox: launcher %s: %w", path, err)
		}
		c.path = path
	}
	launcherMu.Lock()
	launcherChosen = &c
	launcherMu.Unlock()
	return nil
}

// checkLauncher accepts only a launcher that no one but root and the
// current user can have placed or changed: an absolute, clean path to a
// regular file (not a symlink) with an execute bit, owned by root or the
// effective user and writable by neither group nor others, in a directory
// owned by root or the effective user that others cannot write to (unless
// it is sticky, where they cannot replace another's file).
func checkLauncher(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return errors.New("not an absolute, clean path")
	}
	euid := uint32(os.Geteuid())
	owned := func(fi fs.FileInfo) bool {
		st, ok := fi.Sys().(*syscall.Stat_t)
		return ok && (st.Uid == 0 || st.Uid == euid)
	}
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return errors.New("is a symbolic link")
	case !fi.Mode().IsRegular():
		return errors.New("is not a regular file")
	case !owned(fi):
		return errors.New("is owned by neither root nor the current user")
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("is writable by group or others (mode %v)", fi.Mode().Perm())
	case fi.Mode().Perm()&0o111 == 0:
		return errors.New("is not executable")
	}
	di, err := os.Stat(filepath.Dir(p))
	switch {
	case err != nil:
		return err
	case !owned(di):
		return errors.New("its directory is owned by neither root nor the current user")
	case di.Mode().Perm()&0o022 != 0 && di.Mode()&fs.ModeSticky == 0:
		return fmt.Errorf("its directory is writable by group or others (mode %v)", di.Mode().Perm())
	}
	return nil
}

// LauncherMain is the main function of the dedicated launcher program
// (cmd/polc-sandbox): it acts as the launcher Command started and never
// returns. Run any other way, it says so and exits with status 2.
func LauncherMain() {
	role, ok := os.LookupEnv(launcherEnv)
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: the sandbox launcher of polc; it runs only when polc starts it (%s is not set)\n", LauncherFile, launcherEnv)
		os.Exit(2)
	}
	runtime.LockOSThread()
	os.Exit(launch(role))
}
