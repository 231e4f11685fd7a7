package builtin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// TestConcurrentBashKeepsEachArgv: the shell parser's expansion state was
// one package-level value shared by every request (mvdan.cc/sh's expand
// with a nil Config), so under concurrent requests an allowed
// "echo notes/sN" ran as another request's "rm notes/sM", and echo printed
// another request's argument. 64 callers at once, through Execute and the
// real bash built-in: every echo prints exactly its own argument, in its
// own spelling (shell control or not), and every denied rm leaves its
// sentinel file in place. Run it under -race (.ci/run does).
func TestConcurrentBashKeepsEachArgv(t *testing.T) {
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
	filesystem: {read: ["**"], write: ["notes/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "/bin/echo *"], deny: ["rm *", "/bin/rm *"], shell: "allow"}
}
`), 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	snap := res.Snapshots[0]
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(filepath.Join(ws, "notes"), 0o755)
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

	const callers, rounds = 64, 8
	for i := 0; i < callers; i++ {
		os.WriteFile(filepath.Join(ws, "notes", fmt.Sprintf("s%d", i)), []byte("keep"), 0o644)
	}
	var wg sync.WaitGroup
	errs := make(chan string, callers*rounds)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				arg := fmt.Sprintf("notes/s%d", i)
				var cmd, want string
				switch (i + r) % 4 {
				case 0: // plain argv: the callable execs it directly
					cmd, want = "echo "+arg+" r"+fmt.Sprint(r), arg+" r"+fmt.Sprint(r)+"\n"
				case 1: // shell control: bash runs the text
					cmd, want = "echo '"+arg+"' && echo x"+fmt.Sprint(i), arg+"\nx"+fmt.Sprint(i)+"\n"
				case 2: // a denied rm of this caller's sentinel
					cmd = "rm " + arg
				case 3:
					cmd = "/bin/rm -f " + arg
				}
				out := e.Execute(context.Background(), executor.ExecutionRequest{RequestID: fmt.Sprintf("r%d-%d", i, r), Action: "bash",
					Arguments: map[string]any{"command": cmd}, Scope: ec.Scope}, ec)
				if want == "" {
					if out.Kind() != executor.KindDenied {
						errs <- fmt.Sprintf("%q: %s, want denied", cmd, out.Kind())
					}
					continue
				}
				s, ok := out.(*executor.Succeeded)
				if !ok {
					errs <- fmt.Sprintf("%q: %s %+v", cmd, out.Kind(), out.Base())
					continue
				}
				if got := s.Result.(map[string]any)["stdout"]; got != want {
					errs <- fmt.Sprintf("%q printed %q, want %q", cmd, got, want)
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	n := 0
	for e := range errs {
		if n++; n <= 10 {
			t.Error(e)
		}
	}
	if n > 10 {
		t.Errorf("… and %d more", n-10)
	}
	for i := 0; i < callers; i++ {
		if b, err := os.ReadFile(filepath.Join(ws, "notes", fmt.Sprintf("s%d", i))); err != nil || string(b) != "keep" {
			t.Errorf("sentinel s%d: %q %v", i, b, err)
		}
	}
}

// TestConcurrentParseCommand: ParseCommand of distinct commands from many
// goroutines gives each its own argv, the same as a serial parse.
func TestConcurrentParseCommand(t *testing.T) {
	cmds := make([]string, 200)
	want := make([]string, len(cmds))
	for i := range cmds {
		switch i % 4 {
		case 0:
			cmds[i] = fmt.Sprintf("echo 'a%d' \"b%d\" c%d", i, i, i)
		case 1:
			cmds[i] = fmt.Sprintf("git log --oneline -n %d | head -%d", i, i)
		case 2:
			cmds[i] = fmt.Sprintf("X%d=v%d cat $'f\\x%02x' > out/%d", i, i, 0x41+i%26, i)
		case 3:
			cmds[i] = fmt.Sprintf("rm -rf notes/\\s%d; echo done%d", i, i)
		}
		c, nerr := normalize.ParseCommand(cmds[i])
		if nerr != nil {
			t.Fatalf("%q: %v", cmds[i], nerr)
		}
		want[i] = fmt.Sprint(c.Argv, c.Assign)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				i := (g*7 + r*13) % len(cmds)
				c, nerr := normalize.ParseCommand(cmds[i])
				got := fmt.Sprint(c.Argv, c.Assign)
				if nerr != nil || got != want[i] {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%q: %s (%v), want %s", cmds[i], got, nerr, want[i]))
					mu.Unlock()
				}
			}
		}(g)
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("%d concurrent parses differ from the serial one; first: %s", len(bad), strings.Join(bad[:min(3, len(bad))], "; "))
	}
}

// TestConcurrentPlainCallsDoNotEscape: many plain calls at once (echo
// exec'd directly, nothing in the background) failed background_escaped
// now and then: os/exec's WaitDelay timed the goroutine copying the
// output, and under load that goroutine ran only 0.5–2.5 s after the
// pipe's last writer had closed it, so a call none of whose processes
// left its session was accused of an escape. The callable now asks the
// kernel whether a write end is still held (and by whom), so a call that
// started no escaping process never fails background_escaped. Run it
// under -race (.ci/run does).
func TestConcurrentPlainCallsDoNotEscape(t *testing.T) {
	_, run := rig(t, fmt.Sprintf(threadsPolicy, ""))
	const callers, rounds = 64, 4
	var wg sync.WaitGroup
	errs := make(chan string, callers*rounds)
	for i := range callers {
		wg.Go(func() {
			for r := range rounds {
				cmd := fmt.Sprintf("echo %d %d", i, r)
				out := run(context.Background(), "bash", map[string]any{"command": cmd}, 30*time.Second)
				if got := outcomeOf(out); got != "succeeded" {
					errs <- fmt.Sprintf("%q: %s", cmd, got)
				} else if s, _ := out.(*executor.Succeeded).Result.(map[string]any)["stdout"].(string); s != fmt.Sprintf("%d %d\n", i, r) {
					errs <- fmt.Sprintf("%q printed %q", cmd, s)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
