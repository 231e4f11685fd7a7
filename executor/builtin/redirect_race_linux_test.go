package builtin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/snapshot"
)

// TestConcurrentRedirectionsStayWhereJudged: bash opened a redirection's
// file by its path after the policy had judged it, so with out/ (and in/)
// swapped for a symlink while commands ran, about a third of the allowed
// "echo data > out/fN" landed in the denied secrets/ or outside the
// workspace, and "cat < in/f" read secrets/f. A goroutine swaps out/ and
// in/ atomically (renameat2 RENAME_EXCHANGE) between real directories and
// links to secrets/ and to a directory outside the workspace, while
// callers run >, >> and < redirections through the bash callable and
// through Execute: nothing may land in secrets/ or outside, and no read
// may return what is there. Run it under -race (.ci/run does).
func TestConcurrentRedirectionsStayWhereJudged(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.cue"), []byte(`package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: ["in/**", "out/**"], write: ["out/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "cat", "cat *"], shell: "allow"}
}
`), 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	snap := res.Snapshots[0]
	ws, outside := filepath.Join(dir, "ws"), filepath.Join(dir, "outside")
	secrets := filepath.Join(ws, "secrets")
	for _, d := range []string{"out", "in", "secrets"} {
		os.MkdirAll(filepath.Join(ws, d), 0o755)
	}
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(ws, "in", "f"), []byte("public\n"), 0o644)
	os.WriteFile(filepath.Join(secrets, "f"), []byte("SECRET\n"), 0o600)
	os.WriteFile(filepath.Join(outside, "f"), []byte("OUTSIDE\n"), 0o600)
	// Links waiting to be exchanged with out/ and in/.
	for _, l := range []struct{ name, to string }{{"out.secrets", secrets}, {"out.outside", outside}, {"in.secrets", secrets}, {"in.outside", outside}} {
		if err := os.Symlink(l.to, filepath.Join(ws, l.name)); err != nil {
			t.Fatal(err)
		}
	}

	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{Workspace: ws}); err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}})
	if err != nil {
		t.Fatal(err)
	}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "t", Workspace: ws, Backend: "inprocess", Profile: executor.ProfileMinimal,
		Policy: executor.SnapshotRef{PolicyID: snap.PolicyID, Version: snap.Version, Digest: snap.Digest}}
	fns, err := builtin.Callables(builtin.Options{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}

	// The swaps run in another process: timers in this one wake with the
	// callers' goroutines and would swap in step with them.
	swapper := exec.Command(os.Args[0], "-test.run=^TestRedirectSwapperProcess$")
	swapper.Env = append(os.Environ(), "POLC_TEST_SWAP_IN="+ws)
	swapper.Stderr = os.Stderr
	if err := swapper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		swapper.Process.Kill()
		swapper.Wait()
	}()

	const callers, rounds = 8, 16
	var ran, succeeded atomic.Int64
	var mu sync.Mutex
	outcomes := map[string]int{}
	note := func(s string) {
		mu.Lock()
		outcomes[s]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				name := fmt.Sprintf("f%d-%d", i, r)
				var cmd string
				switch r % 3 {
				case 0:
					cmd = "echo data > out/" + name
				case 1:
					cmd = "echo data >> out/" + name
				case 2:
					cmd = "cat < in/f"
				}
				var stdout string
				if (i+r)%2 == 0 {
					res, err := fns["bash"](context.Background(), map[string]any{"command": cmd})
					if err == nil {
						succeeded.Add(1)
					}
					note("callable " + class(err))
					if m, ok := res.(map[string]any); ok {
						stdout, _ = m["stdout"].(string)
					}
				} else {
					out := e.Execute(context.Background(), executor.ExecutionRequest{RequestID: "r-" + name, Action: "bash",
						Arguments: map[string]any{"command": cmd}, Scope: ec.Scope}, ec)
					note("Execute " + out.Base().ReasonCode)
					if s, ok := out.(*executor.Succeeded); ok {
						succeeded.Add(1)
						if m, ok := s.Result.(map[string]any); ok {
							stdout, _ = m["stdout"].(string)
						}
					}
				}
				ran.Add(1)
				if strings.Contains(stdout, "SECRET") || strings.Contains(stdout, "OUTSIDE") {
					t.Errorf("%q read through a swapped link: %q", cmd, stdout)
				}
			}
		}()
	}
	wg.Wait()
	swapper.Process.Kill()
	swapper.Wait()

	for _, d := range []string{secrets, outside} {
		entries, _ := os.ReadDir(d)
		for _, en := range entries {
			if en.Name() != "f" {
				t.Errorf("%s written through a swapped link", filepath.Join(d, en.Name()))
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(secrets, "f")); string(b) != "SECRET\n" {
		t.Errorf("secrets/f changed: %q", b)
	}
	if succeeded.Load() == 0 {
		t.Errorf("no command succeeded (%d ran): the test shows nothing", ran.Load())
	}
	t.Logf("%d commands, %d succeeded; outcomes %v", ran.Load(), succeeded.Load(), outcomes)
}

// TestRedirectSwapperProcess is TestConcurrentRedirectionsStayWhereJudged's
// swapper, run as a process of its own: in the workspace POLC_TEST_SWAP_IN
// names, it exchanges out/ and in/ with links to secrets/ and to a
// directory outside (renameat2 RENAME_EXCHANGE: atomic), briefly, and back
// for longer, until killed (or orphaned). Without POLC_TEST_SWAP_IN it
// does nothing.
func TestRedirectSwapperProcess(t *testing.T) {
	ws := os.Getenv("POLC_TEST_SWAP_IN")
	if ws == "" {
		t.Skip("run by TestConcurrentRedirectionsStayWhereJudged")
	}
	exchange := func(a, b string) {
		if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(ws, a), unix.AT_FDCWD, filepath.Join(ws, b), unix.RENAME_EXCHANGE); err != nil {
			fmt.Fprintln(os.Stderr, "swapper:", err)
			os.Exit(1)
		}
	}
	parent, deadline := os.Getppid(), time.Now().Add(5*time.Minute)
	for i := 0; os.Getppid() == parent && time.Now().Before(deadline); i++ { // never outlive the test
		link := []string{"secrets", "outside"}[i%2]
		exchange("out", "out."+link)
		exchange("in", "in."+link)
		time.Sleep(500 * time.Microsecond)
		exchange("out", "out."+link) // back to the real directories
		exchange("in", "in."+link)
		time.Sleep(time.Millisecond)
	}
}
