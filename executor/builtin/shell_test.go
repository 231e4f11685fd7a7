package builtin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestShellRunsNoUnjudgedCommand: each command ran "touch" through real
// bash while the policy saw no touch (an extended glob that bash reads as
// "!" and a subshell, a $(…) in a [[ ]] pattern, a history entry fc runs,
// a name hash -p maps to a file, a program word bash expands). The
// callable re-parses the command as the normalizer does, refuses it
// (invalid_command), and nothing runs.
func TestShellRunsNoUnjudgedCommand(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	touch, err := exec.LookPath("touch")
	if err != nil {
		t.Skip("no touch")
	}
	ws := t.TempDir()
	fns := callables(t, ws)
	for i, form := range []string{
		`!(touch %s)`,
		`echo; !(touch %s)`,
		`[[ x == @($(touch %s)|x) ]]`,
		`history -s 'touch %s'; fc -s`,
		`hash -p ` + touch + ` git; git %s`,
		`x=touch; $x %s`,
		`{touch,%s}`,
		`${x:-touch} %s`,
	} {
		name := fmt.Sprintf("pwned%d", i)
		cmd := fmt.Sprintf(form, name)
		_, err := fns["bash"](context.Background(), map[string]any{"command": cmd})
		if _, serr := os.Stat(filepath.Join(ws, name)); serr == nil {
			t.Errorf("%q ran a command the policy never saw", cmd)
		}
		if class(err) != "invalid_command" {
			t.Errorf("%q: %v, want invalid_command", cmd, err)
		}
	}
}
