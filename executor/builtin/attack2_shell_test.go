package builtin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestAttackHugeDescriptorNumberReopensStdin: bash takes the digits
// before < or > as the redirection's descriptor only when the number fits
// in an int; "2147483648<victim.txt" is to it the argument "2147483648"
// and "<victim.txt", a redirection of stdin. The normalizer reads the
// digits as descriptor 2147483648 (strconv.Atoi takes them), so it thinks
// stdin untouched, and "> /dev/stdin" reopens no file it judged
// (reopenedFiles). Bash opens /dev/stdin — /proc/self/fd/0, victim.txt —
// for writing and truncates it: a file the policy lets the command only
// read (filesystem.write is out/**) is overwritten, through Execute and
// the built-in bash (which passes victim.txt as /proc/self/fd/K and bash
// makes it stdin all the same). The judged argv also lacks the argument
// "2147483648" that echo (or any program) receives.
func TestAttackHugeDescriptorNumberReopensStdin(t *testing.T) {
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
		if b, err := os.ReadFile(victim); err != nil || string(b) != "keep\n" {
			t.Errorf("%q (%s): victim.txt, judged as a read only, is now %q (%v)", cmd, out.Kind(), b, err)
		}
	}
}
