package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLauncherImportsLittle: the launcher's start-up is the floor under
// every sandboxed spawn, so it links only the standard library, x/sys,
// go-landlock (and its psx) and package sandbox: no CUE, OPA or other
// package with costly init functions.
func TestLauncherImportsLittle(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "polc.dev/polc/cmd/polc-sandbox").Output()
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"golang.org/x/sys/", "github.com/landlock-lsm/go-landlock/", "kernel.org/pub/linux/libs/security/libcap/psx",
		"polc.dev/polc/sandbox", "polc.dev/polc/cmd/polc-sandbox"}
	for _, p := range strings.Fields(string(out)) {
		ok := false
		for _, a := range allowed {
			ok = ok || p == strings.TrimSuffix(a, "/") || strings.HasPrefix(p, a)
		}
		if !ok {
			t.Errorf("cmd/polc-sandbox links %s", p)
		}
	}
}
