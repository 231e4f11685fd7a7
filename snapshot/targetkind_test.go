package snapshot_test

import (
	"testing"

	"polc.dev/polc/snapshot"
)

// TestTargetKindNameTakesAString: TargetKindName took the internal
// pattern.Kind, which no importer outside the module can name; it takes
// any string type now.
func TestTargetKindNameTakesAString(t *testing.T) {
	type grammar string
	for in, want := range map[string]string{
		"command": snapshot.TargetCommand, "path": snapshot.TargetPath, "host": snapshot.TargetHost, "mcp": snapshot.TargetMCP,
		"action": "", "env": "", "": "",
	} {
		if got := snapshot.TargetKindName(in); got != want {
			t.Errorf("TargetKindName(%q) = %q, want %q", in, got, want)
		}
		if got := snapshot.TargetKindName(grammar(in)); got != want {
			t.Errorf("TargetKindName(grammar(%q)) = %q, want %q", in, got, want)
		}
	}
}
