package landlock_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/executor/landlock"
	"polc.dev/polc/sandbox"
	"polc.dev/polc/snapshot"
)

// keyBytes is the content of the protected signer key of the tests.
const keyBytes = "PRIVATE-KEY-5d1c9e"

// protectRig is a directory whose whole subtree the policy grants, read
// and write (the absolute pattern dir/**), holding a workspace and a
// session's files beside it: a signer key, an evidence directory, the
// place of a certificate not written yet, and a link to the key's
// directory.
type protectRig struct {
	dir, ws, key, ev, cert, link string
	snap                         *snapshot.Snapshot
}

func newProtectRig(t *testing.T) *protectRig {
	t.Helper()
	if os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
		if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
			t.Skipf("the kernel cannot hold a process here: %+v", f)
		}
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &protectRig{dir: dir, ws: filepath.Join(dir, "ws"), key: filepath.Join(dir, "keys", "k.key"),
		ev: filepath.Join(dir, "ev"), cert: filepath.Join(dir, "cert.json"), link: filepath.Join(dir, "link")}
	for _, d := range []string{r.ws, r.ev, filepath.Dir(r.key)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(r.key, []byte(keyBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.ev, "chain.jsonl"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(r.key), r.link); err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf(`package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: [%q], write: [%q]}
	network: {mode: "deny"}
	subprocess: {mode: "allowlist", allow: ["cat *", "echo *", "sh *", "/usr/bin/python3 *"], shell: "allow"}
}
`, dir+"/**", dir+"/**")
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	r.snap = res.Snapshots[0]
	return r
}

// bash runs command under the landlock backend protecting protect.
func (r *protectRig) bash(t *testing.T, protect []string, command string) executor.Outcome {
	t.Helper()
	return r.bashWith(t, &landlock.Backend{TempDir: r.dir, Protect: protect}, command)
}

// bashWith runs command under the landlock backend b.
func (r *protectRig) bashWith(t *testing.T, b *landlock.Backend, command string) executor.Outcome {
	t.Helper()
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{Workspace: r.ws}); err != nil {
		t.Fatal(err)
	}
	ex, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{r.snap},
		Backends: []executor.EffectBackend{b}})
	if err != nil {
		t.Fatal(err)
	}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "t", Workspace: r.ws, Backend: landlock.Name, Profile: executor.ProfileMinimal,
		Policy: executor.SnapshotRef{PolicyID: r.snap.PolicyID, Version: r.snap.Version, Digest: r.snap.Digest}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ex.Execute(ctx, executor.ExecutionRequest{RequestID: "r", Action: "bash", Arguments: map[string]any{"command": command}, Scope: ec.Scope}, ec)
}

// TestProtectHoldsWhateverThePolicyGrants: the policy grants the whole
// directory holding the session's files, so without Protect each attempt
// succeeds (the attempts are real); with the key, the evidence directory
// and the absent certificate protected, the kernel refuses each — an
// allowed program reading the key (cat, python3, through a link to its
// directory), a bash redirection and the process's own write into the
// evidence directory, and writing the certificate before it exists — and
// the key's bytes are in no outcome, no planted file is left.
func TestProtectHoldsWhateverThePolicyGrants(t *testing.T) {
	r := newProtectRig(t)
	type attempt struct {
		name, command string
		file          string // the file the attempt plants ("" for a read)
	}
	attempts := []attempt{
		{"cat the key", "cat " + r.key, ""},
		{"cat the key through a link to its directory", "cat " + r.link + "/k.key", ""},
		{"the key as a redirection's input", "cat < " + r.key, ""},
		{"a redirection into the evidence directory", "echo planted > " + r.ev + "/planted.jsonl", filepath.Join(r.ev, "planted.jsonl")},
		{"the process writes into the evidence directory", "sh -c 'echo planted > " + r.ev + "/own.jsonl'", filepath.Join(r.ev, "own.jsonl")},
		{"the process appends to the chain", "sh -c 'echo forged >> " + r.ev + "/chain.jsonl'", ""},
		{"the certificate before it exists", "sh -c 'echo forged > " + r.cert + "'", r.cert},
		{"a redirection to the certificate", "echo forged > " + r.cert, r.cert},
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		attempts = append(attempts, attempt{"python3 reads the key", "/usr/bin/python3 -c 'print(open(\"" + r.key + "\").read())'", ""})
	} else {
		t.Log("no /usr/bin/python3: its attempt is skipped")
	}
	happened := func(a attempt, out executor.Outcome) bool {
		if strings.Contains(fmt.Sprintf("%+v", out), keyBytes) {
			return true
		}
		if a.file != "" {
			_, err := os.Lstat(a.file)
			return err == nil
		}
		b, _ := os.ReadFile(filepath.Join(r.ev, "chain.jsonl"))
		return strings.Contains(string(b), "forged")
	}
	// Control: the policy's grant lets each attempt through.
	for _, a := range attempts {
		out := r.bash(t, nil, a.command)
		if !happened(a, out) {
			t.Errorf("%s: without Protect the attempt did nothing, so it proves nothing: %+v", a.name, out)
		}
		os.Remove(a.file)
		os.WriteFile(filepath.Join(r.ev, "chain.jsonl"), []byte("{}\n"), 0o644)
	}
	protect := []string{r.key, r.ev, r.cert}
	for _, a := range attempts {
		out := r.bash(t, protect, a.command)
		if happened(a, out) {
			t.Errorf("%s: the protected path was reached: %+v", a.name, out)
		}
		if _, ok := out.(*executor.Succeeded); ok {
			t.Errorf("%s: succeeded: %+v", a.name, out)
		}
	}
	// What is not protected stays granted.
	out := r.bash(t, protect, "sh -c 'echo ok > "+r.dir+"/ws/own.txt; cat "+r.dir+"/ws/own.txt'")
	if s, ok := out.(*executor.Succeeded); !ok || s.Result.(map[string]any)["stdout"] != "ok\n" {
		t.Errorf("the rest of the grant: %+v", out)
	}
}

// TestProtectThroughALink: a protected path named through a symbolic link
// (the link to the key's directory) protects the file the link leads to.
func TestProtectThroughALink(t *testing.T) {
	r := newProtectRig(t)
	out := r.bash(t, []string{r.link + "/k.key"}, "cat "+r.key)
	if strings.Contains(fmt.Sprintf("%+v", out), keyBytes) {
		t.Fatalf("the key was read: %+v", out)
	}
	if _, ok := out.(*executor.Failed); !ok {
		t.Fatalf("want the command to fail: %+v", out)
	}
}

// TestProtectRelativeRefused: a relative protected path contains nothing
// it could name: every call is refused, none runs.
func TestProtectRelativeRefused(t *testing.T) {
	r := newProtectRig(t)
	out := r.bash(t, []string{"keys/k.key"}, "sh -c 'echo ran > "+r.ws+"/ran'")
	if _, ok := out.(*executor.Failed); !ok || !strings.Contains(fmt.Sprintf("%+v", out), "containment_failed") {
		t.Errorf("want containment_failed: %+v", out)
	}
	if _, err := os.Stat(filepath.Join(r.ws, "ran")); err == nil {
		t.Error("the command ran")
	}
}

// TestProtectWrites: the executable and the launcher beside it, under a
// write grant of the call, can be neither changed nor created (each
// attempt succeeds without them protected); an executable with several
// hard links that no write grant reaches leaves spawning alone, where
// protecting it whole (Protect) refuses every spawn.
func TestProtectWrites(t *testing.T) {
	r := newProtectRig(t)
	bin := filepath.Join(r.dir, "bin")
	exe, launcher := filepath.Join(bin, "polc"), filepath.Join(bin, "polc-sandbox")
	os.MkdirAll(bin, 0o755)
	reset := func() {
		os.Remove(launcher)
		os.WriteFile(exe, []byte("program"), 0o755)
	}
	attempts := []struct{ name, command string }{
		{"replace the executable", "sh -c 'echo evil > " + exe + "'"},
		{"append to the executable", "sh -c 'echo evil >> " + exe + "'"},
		{"plant a launcher", "sh -c 'echo evil > " + launcher + "'"},
	}
	changed := func() bool {
		b, _ := os.ReadFile(exe)
		_, err := os.Lstat(launcher)
		return string(b) != "program" || err == nil
	}
	for _, a := range attempts {
		reset()
		if out := r.bashWith(t, &landlock.Backend{TempDir: r.dir}, a.command); !changed() {
			t.Errorf("%s: unprotected, the attempt did nothing, so it proves nothing: %+v", a.name, out)
		}
		reset()
		out := r.bashWith(t, &landlock.Backend{TempDir: r.dir, ProtectWrites: []string{exe, launcher}}, a.command)
		if changed() {
			t.Errorf("%s: protected, it happened: %+v", a.name, out)
		}
	}
	// Outside every grant, with hard links.
	other, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(other, "polc")
	os.WriteFile(linked, []byte("program"), 0o755)
	if err := os.Link(linked, filepath.Join(other, "polc-2")); err != nil {
		t.Fatal(err)
	}
	out := r.bashWith(t, &landlock.Backend{TempDir: r.dir, ProtectWrites: []string{linked, filepath.Join(other, "polc-sandbox")}}, "echo ok")
	if s, ok := out.(*executor.Succeeded); !ok || s.Result.(map[string]any)["stdout"] != "ok\n" {
		t.Errorf("a hard-linked executable outside the write grants refused the spawn: %+v", out)
	}
	out = r.bashWith(t, &landlock.Backend{TempDir: r.dir, Protect: []string{linked}}, "echo ok")
	if _, ok := out.(*executor.Succeeded); ok {
		t.Errorf("control: denying a file with two hard links whole should refuse the spawn: %+v", out)
	}
}
