//go:build linux

package sandbox_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/sandbox"
)

// runWithStdin is run with stdin set to in.
func runWithStdin(t *testing.T, spec sandbox.Spec, in *os.File, argv ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	cmd, err := sandbox.Command(ctx, spec, argv)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	cmd.Stdin = in
	r := wait(cmd)
	if r.err != nil {
		t.Fatalf("run: %v", r.err)
	}
	return r
}

// TestPassedFilesStayReadOnlyOutsideWriteRoots: a passed descriptor was
// opened on the caller's writable mount; the launcher reopens it in the
// target's namespace, so that neither the descriptor nor its
// /proc/self/fd/N link lets the target change the mode or times of a file
// outside the write roots (stdin from a read-only grant, a file and a
// directory outside every grant, /dev/null), while the data still flows:
// the passed file reads from its offset, and a file in the write root is
// written (through two descriptors sharing one description, in order) and
// its mode may change. In every network mode.
func TestPassedFilesStayReadOnlyOutsideWriteRoots(t *testing.T) {
	f := newFixture(t)
	in := filepath.Join(f.outside, "in")
	mustWrite(t, in, "skipped:passed-in\n")
	stdinPath := filepath.Join(f.ro, "sub", "file")
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, p := range []string{in, stdinPath, f.outside} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range allNetworks {
		t.Run(n.String(), func(t *testing.T) {
			rf, err := os.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer rf.Close()
			if _, err := rf.Seek(int64(len("skipped:")), io.SeekStart); err != nil {
				t.Fatal(err)
			}
			dir, err := os.Open(f.outside)
			if err != nil {
				t.Fatal(err)
			}
			defer dir.Close()
			null, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer null.Close()
			out := filepath.Join(f.ws, "out-"+n.String())
			wf, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			defer wf.Close()
			stdin, err := os.Open(stdinPath)
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			spec := withProxy(t, f.spec(n))
			// 3 the file, 4 the directory, 5 /dev/null, 6 and 7 one
			// description in the write root.
			spec.ExtraFiles = []*os.File{rf, dir, null, wf, wf}
			// chmod to /dev/null's own mode: a probe that changes nothing
			// even where it succeeds.
			r := runWithStdin(t, spec, stdin, sh(`
for fd in 0 3 4; do
	chmod 777 /proc/self/fd/$fd 2>/dev/null && echo "chmod $fd"
	touch -m -d @0 /proc/self/fd/$fd 2>/dev/null && echo "touch $fd"
done
chmod 666 /proc/self/fd/5 2>/dev/null && echo "chmod 5"
read -r line <&3 && echo "3: $line" >&6
echo "0: $(cat)" >&7
chmod 600 /proc/self/fd/6 || echo "chmod 6 refused"
`)...)
			ok(t, "target", r)
			if r.stdout != "" {
				t.Errorf("metadata changed through passed descriptors outside the write roots: %q\n%v", r.stdout, r)
			}
			for _, p := range []string{in, stdinPath, f.outside} {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if !st.ModTime().Equal(old) || st.Mode().Perm() == 0o777 {
					t.Errorf("%s: mode %v, mtime %v", p, st.Mode(), st.ModTime().UTC())
				}
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != "3: passed-in\n0: ro-file\n" {
				t.Errorf("written through descriptors 6 and 7: %q\n%v", got, r)
			}
			if st, _ := os.Stat(out); st.Mode().Perm() != 0o600 {
				t.Errorf("chmod of a passed file in the write root: mode %v", st.Mode())
			}
		})
	}
}

// TestPassedFilesRefused: a descriptor the launcher cannot reopen as it
// was refuses the spawn (ExitRefused) instead of reaching the target on
// the caller's writable mount: a file open for writing outside the write
// roots, and a file deleted since it was opened.
func TestPassedFilesRefused(t *testing.T) {
	f := newFixture(t)
	gone := filepath.Join(f.outside, "gone")
	mustWrite(t, gone, "x")
	deleted, err := os.Open(gone)
	if err != nil {
		t.Fatal(err)
	}
	defer deleted.Close()
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	wf, err := os.OpenFile(filepath.Join(f.outside, "secret"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	for _, c := range []struct {
		name string
		file *os.File
		want string
	}{
		{"written outside the write roots", wf, "outside the write roots"},
		{"deleted", deleted, "deleted"},
	} {
		for _, n := range allNetworks {
			spec := withProxy(t, f.spec(n))
			spec.ExtraFiles = []*os.File{c.file}
			r := run(t, spec, sh("echo ran; echo x >&3")...)
			if r.code != sandbox.ExitRefused || r.stdout != "" || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s, %s: %v", c.name, n, r)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.outside, "secret")); string(b) != "outside-secret" {
		t.Errorf("outside/secret: %q", b)
	}
}
