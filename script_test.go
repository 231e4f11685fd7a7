package polc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"polc.dev/polc/harness"
	"polc.dev/polc/internal/certverifycli"
	"polc.dev/polc/internal/polccli"
	"polc.dev/polc/internal/testutil"
	"polc.dev/polc/internal/testutil/mcptest"
	"polc.dev/polc/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init() // the landlock backend re-executes this binary as its launcher
	testscript.Main(m, map[string]func(){
		"polc":       func() { os.Exit(polccli.Main()) },
		"certverify": func() { os.Exit(certverifycli.Main()) },
		// A real MCP server over stdio (internal/testutil/mcptest) that
		// scripts' sessions declare in mcp_servers.
		"polc-mcp-upstream": func() { os.Exit(mcptest.Main()) },
	})
}

// TestScripts runs testdata/scripts/*.txtar. Set POLC_UPDATE=1 to rewrite
// the golden files (cmp targets) inside the archives; CI requires that doing
// so leaves no diff.
func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams(t))
}

// TestX replays one script in-process for debugging:
// POLC_SCRIPT=polc_vet_cycle go test -run TestX .
func TestX(t *testing.T) {
	name := os.Getenv("POLC_SCRIPT")
	if name == "" {
		t.Skip("set POLC_SCRIPT to a script name to replay it")
	}
	p := scriptParams(t)
	p.Files = []string{filepath.Join(p.Dir, name+".txtar")}
	p.Dir = ""
	p.TestWork = true
	testscript.Run(t, p)
}

// scriptNow is the instant every script runs at (POLC_NOW).
const scriptNow = "2026-03-15T12:00:00Z"

func scriptParams(t *testing.T) testscript.Params {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return testscript.Params{
		Dir:                 filepath.Join("testdata", "scripts"),
		UpdateScripts:       os.Getenv("POLC_UPDATE") != "",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("POLC_ROOT", root)
			// Every script judges time at one fixed instant (vet, compile,
			// test, diff, eval and run read POLC_NOW when --now is not
			// given), so no golden depends on the day the suite runs.
			// A script that needs another instant passes --now.
			env.Setenv("POLC_NOW", scriptNow)
			env.Setenv("POLC_PROVIDERS_DIR", harness.ProvidersDir())
			return nil
		},
		// [provider:NAME] holds when the pinned CLI is installed; scripts
		// skip without it (CI installs it and requires it).
		Condition: func(cond string) (bool, error) {
			name, ok := strings.CutPrefix(cond, "provider:")
			if !ok {
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			if harness.CachedExecutable(name) == "" && os.Getenv("POLC_REQUIRE_PROVIDERS") != "" {
				return false, fmt.Errorf("provider %s required but not installed", name)
			}
			return harness.CachedExecutable(name) != "", nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode":  cmdExitcode,
			"snapcheck": cmdSnapcheck,
		},
	}
}

// cmdExitcode runs a program and asserts its exact exit code:
//
//	exitcode N program [args...]
//
// stdout and stderr are kept for later cmp/stdout/stderr commands.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("usage: exitcode N program [args...]: %v", err)
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("%s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// cmdSnapcheck validates every snapshot under DIR/snapshots against the
// snapshot JSON Schema and snapshot.Parse:
//
//	snapcheck DIR
func cmdSnapcheck(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: snapcheck DIR")
	}
	dir := ts.MkAbs(filepath.Join(args[0], "snapshots"))
	entries, err := os.ReadDir(dir)
	ts.Check(err)
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasSuffix(e.Name(), ".srcmap.json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		ts.Check(err)
		if err := testutil.CheckSnapshot(data); err != nil {
			ts.Fatalf("%s: %v", e.Name(), err)
		}
		n++
	}
	if n == 0 {
		ts.Fatalf("no snapshots in %s", dir)
	}
}
