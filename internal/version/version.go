// Package version says which build of polc and certverify is running: the
// module version, the VCS commit the binary was built from and the Go
// toolchain, read from the build information the Go linker embeds.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// String is the --version text of the program prog: three lines, the
// module version ("(devel)" for a build from a checkout), the commit
// ("unknown" when the build carries no VCS information, as `go run` and
// test binaries do not; "+modified" when the work tree had changes) and
// the Go version and platform.
func String(prog string) string {
	mod, commit := "(unknown)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			mod = v
		}
		commit = vcs(bi.Settings)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", prog, mod)
	fmt.Fprintf(&b, "commit %s\n", commit)
	fmt.Fprintf(&b, "go     %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}

func vcs(settings []debug.BuildSetting) string {
	var rev, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified == "true" {
		rev += "+modified"
	}
	return rev
}
