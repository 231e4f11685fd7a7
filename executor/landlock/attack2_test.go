package landlock_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"polc.dev/polc/executor/landlock"
)

// TestAttackRedirectFDMetadataOutsideWriteRoots: the landlock backend's
// private read-only mounts are what stop chmod, utime and extended
// attributes (which Landlock does not check) outside the write roots. But
// polc opens a bash redirection's file itself, in its own mount namespace,
// and passes the descriptor: a file reached through that descriptor (or
// its /proc/self/fd/N magic link) is on polc's read-write mount, not on
// the target's read-only clone. So a read redirection of a file the policy
// lets the command read but not write (src/file: read "**", write
// "out/**") lets the contained command change that file's mode and times.
func TestAttackRedirectFDMetadataOutsideWriteRoots(t *testing.T) {
	r := newRig(t, nil)
	file := filepath.Join(r.ws, "src", "file")
	if err := os.WriteFile(file, []byte("read-only for the command"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(file, old, old)
	// Control: the command's own chmod by the path is refused (EROFS).
	res := result(t, r.bash(t, landlock.Name, "sh -c 'chmod 777 src/file'"))
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o644 {
		t.Fatalf("control: chmod by the path changed the mode (%v): %+v", st.Mode(), res)
	}
	// Through the redirection's descriptor: stdin is src/file, reopened by
	// bash from the descriptor polc opened on its own mount.
	res = result(t, r.bash(t, landlock.Name, "sh -c 'chmod 777 /proc/self/fd/0; touch -m -d @0 /proc/self/fd/0' < src/file"))
	st, _ := os.Stat(file)
	if st.Mode().Perm() != 0o644 || !st.ModTime().Equal(old) {
		t.Fatalf("landlock: a file outside the write roots had its metadata changed through a redirection's descriptor: mode %v, mtime %v (%+v)", st.Mode().Perm(), st.ModTime().UTC(), res)
	}
}
