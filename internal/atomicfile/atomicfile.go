// Package atomicfile writes files and directory trees so that readers see
// either the old content or the new, never a partial write.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// WriteFile writes data to path via a temporary file in the same directory,
// fsync and rename.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return WriteFileThen(path, data, perm, nil)
}

// WriteFileThen is WriteFile, running then (when not nil) once data is
// durable under its temporary name and before it replaces path: a failure
// of then, or before it, leaves path as it was, and only a failed rename
// after it can part the two.
//
// The temporary file is named "."+base+".tmp-"+random (TempPrefix) and
// held under an exclusive flock until it is renamed: a process killed in
// between leaves it behind, and Abandoned tells it from one whose writer
// is still at work (the kernel releases the lock of a dead process).
func WriteFileThen(path string, data []byte, perm os.FileMode, then func() error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	// Closed last: the lock marks the file as in use until the rename.
	defer f.Close()
	if err := lockTemp(f); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if !openRename {
		if err := f.Close(); err != nil {
			return err
		}
	}
	if then != nil {
		if err := then(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if err := SyncDir(dir); err != nil {
		return err
	}
	if openRename {
		return f.Close()
	}
	return nil
}

// TempPrefix is how the temporary files WriteFile writes for a file named
// base begin; a random suffix follows.
func TempPrefix(base string) string { return "." + base + ".tmp-" }

// Temp is a temporary file WriteFile left behind: its path, the name of
// the file it was to become, and its random suffix.
type Temp struct {
	Path, Target, Suffix string
}

// Abandoned lists the temporary files of WriteFile in dir (not in its
// subdirectories) whose writer is gone, each locked (exclusively) for
// the caller, who closes it once done with the file: a writer still at
// work holds its file's lock, and a file found unlocked could not be
// taken over by one. Where files cannot be locked (not a Unix system),
// nothing is listed: a live writer's file would look abandoned.
func Abandoned(dir string) ([]Temp, []*os.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var temps []Temp
	var locks []*os.File
	for _, e := range entries {
		name := e.Name()
		i := strings.LastIndex(name, ".tmp-")
		if !e.Type().IsRegular() || !strings.HasPrefix(name, ".") || i < 2 || i+len(".tmp-") == len(name) {
			continue
		}
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			continue // gone (renamed by its writer) or unreadable
		}
		if held, err := tryLockTemp(f); err != nil || !held {
			f.Close()
			continue
		}
		temps = append(temps, Temp{Path: path, Target: name[1:i], Suffix: name[i+len(".tmp-"):]})
		locks = append(locks, f)
	}
	return temps, locks, nil
}

// ReplaceDir makes dir/sub contain exactly files (slash-separated names
// relative to dir/sub): the new tree is written next to the old one and
// swapped in with renames, so a failure leaves the old tree in place.
func ReplaceDir(dir, sub string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, "."+sub+".tmp-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if strings.Contains(n, "..") || filepath.IsAbs(n) {
			return fmt.Errorf("atomicfile: refusing to write %q outside %s", n, sub)
		}
		p := filepath.Join(tmp, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := CreateSynced(p, files[n]); err != nil {
			return err
		}
	}
	if err := SyncDir(tmp); err != nil {
		return err
	}
	target := filepath.Join(dir, sub)
	old := ""
	if _, err := os.Lstat(target); err == nil {
		old = filepath.Join(dir, fmt.Sprintf(".%s.old-%d", sub, os.Getpid()))
		os.RemoveAll(old)
		if err := os.Rename(target, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, target); err != nil {
		if old != "" {
			os.Rename(old, target)
		}
		return err
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return SyncDir(dir)
}

// CreateSynced creates path, which must not exist, writes data and fsyncs
// it before returning. The caller syncs the directory (SyncDir) when the
// new name must survive a crash too.
func CreateSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// A partial file (a full disk) must not stand in for the data,
		// nor take the name a retry will want.
		os.Remove(path)
	}
	return err
}

// SyncDir fsyncs a directory, making the names created in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
