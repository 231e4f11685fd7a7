package polccli

import (
	"testing"

	"polc.dev/polc/sandbox"
)

// TestLauncherFileName: the launcher protectedPaths protects is the one
// the sandbox looks for next to the executable.
func TestLauncherFileName(t *testing.T) {
	if launcherFile != sandbox.LauncherFile {
		t.Fatalf("launcherFile %q, sandbox.LauncherFile %q", launcherFile, sandbox.LauncherFile)
	}
}
