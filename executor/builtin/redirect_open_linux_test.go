package builtin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenTargetWalk: openTarget walks a redirection's path one
// component at a time and refuses a symlink anywhere on it — also one
// that a ".." after it would leave, which cleaning the path would have
// hidden — keeps ".." within the workspace, tells a missing file from a
// missing directory, creates only a missing last component of a write,
// and starts a relative or in-workspace target at the workspace, whose
// own path may go through links (bash's working directory does too).
func TestOpenTargetWalk(t *testing.T) {
	dir := t.TempDir()
	ws, outside := filepath.Join(dir, "ws"), filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(ws, "out", "sub"), 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(ws, "out", "f"), []byte("f"), 0o644)
	os.WriteFile(filepath.Join(outside, "f"), []byte("o"), 0o644)
	os.Symlink("out", filepath.Join(ws, "link"))
	os.Symlink("f", filepath.Join(ws, "out", "flink"))
	os.Symlink(outside, filepath.Join(outside, "dlink"))
	os.Symlink(ws, filepath.Join(dir, "wslink"))
	var want unix.Stat_t
	unix.Stat(filepath.Join(ws, "out", "f"), &want)

	for _, c := range []struct {
		ws, target string
		write      bool
		err        error // nil: opens out/f
	}{
		{ws, "out/f", false, nil},
		{ws, "./out//f", true, nil},
		{ws, "out/sub/../f", false, nil},
		{ws, ws + "/out/f", true, nil},
		{ws, "/.." + ws + "/out/f", false, nil},
		{filepath.Join(dir, "wslink"), "out/f", true, nil},
		{ws, "link/f", false, errSymlink},
		{ws, "link/../out/f", true, errSymlink},
		{ws, "out/flink", true, errSymlink},
		{ws, filepath.Join(dir, "wslink", "out", "f"), false, errSymlink},
		{ws, outside + "/dlink/f", true, errSymlink},
		{ws, "../outside/f", false, errEscape},
		{ws, "out/../../outside/f", true, errEscape},
		{ws, "out/missing", false, os.ErrNotExist},
		{ws, "nodir/x", false, errAbsentDir},
		{ws, "nodir/x", true, errAbsentDir},
		{ws, "out/f/x", true, unix.ENOTDIR},
		{ws, "out/f/", false, unix.ENOTDIR},
	} {
		f, undo, err := openTarget(c.ws, c.target, c.write)
		if undo != nil {
			t.Errorf("%s: created a file", c.target)
			undo(true)
		}
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: %v, want %v", c.target, err, c.err)
			}
			if f != nil {
				f.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.target, err)
			continue
		}
		var got unix.Stat_t
		unix.Fstat(int(f.Fd()), &got)
		if got.Ino != want.Ino || got.Dev != want.Dev {
			t.Errorf("%s: opened another file", c.target)
		}
		if fl, _ := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); fl&unix.O_PATH == 0 {
			t.Errorf("%s: not O_PATH (flags %#x)", c.target, fl)
		}
		f.Close()
	}

	// A missing last component of a write is created, empty, as O_PATH;
	// undo(true) removes it, undo(false) keeps it.
	for _, remove := range []bool{true, false} {
		f, undo, err := openTarget(ws, "out/sub/new", true)
		if err != nil || undo == nil {
			t.Fatalf("create: %v %v", err, undo != nil)
		}
		if fl, _ := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); fl&unix.O_PATH == 0 {
			t.Errorf("created: not O_PATH (flags %#x)", fl)
		}
		f.Close()
		undo(remove)
		fi, err := os.Stat(filepath.Join(ws, "out", "sub", "new"))
		if remove != (err != nil) || err == nil && fi.Size() != 0 {
			t.Errorf("undo(%v): %v %v", remove, fi, err)
		}
	}
	// A directory is opened as itself (bash's reopen fails EISDIR).
	f, _, err := openTarget(ws, "out/", true)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); !fi.IsDir() {
		t.Errorf("out/: %v", fi.Mode())
	}
	f.Close()
}
