package harness_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"polc.dev/polc/harness"
)

// TestSpawnRunsPreflight: Spawn itself runs the plan's offline validators
// before the provider, so an integrator calling Compile then Spawn cannot
// run a provider whose settings its own validator rejects (`claude -p`
// silently ignores a settings file it cannot parse, rules and sandbox
// with it). A failure is not remembered; a pass is, per plan digest.
func TestSpawnRunsPreflight(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	calls, invalid := filepath.Join(dir, "calls"), filepath.Join(dir, "invalid")
	script := filepath.Join(dir, "fake-codex")
	body := `#!/bin/sh
echo "$1" >> '` + calls + `'
case "$1" in
app-server) if [ -f '` + invalid + `' ]; then echo '{"error":"unknown field in config"}'; fi; exit 0;;
execpolicy) echo '{"decision":"forbidden"}'; exit 0;;
esac
echo '{"type":"thread.started","thread_id":"t1"}'
echo '{"type":"turn.completed"}'
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(invalid, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plan, _ := fakeCodexPlan(t, dir, script, "")
	count := func(arg string) int {
		b, _ := os.ReadFile(calls)
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if l == arg {
				n++
			}
		}
		return n
	}

	_, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"})
	var pe *harness.PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("Spawn with a plan its validator rejects = %v, want a *PreflightError", err)
	}
	if n := count("exec"); n != 0 {
		t.Fatalf("the provider ran %d times after its validator failed", n)
	}

	os.Remove(invalid)
	for i := range 2 {
		res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run %d: %v %+v", i, err, res)
		}
	}
	if got := count("app-server"); got != 2 {
		t.Errorf("the validator ran %d times, want 2 (the failure, then one pass for both runs)", got)
	}
	if got := count("exec"); got != 2 {
		t.Errorf("the provider ran %d times, want 2", got)
	}
}

// TestSpawnRefusesChangedExecutable: the plan's version, capability table
// and report describe the file that was probed. When that file changed
// before the spawn (an upgrade in between), Spawn refuses instead of
// running another program under the plan's claims.
func TestSpawnRefusesChangedExecutable(t *testing.T) {
	dir, script := fakeProvider(t, `touch ran
echo '{"type":"thread.started","thread_id":"t1"}'
echo '{"type":"turn.completed"}'
`)
	plan, _ := fakeCodexPlan(t, dir, script, "")
	f, err := os.OpenFile(script, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("# upgraded\n")
	f.Close()
	_, err = harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"})
	var ce *harness.CompileError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "not the one probed") {
		t.Fatalf("Spawn after the executable changed = %v, want a CompileError", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "ran")); err == nil {
		t.Error("the changed executable ran")
	}
}

// TestSpawnRefusesSameSizeSameMtimeSwap: the hash is recomputed when the
// file's identity changes, not only its size or modification time: npm
// extracts every file with one fixed mtime, so an upgrade can keep both.
func TestSpawnRefusesSameSizeSameMtimeSwap(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inode and change time are read on Linux")
	}
	dir, script := fakeProvider(t, `touch ran
echo '{"type":"thread.started","thread_id":"t1"}'
echo '{"type":"turn.completed"}'
`)
	plan, _ := fakeCodexPlan(t, dir, script, "")
	// A first run hashes the file and remembers the hash.
	if _, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(script)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(script)
	swapped := []byte(strings.Replace(string(b), "touch ran", "touch RAN", 1))
	tmp := script + ".new"
	if err := os.WriteFile(tmp, swapped, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, script); err != nil {
		t.Fatal(err)
	}
	_, err = harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x"})
	var ce *harness.CompileError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "not the one probed") {
		t.Fatalf("Spawn after a same-size, same-mtime swap = %v, want a CompileError", err)
	}
}
