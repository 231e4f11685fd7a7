package builtin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// TestBashHugeDescriptorNumberWritesNothing: "2147483648<victim.txt" is
// to bash the argument "2147483648" and a redirection of stdin, so
// "> /dev/stdin" then truncated victim.txt, a file the policy lets the
// command only read (TestHugeDescriptorNumberIsRefused). Through Execute
// and the built-in bash the command is refused and the file kept.
func TestBashHugeDescriptorNumberWritesNothing(t *testing.T) {
	ws, run := refusalRig(t, fmt.Sprintf(refusalPolicy, "", ""))
	victim := filepath.Join(ws, "victim.txt")
	for _, cmd := range []string{
		"echo pwned 2147483648<victim.txt >/dev/stdin",
		"echo pwned 2147483648< victim.txt > /dev/fd/0",
		"echo pwned 99999999999999999999<victim.txt >/dev/stdin",
	} {
		if err := os.WriteFile(victim, []byte("keep\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := run(cmd)
		if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidCommand {
			t.Errorf("%q: %s %s, want denied %s", cmd, out.Kind(), out.Base().ReasonCode, normalize.ReasonInvalidCommand)
		}
		if b, err := os.ReadFile(victim); err != nil || string(b) != "keep\n" {
			t.Errorf("%q (%s): victim.txt, judged as a read only, is now %q (%v)", cmd, out.Kind(), b, err)
		}
	}
}
