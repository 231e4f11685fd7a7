//go:build linux

package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/sandbox"
)

// Each case runs the same script directly (it must succeed: the sandbox is
// what stops it) and sandboxed (it must fail, leaving no trace).
func TestFilesystemConfinement(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name   string
		script string
		absent string // must not exist after the sandboxed run
		clean  func() // undoes the direct run
	}{
		{name: "write outside the write roots",
			script: fmt.Sprintf("echo x > %s/new", f.outside), absent: filepath.Join(f.outside, "new")},
		{name: "write into a read root",
			script: fmt.Sprintf("echo x > %s/sub/new", f.ro), absent: filepath.Join(f.ro, "sub", "new")},
		{name: "overwrite a file in a read root",
			script: fmt.Sprintf("echo x > %s/sub/file", f.ro)},
		{name: "truncate a file in a read root",
			script: fmt.Sprintf("truncate -s 0 %s/sub/file", f.ro)},
		{name: "write into the denied subtree under a write root",
			script: fmt.Sprintf("echo x > %s/new", f.secrets), absent: filepath.Join(f.secrets, "new")},
		{name: "read a denied file",
			script: fmt.Sprintf("cat %s/key", f.secrets)},
		{name: "list a denied directory",
			script: fmt.Sprintf("ls %s", f.secrets)},
		{name: "read outside the roots",
			script: fmt.Sprintf("cat %s/secret", f.outside)},
		{name: "read /etc/shadow",
			script: "cat /etc/shadow"},
		{name: "execute from a write root",
			script: fmt.Sprintf("cp /usr/bin/true %s/mytrue && %s/mytrue", f.ws, f.ws)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok(t, "direct", direct(t, f.ws, sh(c.script)...))
			if c.absent != "" {
				os.Remove(c.absent)
			}
			mustWrite(t, filepath.Join(f.ro, "sub", "file"), "ro-file")
			for _, n := range allNetworks {
				r := run(t, withProxy(t, f.spec(n)), sh(c.script)...)
				denied(t, n.String(), r)
				if c.absent != "" && exists(c.absent) {
					t.Errorf("%s: %s exists after the sandboxed run", n, c.absent)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(f.ro, "sub", "file")); string(b) != "ro-file" {
				t.Errorf("the read-only file changed: %q", b)
			}
		})
	}
	// What the spec grants still works, so the denials above are not a
	// sandbox that denies everything.
	r := run(t, f.spec(sandbox.NetworkAllow), sh(fmt.Sprintf(
		"echo w > %[1]s/sub/new && cat %[1]s/sub/new %[1]s/sub/file %[2]s/sub/file && mkdir %[1]s/sub/d && mv %[1]s/sub/new %[1]s/sub/d/ && rm -r %[1]s/sub/d && ls %[2]s/sub >/dev/null",
		f.ws, f.ro))...)
	ok(t, "granted access", r)
	if r.stdout != "w\nws-filero-file" {
		t.Errorf("granted reads: %q", r.stdout)
	}
}

// Escapes: ways to reach a path through another name.
func TestFilesystemEscapes(t *testing.T) {
	f := newFixture(t)
	secret := filepath.Join(f.outside, "secret")
	type escape struct {
		name   string
		setup  func(t *testing.T) // before both runs
		script string
		direct string // the direct run, when it differs (to undo what it did)
		absent string
	}
	cases := []escape{
		{name: "symlink in the workspace to an outside file, made by the target",
			script: fmt.Sprintf("ln -sf %s %s/link && cat %s/link", secret, f.ws, f.ws)},
		{name: "symlink in the workspace to an outside directory, write through it",
			setup: func(t *testing.T) {
				os.Remove(filepath.Join(f.ws, "dirlink"))
				os.Symlink(f.outside, filepath.Join(f.ws, "dirlink"))
			},
			script: fmt.Sprintf("echo x > %s/dirlink/viasymlink", f.ws), absent: filepath.Join(f.outside, "viasymlink")},
		{name: "hard link of an outside file into the workspace",
			script: fmt.Sprintf("ln %s %s/hardlink && cat %s/hardlink", secret, f.ws, f.ws), absent: filepath.Join(f.ws, "hardlink")},
		{name: "/proc/self/root",
			script: fmt.Sprintf("cat /proc/self/root%s", secret)},
		{name: "/proc/PID/root of the parent",
			script: fmt.Sprintf("cat /proc/%d/root%s", os.Getpid(), secret)},
		{name: "dot-dot traversal",
			script: fmt.Sprintf("cat %s/../outside/secret", f.ws)},
		{name: "rename the denied directory to a new name",
			script: fmt.Sprintf("mv %s %s/open && cat %s/open/key", f.secrets, f.ws, f.ws)},
		{name: "rename a read-only directory into the write root, then write through the new name",
			script: fmt.Sprintf("mv %s/sub %s/rosub && echo x > %s/rosub/new", f.ro, f.ws, f.ws), absent: filepath.Join(f.ro, "sub", "new")},
		{name: "rename a workspace directory outside, then write through the new name",
			script: fmt.Sprintf("mv %s/sub %s/moved && echo x > %s/moved/new", f.ws, f.outside, f.outside), absent: filepath.Join(f.outside, "moved")},
		{name: "mount over the workspace",
			script: fmt.Sprintf("mkdir -p %s/mnt && mount -t tmpfs none %s/mnt", f.ws, f.ws),
			direct: fmt.Sprintf("mkdir -p %s/mnt && mount -t tmpfs none %s/mnt && umount %s/mnt", f.ws, f.ws, f.ws)},
		{name: "mount in a new user and mount namespace",
			script: fmt.Sprintf("mkdir -p %s/mnt && unshare -Urm mount -t tmpfs none %s/mnt", f.ws, f.ws)},
		{name: "chroot",
			script: "chroot / true"},
	}
	undo := func() {
		os.Remove(filepath.Join(f.ws, "link"))
		os.Remove(filepath.Join(f.ws, "hardlink"))
		os.Remove(filepath.Join(f.outside, "viasymlink"))
		if exists(filepath.Join(f.ws, "open")) {
			os.Rename(filepath.Join(f.ws, "open"), f.secrets)
		}
		// mv copies when rename fails with EXDEV: drop such copies.
		if exists(filepath.Join(f.ro, "sub")) {
			os.RemoveAll(filepath.Join(f.ws, "rosub"))
		} else {
			os.Rename(filepath.Join(f.ws, "rosub"), filepath.Join(f.ro, "sub"))
		}
		os.Remove(filepath.Join(f.ro, "sub", "new"))
		os.Remove(filepath.Join(f.outside, "moved", "new"))
		if exists(filepath.Join(f.ws, "sub")) {
			os.RemoveAll(filepath.Join(f.outside, "moved"))
		} else {
			os.Rename(filepath.Join(f.outside, "moved"), filepath.Join(f.ws, "sub"))
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup(t)
			}
			script := c.script
			if c.direct != "" {
				script = c.direct
			}
			ok(t, "direct", direct(t, f.ws, sh(script)...))
			undo()
			for _, n := range allNetworks {
				r := run(t, withProxy(t, f.spec(n)), sh(c.script)...)
				denied(t, n.String(), r)
				if c.absent != "" && exists(c.absent) {
					t.Errorf("%s: %s exists after the sandboxed run", n, c.absent)
				}
				undo()
			}
		})
	}
	// The denied directory is where it was and unchanged.
	if b, err := os.ReadFile(filepath.Join(f.secrets, "key")); err != nil || string(b) != "the-key" {
		t.Errorf("denied file: %q %v", b, err)
	}
}

// A symlink planted in a directory on the way to a denied path (the launcher
// lists and grants those entries one by one) must not be followed by the
// launcher: granting what it points to would grant the whole filesystem.
func TestDenySiblingSymlinkNotGranted(t *testing.T) {
	f := newFixture(t)
	if err := os.Symlink("/", filepath.Join(f.ws, "evil")); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("cat %s/evil%s/secret; echo x > %s/evil%s/planted", f.ws, f.outside, f.ws, f.outside)
	ok(t, "direct", direct(t, f.ws, sh(script+" && rm "+f.outside+"/planted")...))
	r := run(t, f.spec(sandbox.NetworkAllow), sh(script)...)
	denied(t, "sandboxed", r)
	if strings.Contains(r.stdout, "outside-secret") || exists(filepath.Join(f.outside, "planted")) {
		t.Errorf("reached outside through the sibling symlink:\n%v", r)
	}
}

// Deny names a symlink: what it resolves to is denied.
func TestDenyThroughSymlinkedName(t *testing.T) {
	f := newFixture(t)
	alias := filepath.Join(f.ws, "alias")
	if err := os.Symlink(f.secrets, alias); err != nil {
		t.Fatal(err)
	}
	spec := f.spec(sandbox.NetworkAllow)
	spec.Deny = []string{alias}
	for _, p := range []string{alias + "/key", f.secrets + "/key"} {
		ok(t, "direct", direct(t, f.ws, "cat", p))
		denied(t, p, run(t, spec, "cat", p))
	}
}

// The documented price of Deny: the directory on the way to a denied path
// takes no new entries, and is listable only when no denied directory lies
// beneath it. Siblings keep their full rights.
func TestDenyCarveOutConsequences(t *testing.T) {
	f := newFixture(t)
	// Denied directory beneath: ws cannot be listed or written directly.
	spec := f.spec(sandbox.NetworkAllow)
	denied(t, "list ws", run(t, spec, "ls", f.ws))
	denied(t, "create in ws", run(t, spec, "touch", filepath.Join(f.ws, "new")))
	ok(t, "create in a sibling", run(t, spec, "touch", filepath.Join(f.ws, "sub", "new")))
	ok(t, "list a sibling", run(t, spec, "ls", filepath.Join(f.ws, "sub")))

	// Only a denied file beneath: ws can be listed, the file stays unreadable.
	spec.Deny = []string{filepath.Join(f.secrets, "key")}
	r := run(t, spec, "ls", f.ws, f.secrets)
	ok(t, "list ws above a denied file", r)
	denied(t, "read the denied file", run(t, spec, "cat", filepath.Join(f.secrets, "key")))
	denied(t, "create next to the denied file", run(t, spec, "touch", filepath.Join(f.secrets, "new")))
	// Deny of an absent path: nothing to hide, and the way to it is closed.
	spec.Deny = []string{filepath.Join(f.ws, "absent", "deeper")}
	denied(t, "create the absent denied path", run(t, spec, "mkdir", "-p", filepath.Join(f.ws, "absent", "deeper")))
	if exists(filepath.Join(f.ws, "absent")) {
		t.Errorf("the way to the absent denied path was created")
	}
}

// A system path can be denied like any other grant.
func TestDenySystemPath(t *testing.T) {
	f := newFixture(t)
	spec := f.spec(sandbox.NetworkAllow)
	ok(t, "direct", direct(t, f.ws, "cat", "/etc/passwd"))
	ok(t, "sandboxed, not denied", run(t, spec, "cat", "/etc/passwd"))
	spec.Deny = []string{"/etc/passwd"}
	denied(t, "sandboxed, denied", run(t, spec, "cat", "/etc/passwd"))
}
