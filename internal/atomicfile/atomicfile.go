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
func WriteFileThen(path string, data []byte, perm os.FileMode, then func() error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp, perm); err != nil {
		return err
	}
	if then != nil {
		if err := then(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(dir)
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
