//go:build linux

package sandbox

import (
	"encoding/json"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkLauncherWork measures the launcher's own work in-process, apart
// from process start-up: parsing the spec and building the Landlock
// ruleset (not restricting: that would restrict the benchmark).
func BenchmarkLauncherWork(b *testing.B) {
	ws := b.TempDir()
	w := newWireSpec(Spec{Write: []string{ws}, Read: []string{"/etc/hostname"}, Env: []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=/nonexistent"}}, []string{"/bin/true"})
	raw, err := json.Marshal(w)
	if err != nil {
		b.Fatal(err)
	}
	abi := detectABI()
	if abi < minABI {
		b.Skip("no Landlock ABI 6")
	}
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseWire(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ruleset", func(b *testing.B) {
		p, _ := parseWire(raw)
		for b.Loop() {
			fd, _, err := buildRuleset(p, abi)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
	b.Run("detectABI", func(b *testing.B) {
		for b.Loop() {
			detectABI()
		}
	})
	b.Run("lookPath", func(b *testing.B) {
		for b.Loop() {
			if _, err := lookPath("true", []string{"PATH=/usr/bin:/bin"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
