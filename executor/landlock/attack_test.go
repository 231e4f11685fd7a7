package landlock_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/executor/landlock"
	"polc.dev/polc/sandbox"
	"polc.dev/polc/snapshot"
)

// atkRig is a workspace, an outside directory and an executor whose one
// policy is the given CUE body (the fields of policies: p).
type atkRig struct {
	dir, ws, outside string
	ex               *executor.Executor
	snap             *snapshot.Snapshot
}

func newAtkRig(t *testing.T, body string, mk func(ws, outside string)) *atkRig {
	t.Helper()
	if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
		t.Skipf("the kernel cannot hold a process here: %+v", f)
	}
	dir := t.TempDir()
	r := &atkRig{dir: dir, ws: filepath.Join(dir, "ws"), outside: filepath.Join(dir, "outside")}
	for _, d := range []string{r.ws, r.outside, filepath.Join(r.ws, "out")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.outside, "file"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if mk != nil {
		mk(r.ws, r.outside)
	}
	policy := "package p\npolicies: p: {\n\tversion: \"1\"\n\tprincipals: [\"agent:a\"]\n\ttenants: [\"t\"]\n" + body + "\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	r.snap = res.Snapshots[0]
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{Workspace: r.ws}); err != nil {
		t.Fatal(err)
	}
	var err error
	r.ex, err = executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{r.snap},
		Backends: []executor.EffectBackend{executor.InProcessBackend{}, &landlock.Backend{TempDir: dir}}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *atkRig) bash(t *testing.T, command string) executor.Outcome {
	t.Helper()
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "t", Workspace: r.ws, Backend: landlock.Name, Profile: executor.ProfileMinimal,
		Policy: executor.SnapshotRef{PolicyID: r.snap.PolicyID, Version: r.snap.Version, Digest: r.snap.Digest}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.ex.Execute(ctx, executor.ExecutionRequest{RequestID: "r", Action: "bash", Arguments: map[string]any{"command": command}, Scope: ec.Scope}, ec)
}

// ranOK is the result of a bash outcome that ran; it fails the test when
// the command did not run at all (the attack then proves nothing).
func ranOK(t *testing.T, out executor.Outcome) map[string]any {
	t.Helper()
	return result(t, out)
}

// TestAttackDenyAbsentAtSpawn: filesystem.deny used to hold only for
// paths that existed when the process started: planFor passed the sandbox
// only the existing paths a deny pattern matched, so under a write grant
// the contained process created a denied path, wrote it and read it back,
// for a literal pattern (".env") and for "secrets/**" alike, in any case
// ("SECRETS/..." is denied by the case-folding engine too). Now planFor
// also passes the absent literal prefix (ws/secrets, ws/.env) and the
// sandbox carves it out of the workspace's grant: nothing can be created
// directly in the workspace, under any name, while a directory that exists
// stays writable.
func TestAttackDenyAbsentAtSpawn(t *testing.T) {
	r := newAtkRig(t, `	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["**"], deny: ["secrets/**", ".env"]}
	network: {mode: "deny"}
	subprocess: {mode: "allowlist", allow: ["sh *"], shell: "forbid"}`, nil)
	res := ranOK(t, r.bash(t, "sh -c 'mkdir secrets; echo planted > secrets/key; cat secrets/key; echo X=1 > .env; cat .env; mkdir SECRETS; echo planted > SECRETS/key; cat SECRETS/key; echo ok > out/control; cat out/control'"))
	for _, p := range []string{"secrets", ".env", "SECRETS"} {
		if exists(filepath.Join(r.ws, p)) {
			t.Errorf("the contained process created the denied path %s (%+v)", p, res)
		}
	}
	s, _ := res["stdout"].(string)
	if strings.Contains(s, "planted") || strings.Contains(s, "X=1") {
		t.Errorf("the contained process read back what it wrote to denied paths: %q", s)
	}
	if s != "ok\n" {
		t.Errorf("the control write in an existing directory failed: %+v", res)
	}
}

// TestAttackChmodOutsideWriteRoots: Landlock does not restrict chmod or
// utime, and the contained process runs as uid 0 (mapped to polc's root),
// so it owns every root-owned file on the host: before the fix it made a
// root-owned file outside every write root set-uid and world-writable and
// reset its times, a host-wide privilege escalation for whoever runs the
// file later, outside the sandbox. Now every contained process has a
// private mount namespace in which everything outside the write roots is
// read-only: both fail with EROFS, while chmod inside the write root
// still works.
func TestAttackChmodOutsideWriteRoots(t *testing.T) {
	r := newAtkRig(t, `	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	network: {mode: "deny"}
	subprocess: {mode: "allowlist", allow: ["sh *"], shell: "forbid"}`, nil)
	target := filepath.Join(r.outside, "file")
	own := filepath.Join(r.ws, "out", "own")
	os.WriteFile(own, []byte("own"), 0o644)
	res := ranOK(t, r.bash(t, "sh -c 'chmod 4777 "+target+"; touch -d 2000-01-01 "+target+"; chmod 0600 out/own'"))
	fi, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&(os.ModeSetuid|0o002) != 0 {
		t.Errorf("a file outside the write roots was made %v by the contained process", fi.Mode())
	}
	if fi.ModTime().Year() == 2000 {
		t.Errorf("a file outside the write roots had its time set by the contained process")
	}
	if s, _ := res["stderr"].(string); !strings.Contains(s, "Read-only file system") {
		t.Errorf("not refused by the read-only mount: %+v", res)
	}
	if fi, err := os.Stat(own); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("chmod inside the write root did not take: %v %v", fi.Mode(), err)
	}
}

// TestAttackPrivateUnixSocketReachable: a pathname unix socket that only
// its owner (root, mode 0600) may use, outside every grant, as polc serve
// makes its API socket ("its permissions are the access control"). The
// contained process is uid 0 of the socket's owner, Landlock ABI 7 does
// not check connect(2) on a pathname socket, and a network-deny namespace
// does not cover unix sockets; the socket's path need not be guessed:
// /proc/<pid>/net/unix of any host process lists every bound socket of
// the host network namespace and is readable from inside the sandbox.
// Before the fix the process reached the API; now the launcher's seccomp
// filter refuses creating the socket (before ABI 9; from ABI 9 Landlock
// refuses the connect), so the script finds the socket and fails.
func TestAttackPrivateUnixSocketReachable(t *testing.T) {
	r := newAtkRig(t, `	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	network: {mode: "deny"}
	subprocess: {mode: "allowlist", allow: ["sh *", "python3 *"], shell: "forbid"}`, nil)
	sock := filepath.Join(r.outside, "private", "api.sock")
	os.MkdirAll(filepath.Dir(sock), 0o700)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o600)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprint(w, "reached-private-api")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	// The script finds the socket in the host's /proc/<ppid>/net/unix by
	// its file name, as it would polc serve's.
	script := `import os, socket
for line in open("/proc/%d/net/unix" % os.getppid()):
    f = line.split()
    if len(f) >= 8 and f[7].endswith("/api.sock"):
        s = socket.socket(socket.AF_UNIX)
        s.connect(f[7])
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        print(s.recv(4096).decode())
`
	os.WriteFile(filepath.Join(r.ws, "find.py"), []byte(script), 0o644)
	res := ranOK(t, r.bash(t, "python3 find.py"))
	if s, _ := res["stdout"].(string); strings.Contains(s, "reached-private-api") {
		t.Errorf("the contained process (network deny) reached a 0600 root unix socket outside its grants: %q", s)
	}
	if s, _ := res["stderr"].(string); !strings.Contains(s, "PermissionError") {
		t.Errorf("the script did not fail on the socket (did it find it?): %+v", res)
	}
}

// TestAttackCrossCallEgressProxy: the egress proxy of an allowlisted call
// listens on a unix socket (dir/proxy.sock, a 0700 root directory) for the
// call's whole duration. Another contained call whose policy denies the
// network finds it in /proc/<ppid>/net/unix and talks to it directly: the
// proxy admits by the OTHER call's policy, so before the fix the
// network-deny call reached the host that only the other policy lists.
// Two policies run in one polc process here (two executors, as an
// embedding program or a second session's polc on the same host would
// have them). Now the seccomp filter (Landlock from ABI 9) refuses the
// unix socket: the script finds the proxy's socket and gets EACCES.
func TestAttackCrossCallEgressProxy(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { fmt.Fprint(w, "reached-by-proxy") }))
	t.Cleanup(target.Close)
	hostport := strings.TrimPrefix(target.URL, "http://")
	wide := newAtkRig(t, fmt.Sprintf(`	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	network: {mode: "allowlist", allow: [%q]}
	subprocess: {mode: "allowlist", allow: ["sleep *"], shell: "forbid"}`, hostport), nil)
	narrow := newAtkRig(t, `	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	network: {mode: "deny"}
	subprocess: {mode: "allowlist", allow: ["python3 *"], shell: "forbid"}`, nil)
	// The destination is in a file, not in the command: the narrow
	// policy's request names no host.
	os.WriteFile(filepath.Join(narrow.ws, "dest"), []byte(hostport), 0o644)
	script := `import os, socket, time
dest = open("dest").read().strip()
for _ in range(100):
    for line in open("/proc/%d/net/unix" % os.getppid()):
        f = line.split()
        if len(f) >= 8 and f[7].endswith("/proxy.sock"):
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(f[7])
                s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (dest, dest)).encode())
                print(s.recv(4096).decode())
                raise SystemExit(0)
            except OSError as e:
                print("error", f[7], e)
    time.sleep(0.1)
`
	os.WriteFile(filepath.Join(narrow.ws, "steal.py"), []byte(script), 0o644)
	var wg sync.WaitGroup
	wg.Go(func() { wide.bash(t, "sleep 6") })
	time.Sleep(300 * time.Millisecond)
	res := ranOK(t, narrow.bash(t, "python3 steal.py"))
	wg.Wait()
	s, _ := res["stdout"].(string)
	if strings.Contains(s, "reached-by-proxy") {
		t.Errorf("a network-deny call reached a host through another call's egress proxy: %q", s)
	}
	if !strings.Contains(s, "proxy.sock [Errno 13] Permission denied") {
		t.Errorf("the script did not find the other call's proxy socket and fail on it: %q", s)
	}
}

// TestAttackExecuteRootsNoBoundary documents a limit rather than an
// escape that is fixed: Landlock checks execve, not mmap, so the dynamic
// loader (a system path) runs a program the process wrote under its write
// root, which has no execute right (running it directly is refused). The
// docs (docs/containment.md "What Landlock cannot express", the sandbox
// package's) say that execute roots are no boundary; if this starts
// failing because the loader route closed, update them.
func TestAttackExecuteRootsNoBoundary(t *testing.T) {
	loader := "/lib64/ld-linux-x86-64.so.2"
	if !exists(loader) {
		t.Skip("no x86-64 loader")
	}
	r := newAtkRig(t, `	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	network: {mode: "deny"}
	subprocess: {mode: "allowlist", allow: ["sh *"], shell: "forbid"}`, nil)
	res := ranOK(t, r.bash(t, "sh -c 'cp /usr/bin/echo out/prog; out/prog direct; "+loader+" out/prog ran-from-write-root'"))
	s, _ := res["stdout"].(string)
	if strings.Contains(s, "direct") {
		t.Fatalf("out/prog ran directly: the write root has an execute right (%q)", s)
	}
	if !strings.Contains(s, "ran-from-write-root") {
		t.Errorf("the loader no longer runs a file from a write root: the docs saying execute roots are no boundary are out of date (%+v)", res)
	}
}

// TestAttackGrantFollowsSwappedSymlink: planFor checks that a granted
// path is no symbolic link (resolver.walk, Lstat) when the call starts,
// but the launcher opens the path again when the process starts, and
// used to follow links then (addPath opened without O_NOFOLLOW; with
// denies, addGrant ran EvalSymlinks first). A contained process with a
// write root that holds a path another pattern grants (here read
// "out/data" under write "out/**") swaps that path between a regular file
// and a link to any file on the host; a concurrent call of the same policy
// whose launcher opened it as a link got a Landlock rule on the link's
// target and read a file no pattern grants. Now the launcher opens every
// Spec path with RESOLVE_NO_SYMLINKS and refuses a link: such a call fails
// (containment) instead. This is the racing variant; the sandbox's
// TestGrantThroughSymlinkRefused swaps before the spawn, deterministically.
func TestAttackGrantFollowsSwappedSymlink(t *testing.T) {
	r := newAtkRig(t, `	actions: allow: ["bash"]
	filesystem: {read: ["out/data", "*.py"], write: ["out/**"]}
	network: {mode: "deny"}
	subprocess: {mode: "allowlist", allow: ["python3 *", "cat *"], shell: "forbid"}`, nil)
	secret := filepath.Join(r.outside, "file")
	os.WriteFile(filepath.Join(r.ws, "out", "data"), []byte("data"), 0o644)
	racer := fmt.Sprintf(`import os, time
end = time.time() + 20
while time.time() < end:
    try:
        os.symlink(%q, "out/l"); os.rename("out/l", "out/data")
        open("out/f", "w").close(); os.rename("out/f", "out/data")
    except OSError:
        pass
`, secret)
	os.WriteFile(filepath.Join(r.ws, "race.py"), []byte(racer), 0o644)
	done := make(chan struct{})
	go func() { defer close(done); o := r.bash(t, "python3 race.py"); t.Logf("racer: %T %v", o, o) }()
	defer func() { <-done }()
	time.Sleep(500 * time.Millisecond)
	for i := 0; ; i++ {
		select {
		case <-done:
			t.Logf("%d attempts", i)
			return // the race was never won while the racer ran
		default:
		}
		out := r.bash(t, "cat "+secret)
		if s, ok := out.(*executor.Succeeded); ok && strings.Contains(fmt.Sprint(s.Result.(map[string]any)["stdout"]), "outside") {
			t.Errorf("attempt %d: a file no pattern grants was read after the granted path was swapped for a link to it", i)
			return
		}
	}
}
