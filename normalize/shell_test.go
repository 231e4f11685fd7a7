package normalize_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/normalize"
)

// TestShellBuiltinsClassified: every builtin of the bash installed has a
// class (docs/decisions.md): a builtin polc does not know, a newer bash's,
// fails this test rather than run unjudged.
func TestShellBuiltinsClassified(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command(bash, "-c", "compgen -b").Output()
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(out))
	if len(names) < 50 {
		t.Fatalf("compgen -b listed %d builtins", len(names))
	}
	classified := normalize.ShellBuiltinNames()
	for _, name := range names {
		if !slices.Contains(classified, name) {
			t.Errorf("bash builtin %q has no class", name)
		}
	}
}

// TestIntegerVarsFromBash: the integer-typed variables the normalizer
// knows are those the bash installed gives the integer attribute ("declare
// -pi" in a clean environment), so a bash with a new one fails this test
// rather than evaluate its assigned values unseen.
func TestIntegerVarsFromBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", "declare -pi")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	known := normalize.IntegerVarNames()
	var got []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		// declare -i NAME, declare -ir NAME="1"
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "declare" || !strings.Contains(f[1], "i") {
			t.Fatalf("unexpected line %q", line)
		}
		name, _, _ := strings.Cut(f[2], "=")
		got = append(got, name)
		if !slices.Contains(known, name) {
			t.Errorf("bash gives %s the integer attribute; the normalizer does not know it (integerVars)", name)
		}
	}
	if len(got) < 5 {
		t.Fatalf("declare -pi listed %q", got)
	}
	for _, name := range known {
		if !slices.Contains(got, name) {
			t.Errorf("integerVars lists %s, which this bash does not make an integer", name)
		}
	}
}
