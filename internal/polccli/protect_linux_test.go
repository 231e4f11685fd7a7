package polccli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"polc.dev/polc/sandbox"
)

// TestLauncherFileName: the launcher protectedPaths protects is the one
// the sandbox looks for next to the executable.
func TestLauncherFileName(t *testing.T) {
	if launcherFile != sandbox.LauncherFile {
		t.Fatalf("launcherFile %q, sandbox.LauncherFile %q", launcherFile, sandbox.LauncherFile)
	}
}

// bindAliasInner marks the test process TestProtectedThroughBindMount
// re-executes in a private mount namespace.
const bindAliasInner = "POLC_TEST_BIND_ALIAS"

// TestProtectedThroughBindMount: a bind mount shows the session's
// directory again at DIR/alias, a name no link leads to, which the policy
// grants (it grants the whole temporary root). polc mcp's read_file of the
// key through the alias used to return it, and a landlock bash read it and
// wrote into the evidence directory through the alias. Now every name a
// mount gives the session's files is protected: the guard denies
// (guard:protected_path) and the kernel refuses the contained process,
// nothing is planted and the key's bytes are in no result. The mount is
// made in a private mount namespace (unshare -m), so it needs root.
func TestProtectedThroughBindMount(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a bind mount needs root")
	}
	if os.Getenv(bindAliasInner) == "" {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("no unshare(1)")
		}
		cmd := exec.Command(unshare, "-m", "--propagation", "private", os.Args[0], "-test.run", "^TestProtectedThroughBindMount$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), bindAliasInner+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in a private mount namespace: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestProtectedThroughBindMount") {
			t.Fatalf("the test did not run in the private mount namespace:\n%s", out)
		}
		return
	}
	if os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
		if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
			t.Skipf("the kernel cannot hold a process here: %+v", f)
		}
	}
	r := newProtectRig(t, "landlock")
	alias := filepath.Join(r.dir, "alias")
	if err := os.Mkdir(alias, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(r.dir, alias, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(alias, unix.MNT_DETACH) })
	akey := filepath.Join(alias, "keys", "certifier.key")
	aev := filepath.Join(alias, "ev")
	cs, _, stderr := connectStdio(t, r.dir, r.sessionFlags()...)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": akey}},
		{"write_file", map[string]any{"path": aev + "/planted.jsonl", "content": "{}\n"}},
		{"bash", map[string]any{"command": "echo planted > " + aev + "/planted.jsonl"}},
	} {
		if kind, reason, all := r.call(t, cs, c.tool, c.args); kind != "denied" || reason != "guard:protected_path" {
			t.Errorf("%s %v: %s %s, want denied guard:protected_path: %s", c.tool, c.args, kind, reason, all)
		} else if strings.Contains(all, r.keyText) {
			t.Errorf("%s %v: the key's bytes are in the result", c.tool, c.args)
		}
	}
	// Names the guard cannot see: the kernel holds the process.
	for _, command := range []string{"cat " + akey, "sh -c 'cat " + akey + "'", "sh -c 'echo planted > " + aev + "/own.jsonl'", "sh -c 'ls " + aev + "'"} {
		kind, _, all := r.call(t, cs, "bash", map[string]any{"command": command})
		if kind == "succeeded" && !strings.Contains(all, "Permission denied") {
			t.Errorf("%s: succeeded: %s", command, all)
		}
		if strings.Contains(all, r.keyText) || strings.Contains(all, ".jsonl") && strings.Contains(command, "ls") {
			t.Errorf("%s: reached the session's files: %s", command, all)
		}
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	for _, f := range []string{"planted.jsonl", "own.jsonl"} {
		if _, err := os.Lstat(filepath.Join(r.ev, f)); err == nil {
			t.Errorf("%s was planted in the evidence directory", f)
		}
	}
	verifyClosedChain(t, r.dir)
}

// TestParseMountInfo: mountinfo's escapes are decoded, and the aliases of
// a path are found through a bind mount of a parent directory, a bind
// mount of the file itself, a mount showing part of a protected directory,
// and not through a mount of another device or another directory.
func TestParseMountInfo(t *testing.T) {
	const sample = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /tmp rw shared:2 - tmpfs tmpfs rw
31 30 0:25 /r /tmp/r/alias\040dir rw - tmpfs tmpfs rw
32 22 0:25 /r/keys/k.key /srv/k\134ey rw - tmpfs tmpfs rw
33 22 0:25 /r/ev/sub /mnt/sub rw - tmpfs tmpfs rw
34 22 0:26 /r /other rw - tmpfs tmpfs rw
35 22 0:25 /s /mnt/s rw - tmpfs tmpfs rw
36 22 8:1 /tmp /oldtmp rw - ext4 /dev/sda1 rw
`
	mounts, err := parseMountInfo(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if mounts[2].point != "/tmp/r/alias dir" || mounts[3].point != `/srv/k\ey` {
		t.Fatalf("escapes not decoded: %+v", mounts)
	}
	got := mountAliases([]string{"/tmp/r/ev", "/tmp/r/keys/k.key"}, mounts)
	want := []string{"/mnt/sub", "/srv/k\\ey", "/tmp/r/alias dir/ev", "/tmp/r/alias dir/keys/k.key", "/tmp/r/ev", "/tmp/r/keys/k.key"}
	if !slices.Equal(got, want) {
		t.Errorf("aliases:\n got %q\nwant %q", got, want)
	}
	// The root file system's /tmp directory is covered by the tmpfs: the
	// holder is the longest mount point, so /oldtmp is no alias.
	for _, bad := range []string{"1 2 3", "1 2 8-1 / /x rw", `1 2 8:1 /\04 /x rw`, `1 2 8:1 / /x\9 rw`, `1 2 8:1 / /\777 rw`} {
		if _, err := parseMountInfo(strings.NewReader(bad + "\n")); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
	saved := mountInfoFile
	mountInfoFile = filepath.Join(t.TempDir(), "absent")
	defer func() { mountInfoFile = saved }()
	if _, err := expandMounts([]string{"/tmp/x"}); err == nil {
		t.Error("an unreadable mountinfo expanded nothing and passed")
	}
}
