package landlock_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/executor/landlock"
	"polc.dev/polc/sandbox"
	"polc.dev/polc/snapshot"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// rig is a policy, a workspace, an outside directory and an executor with
// both backends.
type rig struct {
	ws, outside string
	ex          *executor.Executor
	snap        *snapshot.Snapshot
	allowedURL  string // an HTTP server the policy's network allowlist names
	deniedAddr  string // a TCP server it does not name
}

func newRig(t *testing.T, required []string) *rig {
	t.Helper()
	if os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
		if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
			t.Skipf("the kernel cannot hold a process here: %+v", f)
		}
	}
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") }))
	t.Cleanup(allowed.Close)
	denied, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { denied.Close() })
	go func() {
		for {
			c, err := denied.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("reached\n"))
			c.Close()
		}
	}()
	dir := t.TempDir()
	r := &rig{ws: filepath.Join(dir, "ws"), outside: filepath.Join(dir, "outside"), allowedURL: allowed.URL, deniedAddr: denied.Addr().String()}
	for _, d := range []string{"out", "secrets", "src"} {
		os.MkdirAll(filepath.Join(r.ws, d), 0o755)
	}
	os.MkdirAll(r.outside, 0o755)
	os.WriteFile(filepath.Join(r.ws, "secrets", "key"), []byte("s3cret"), 0o600)
	os.WriteFile(filepath.Join(r.outside, "file"), []byte("outside"), 0o644)
	hostport := strings.TrimPrefix(allowed.URL, "http://")
	policy := fmt.Sprintf(`package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"], deny: ["secrets/**"]}
	network: {mode: "allowlist", allow: [%q]}
	subprocess: {mode: "allowlist", allow: ["sh *", "curl *", "echo *", "cat"], shell: "allow"}
}
`, hostport)
	os.WriteFile(filepath.Join(dir, "p.cue"), []byte(policy), 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	r.snap = res.Snapshots[0]
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{Workspace: r.ws}); err != nil {
		t.Fatal(err)
	}
	_ = required
	r.ex, err = executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{r.snap},
		Backends: []executor.EffectBackend{executor.InProcessBackend{}, &landlock.Backend{}}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// bash runs command under backend and returns its outcome.
func (r *rig) bash(t *testing.T, backend, command string) executor.Outcome {
	t.Helper()
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "t", Workspace: r.ws, Backend: backend, Profile: executor.ProfileMinimal,
		Policy: executor.SnapshotRef{PolicyID: r.snap.PolicyID, Version: r.snap.Version, Digest: r.snap.Digest}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.ex.Execute(ctx, executor.ExecutionRequest{RequestID: "r", Action: "bash", Arguments: map[string]any{"command": command}, Scope: ec.Scope}, ec)
}

// result is the bash result of an outcome that ran (succeeded or failed
// with an exit status).
func result(t *testing.T, out executor.Outcome) map[string]any {
	t.Helper()
	switch o := out.(type) {
	case *executor.Succeeded:
		return o.Result.(map[string]any)
	case *executor.Failed:
		if m, ok := o.Result.(map[string]any); ok {
			return m
		}
	}
	t.Fatalf("the command did not run: %T %+v", out, out)
	return nil
}

// TestBackendHoldsAnAllowedInterpreter: an allowed `sh -c` tries what the
// policy forbids. Under the in-process backend each attempt succeeds (so
// the attempt is real); under the landlock backend the kernel stops each,
// and the effect is absent.
func TestBackendHoldsAnAllowedInterpreter(t *testing.T) {
	r := newRig(t, nil)
	var victim *exec.Cmd
	attempts := []struct {
		name    string
		command string
		effect  func(t *testing.T) bool // whether the forbidden effect happened
	}{
		{"write outside the write roots", fmt.Sprintf("sh -c 'echo x > %s/new'", r.outside), func(t *testing.T) bool { return exists(filepath.Join(r.outside, "new")) }},
		{"write into a denied subtree", "sh -c 'echo x > secrets/new'", func(t *testing.T) bool { return exists(filepath.Join(r.ws, "secrets", "new")) }},
		{"read a denied file", "sh -c 'cat secrets/key > out/leak'", func(t *testing.T) bool { return contains(filepath.Join(r.ws, "out", "leak"), "s3cret") }},
		{"write through a symlink", "sh -c 'ln -sfn " + r.outside + " out/link && echo x > out/link/vialink'", func(t *testing.T) bool { return exists(filepath.Join(r.outside, "vialink")) }},
		{"write through /proc/self/root", fmt.Sprintf("sh -c 'echo x > /proc/self/root%s/viaproc'", r.outside), func(t *testing.T) bool { return exists(filepath.Join(r.outside, "viaproc")) }},
		{"write through ..", fmt.Sprintf("sh -c 'echo x > out/../../outside/viadots'"), func(t *testing.T) bool { return exists(filepath.Join(r.outside, "viadots")) }},
		{"connect to a host the policy does not name", fmt.Sprintf("sh -c 'curl -s --noproxy \"*\" --max-time 5 telnet://%s > out/direct; true'", r.deniedAddr), func(t *testing.T) bool { return contains(filepath.Join(r.ws, "out", "direct"), "reached") }},
		{"signal a process outside", "sh -c 'kill -9 VICTIM'", func(t *testing.T) bool { return dies(victim.Process.Pid) }},
	}
	for _, backend := range []string{"inprocess", landlock.Name} {
		victim = exec.Command("sleep", "60")
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		reaped := make(chan struct{})
		go func() { victim.Wait(); close(reaped) }()
		for _, a := range attempts {
			out := r.bash(t, backend, strings.ReplaceAll(a.command, "VICTIM", fmt.Sprint(victim.Process.Pid)))
			result(t, out)
			happened := a.effect(t)
			if backend == "inprocess" && !happened {
				t.Errorf("%s under inprocess: the effect is absent, so the attempt proves nothing (%+v)", a.name, out)
			}
			if backend == landlock.Name && happened {
				t.Errorf("%s under landlock: the effect happened (%+v)", a.name, out)
			}
		}
		os.Remove(filepath.Join(r.ws, "out", "link"))
		os.Remove(filepath.Join(r.ws, "out", "leak"))
		os.Remove(filepath.Join(r.ws, "out", "direct"))
		for _, f := range []string{"new", "vialink", "viaproc", "viadots"} {
			os.Remove(filepath.Join(r.outside, f))
		}
		os.Remove(filepath.Join(r.ws, "secrets", "new"))
		victim.Process.Kill()
		<-reaped
	}
}

// TestBackendProxiesTheAllowlist: under the landlock backend the allowed
// host is reached through polc's egress proxy, and the connection is in the
// result; an unlisted host is refused by the proxy and logged.
func TestBackendProxiesTheAllowlist(t *testing.T) {
	r := newRig(t, nil)
	out := r.bash(t, landlock.Name, "curl -s --max-time 5 "+r.allowedURL+"/x")
	res := result(t, out)
	if res["stdout"] != "reached" {
		t.Fatalf("the allowed host was not reached through the proxy: %+v", res)
	}
	conns, _ := res["egress"].([]any)
	if len(conns) != 1 || conns[0].(map[string]any)["admitted"] != true {
		t.Fatalf("egress log: %+v", res["egress"])
	}
	denied := "http://" + r.deniedAddr + "/"
	out = r.bash(t, landlock.Name, "curl -s --max-time 5 -o /dev/null -w %{http_code} "+denied)
	// The request names the denied host: the policy refuses it before any
	// process runs (the normalizer sees curl's argument only as text, so
	// it runs; the proxy refuses).
	res = result(t, out)
	if res["stdout"] != "403" {
		t.Fatalf("the unlisted host through the proxy: %+v", res)
	}
	conns, _ = res["egress"].([]any)
	if len(conns) != 1 || conns[0].(map[string]any)["admitted"] != false {
		t.Fatalf("egress log: %+v", res["egress"])
	}
}

// TestBackendRedirections: with shell control, bash reopens the files polc
// opened for its redirections (descriptors the sandbox passes on). Under
// the landlock backend a redirection works as under the in-process one,
// its file is the one polc judged (a symlink on the way is refused before
// any process runs, under either backend), and the command still cannot
// open a file outside the write roots by itself.
func TestBackendRedirections(t *testing.T) {
	r := newRig(t, nil)
	for _, backend := range []string{"inprocess", landlock.Name} {
		t.Run(backend, func(t *testing.T) {
			defer os.Remove(filepath.Join(r.ws, "out", "r.txt"))
			res := result(t, r.bash(t, backend, "echo hi > out/r.txt && echo more >> out/r.txt && cat < out/r.txt"))
			if res["exit_code"] != 0 || res["stdout"] != "hi\nmore\n" {
				t.Fatalf("redirections: %+v", res)
			}
			if b, _ := os.ReadFile(filepath.Join(r.ws, "out", "r.txt")); string(b) != "hi\nmore\n" {
				t.Fatalf("out/r.txt holds %q", b)
			}
			// A link on the way to the redirection's file: polc refuses to
			// open it, so nothing lands where the link points.
			link := filepath.Join(r.ws, "out", "link")
			if err := os.Symlink(r.outside, link); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(link)
			out := r.bash(t, backend, "echo hi > out/link/vialink")
			if _, ok := out.(*executor.Succeeded); ok {
				t.Errorf("a redirection through a link succeeded: %+v", out)
			}
			if exists(filepath.Join(r.outside, "vialink")) {
				t.Fatal("the redirection's file landed outside the workspace")
			}
		})
	}
	// The command's own open, beside a redirection polc opened: the
	// in-process backend lets it write outside (the attempt is real), the
	// landlock backend does not, while the redirection still works.
	byItself := filepath.Join(r.outside, "byitself")
	command := fmt.Sprintf("echo hi > out/r2.txt; sh -c 'echo x > %s'", byItself)
	res := result(t, r.bash(t, "inprocess", command))
	if !exists(byItself) || !contains(filepath.Join(r.ws, "out", "r2.txt"), "hi") {
		t.Fatalf("inprocess: the command did not write outside, so the attempt proves nothing: %+v", res)
	}
	os.Remove(byItself)
	os.Remove(filepath.Join(r.ws, "out", "r2.txt"))
	res = result(t, r.bash(t, landlock.Name, command))
	if exists(byItself) {
		t.Errorf("landlock: the command wrote outside the write roots: %+v", res)
	}
	if !contains(filepath.Join(r.ws, "out", "r2.txt"), "hi") {
		t.Errorf("landlock: the redirection beside it did not write: %+v", res)
	}
	// Landlock refuses the create (EACCES) or, outside every write root,
	// the private read-only mount does first (EROFS).
	if s, _ := res["stderr"].(string); !strings.Contains(s, "Permission denied") && !strings.Contains(s, "Read-only file system") {
		t.Errorf("landlock: want the kernel's refusal in stderr: %+v", res)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func contains(p, s string) bool {
	b, err := os.ReadFile(p)
	return err == nil && strings.Contains(string(b), s)
}

// dies reports whether pid ends within two seconds.
func dies(pid int) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !alive(pid) {
			return true
		}
	}
	return false
}

// alive reports whether pid is a running process (not a zombie: the
// test reaps its victims in a goroutine, so a killed one may linger).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// TestDetachedDaemonEndsWithCall: a command leaves a daemon that detaches
// from the call's session (setsid) and writes after the call has ended.
// Under the in-process backend it survives the call and writes (so the
// attempt is real); under the landlock backend setsid is refused, the
// daemon stays in the call's session, which polc kills when the call ends,
// and nothing is written.
func TestDetachedDaemonEndsWithCall(t *testing.T) {
	r := newRig(t, nil)
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid program")
	}
	for _, backend := range []string{"inprocess", landlock.Name} {
		late := filepath.Join(r.ws, "out", "late-"+backend)
		out := r.bash(t, backend, fmt.Sprintf(`sh -c 'setsid sh -c "sleep 1; echo late > %s" </dev/null >/dev/null 2>&1 & echo started'`, late))
		result(t, out)
		time.Sleep(2500 * time.Millisecond)
		happened := exists(late)
		if backend == "inprocess" && !happened {
			t.Errorf("under inprocess the daemon wrote nothing, so the attempt proves nothing (%+v)", out)
		}
		if backend == landlock.Name && happened {
			t.Errorf("under landlock a daemon outlived its call and wrote %s (%+v)", late, out)
		}
	}
}
