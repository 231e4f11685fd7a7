package polc_test

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"polc.dev/polc/internal/certverifycli"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"certverify": func() { os.Exit(certverifycli.Main()) },
	})
}

// TestScripts runs testdata/scripts/*.txtar. POLC_UPDATE=1 rewrites cmp
// goldens inside the archives.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/scripts",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		UpdateScripts:       os.Getenv("POLC_UPDATE") != "",
		Cmds:                map[string]func(ts *testscript.TestScript, neg bool, args []string){"exitcode": exitcode},
	})
}

// exitcode N PROGRAM [ARGS...] runs a program (registered or on PATH) and
// fails unless it exits with exactly N; stdout and stderr are kept for the
// following stdout/stderr/cmp commands. `! exec` only checks for non-zero.
func exitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("usage: exitcode N program [args...] (cannot be negated)")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %q is not a number", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}
