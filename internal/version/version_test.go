package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

// A test binary carries no VCS settings, so the commit line of a real
// build is checked here from the settings the linker would embed.
func TestVCS(t *testing.T) {
	rev := "d509b8f0123456789abcdef0123456789abcdef0"
	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "unknown"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}, rev},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}, rev + "+modified"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "unknown"},
	} {
		if got := vcs(tc.settings); got != tc.want {
			t.Errorf("vcs(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	lines := strings.Split(strings.TrimSuffix(String("polc"), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "polc ") || !strings.HasPrefix(lines[1], "commit ") || !strings.HasPrefix(lines[2], "go     go1.") {
		t.Errorf("String = %q", lines)
	}
}
