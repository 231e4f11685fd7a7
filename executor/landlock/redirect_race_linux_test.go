package landlock_test

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
	"polc.dev/polc/executor/landlock"
	"polc.dev/polc/sandbox"
	"polc.dev/polc/snapshot"
)

// TestConcurrentLandlockRedirectionsStayWhereJudged is the symlink-swap
// race of package builtin's TestConcurrentRedirectionsStayWhereJudged under
// the landlock backend: another process exchanges out/ and in/ with links
// to secrets/ and to a directory outside the workspace (renameat2
// RENAME_EXCHANGE) while callers run >, >> and < redirections, whose files
// polc opens and passes to the sandboxed bash, and a write the command
// makes by itself (sh -c). Nothing may land in secrets/ or outside, and no
// read may return what is there. Run it under -race (.ci/run does).
func TestConcurrentLandlockRedirectionsStayWhereJudged(t *testing.T) {
	if os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
		if f, _ := sandbox.Probe().Facet(sandbox.FacetNetwork); f.State == sandbox.Unsupported {
			t.Skipf("the kernel cannot hold a process here: %+v", f)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.cue"), []byte(`package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: ["in/**", "out/**"], write: ["out/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "cat", "cat *", "sh *"], shell: "allow"}
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
	for _, l := range []struct{ name, to string }{{"out.secrets", secrets}, {"out.outside", outside}, {"in.secrets", secrets}, {"in.outside", outside}} {
		if err := os.Symlink(l.to, filepath.Join(ws, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{Workspace: ws}); err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap},
		Backends: []executor.EffectBackend{&landlock.Backend{TempDir: dir}}})
	if err != nil {
		t.Fatal(err)
	}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "t", Workspace: ws, Backend: landlock.Name, Profile: executor.ProfileMinimal,
		Policy: executor.SnapshotRef{PolicyID: snap.PolicyID, Version: snap.Version, Digest: snap.Digest}}

	// The swaps run in another process, so that they do not wake in step
	// with the callers' goroutines.
	swapper := exec.Command(os.Args[0], "-test.run=^TestLandlockRedirectSwapperProcess$")
	swapper.Env = append(os.Environ(), "POLC_TEST_SWAP_IN="+ws)
	swapper.Stderr = os.Stderr
	if err := swapper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		swapper.Process.Kill()
		swapper.Wait()
	}()

	const callers, rounds = 6, 12
	var ran, succeeded, redirected atomic.Int64
	var mu sync.Mutex
	var written []string // files of write redirections that succeeded
	outcomes := map[string]int{}
	// The swapper makes most commands fail (as it should); under the race
	// detector on a loaded machine a batch may see no write redirection
	// succeed, which would show nothing, so batches repeat (a bounded
	// number of times) until one has.
	var wg sync.WaitGroup
	for batch := 0; batch < 5 && redirected.Load() == 0; batch++ {
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					name := fmt.Sprintf("f%d-%d-%d", batch, i, r)
					var cmd string
					switch r % 4 {
					case 0:
						cmd = "echo data > out/" + name
					case 1:
						cmd = "echo data >> out/" + name
					case 2:
						cmd = "cat < in/f"
					case 3:
						cmd = "sh -c 'echo data > out/" + name + "; cat in/f'"
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					out := e.Execute(ctx, executor.ExecutionRequest{RequestID: "r-" + name, Action: "bash",
						Arguments: map[string]any{"command": cmd}, Scope: ec.Scope}, ec)
					cancel()
					mu.Lock()
					outcomes[out.Base().ReasonCode]++
					mu.Unlock()
					var stdout string
					if s, ok := out.(*executor.Succeeded); ok {
						succeeded.Add(1)
						if m, ok := s.Result.(map[string]any); ok {
							stdout, _ = m["stdout"].(string)
						}
						if r%4 < 2 {
							redirected.Add(1)
							mu.Lock()
							written = append(written, name)
							mu.Unlock()
						}
					}
					if f, ok := out.(*executor.Failed); ok {
						if m, ok := f.Result.(map[string]any); ok {
							stdout, _ = m["stdout"].(string)
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
	}
	swapper.Process.Kill()
	swapper.Wait()

	// Each succeeded redirection's data is in the real out/, under one of
	// these names as the swapper left it.
	for _, name := range written {
		found := false
		for _, d := range []string{"out", "out.secrets", "out.outside"} {
			b, _ := os.ReadFile(filepath.Join(ws, d, name))
			found = found || string(b) == "data\n"
		}
		if !found {
			t.Errorf("the redirection to out/%s succeeded but the real out/ does not hold its data", name)
		}
	}
	for _, d := range []string{secrets, outside} {
		entries, _ := os.ReadDir(d)
		for _, en := range entries {
			if en.Name() != "f" {
				t.Errorf("%s written through a swapped link", filepath.Join(d, en.Name()))
			}
		}
	}
	for _, f := range []string{filepath.Join(secrets, "f"), filepath.Join(outside, "f")} {
		if b, _ := os.ReadFile(f); !strings.HasSuffix(string(b), "\n") || strings.Count(string(b), "\n") != 1 {
			t.Errorf("%s changed: %q", f, b)
		}
	}
	if redirected.Load() == 0 {
		t.Errorf("no write redirection succeeded (%d commands ran): the test shows nothing", ran.Load())
	}
	t.Logf("%d commands, %d succeeded (%d write redirections); outcomes %v", ran.Load(), succeeded.Load(), redirected.Load(), outcomes)
}

// TestLandlockRedirectSwapperProcess is the swapper of
// TestConcurrentLandlockRedirectionsStayWhereJudged, run as a process of
// its own; without POLC_TEST_SWAP_IN it does nothing.
func TestLandlockRedirectSwapperProcess(t *testing.T) {
	ws := os.Getenv("POLC_TEST_SWAP_IN")
	if ws == "" {
		t.Skip("run by TestConcurrentLandlockRedirectionsStayWhereJudged")
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
		exchange("out", "out."+link)
		exchange("in", "in."+link)
		time.Sleep(time.Millisecond)
	}
}
