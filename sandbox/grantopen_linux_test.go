//go:build linux

package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/sandbox"
)

// A granted path that is (or goes through) a symbolic link when the
// launcher starts is refused, not followed: a contained process that can
// swap a granted name for a link (its write root holds it) would otherwise
// have the next spawn grant the link's target. The swap happens here
// before the spawn, deterministically; the landlock backend's
// TestAttackGrantFollowsSwappedSymlink races it.
func TestGrantThroughSymlinkRefused(t *testing.T) {
	f := newFixture(t)
	secret := filepath.Join(f.outside, "secret")
	link := filepath.Join(f.ws, "sub", "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(f.root, "dirlink")
	if err := os.Symlink(f.outside, dirLink); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*sandbox.Spec){
		"read a link to a file":          func(s *sandbox.Spec) { s.Read = append(s.Read, link) },
		"execute a link to a file":       func(s *sandbox.Spec) { s.Execute = append(s.Execute, link) },
		"write a link to a directory":    func(s *sandbox.Spec) { s.Write = append(s.Write, dirLink) },
		"read through a linked parent":   func(s *sandbox.Spec) { s.Read = append(s.Read, filepath.Join(dirLink, "secret")) },
		"write through a linked parent":  func(s *sandbox.Spec) { s.Write = []string{filepath.Join(dirLink, "secret")} },
		"read a link, with a deny":       func(s *sandbox.Spec) { s.Read = append(s.Read, link); s.Deny = []string{filepath.Join(f.ro, "sub")} },
		"read a dir link, with a deny":   func(s *sandbox.Spec) { s.Read = append(s.Read, dirLink); s.Deny = []string{filepath.Join(f.ro, "sub")} },
		"execute a link, no other grant": func(s *sandbox.Spec) { *s = sandbox.Spec{Execute: []string{link}, Env: baseEnv} },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			for _, n := range []sandbox.Network{sandbox.NetworkAllow, sandbox.NetworkDeny} {
				spec := f.spec(n)
				spec.Dir = ""
				mod(&spec)
				spec.Network = n
				r := run(t, spec, "cat", secret)
				if r.code != sandbox.ExitRefused || !strings.Contains(r.stderr, "symbolic link") {
					t.Errorf("%s: not refused:\n%v", n, r)
				}
				if strings.Contains(r.stdout, "outside-secret") {
					t.Errorf("%s: the link's target was read", n)
				}
			}
		})
	}
	// System paths keep following links (/bin and /lib64 are links on
	// merged-/usr systems): a plain spawn works.
	ok(t, "system paths", run(t, f.spec(sandbox.NetworkAllow), "/bin/true"))
}
