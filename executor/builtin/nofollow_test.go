package builtin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestNoFollowImplementations runs the kernel-checked functions and the
// portable fallback over the same tree: both refuse a symlink in any
// directory of the path or at a read's last component, both write
// atomically and create missing directories, neither writes through a
// link.
func TestNoFollowImplementations(t *testing.T) {
	impls := map[string]struct {
		open  func(string) (*os.File, error)
		write func(string, []byte, os.FileMode) error
	}{"openat2": {openNoFollow, writeNoFollow}, "portable": {openChecked, writeChecked}}
	for name, impl := range impls {
		t.Run(name, func(t *testing.T) {
			dir, target := t.TempDir(), t.TempDir()
			os.WriteFile(filepath.Join(target, "f"), []byte("target"), 0o644)
			os.WriteFile(filepath.Join(dir, "f"), []byte("plain"), 0o644)
			os.Symlink(target, filepath.Join(dir, "dlink"))
			os.Symlink(filepath.Join(target, "f"), filepath.Join(dir, "flink"))
			for _, p := range []string{"dlink/f", "flink"} {
				if f, err := impl.open(filepath.Join(dir, p)); !errors.Is(err, errSymlink) {
					t.Errorf("open %s: %v", p, err)
					if f != nil {
						f.Close()
					}
				}
			}
			for _, p := range []string{"dlink/new", "dlink/sub/new"} {
				if err := impl.write(filepath.Join(dir, p), []byte("x"), 0o644); !errors.Is(err, errSymlink) {
					t.Errorf("write %s: %v", p, err)
				}
			}
			if entries, _ := os.ReadDir(target); len(entries) != 1 {
				t.Fatalf("written through a link: %v", entries)
			}
			f, err := impl.open(filepath.Join(dir, "f"))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := impl.write(filepath.Join(dir, "a", "b", "c"), []byte("deep"), 0o600); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(dir, "a", "b", "c"))
			if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 4 {
				t.Fatalf("written: %v %v", fi, err)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(dir, "a", "b", ".c.tmp-*")); len(leftovers) != 0 {
				t.Fatalf("temporary files left: %v", leftovers)
			}
		})
	}
}
