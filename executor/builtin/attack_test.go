package builtin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/snapshot"
)

// attackPolicy is a tight allowlist: echo, cat and ls with shell allowed,
// reads anywhere in the workspace but secrets/, writes only to out/, no
// network unless extra says otherwise. more are further subprocess.allow patterns (CUE list
// elements, each after a comma); extra is CUE added to the policy's body.
const attackPolicy = `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash", "read_file", "write_file", "edit_file", "http_get"]
	filesystem: {read: ["**"], write: ["out/**"], deny: ["secrets/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "ls *"%s], shell: "allow"}
	%s
}
`

// attackRig compiles attackPolicy with extra, lays out a workspace (out/,
// secrets/key) and returns a function that runs one request through
// Execute with the real built-in callables.
func attackRig(t *testing.T, more, extra string) (ws string, run func(action string, args map[string]any) executor.Outcome) {
	t.Helper()
	if !strings.Contains(extra, "network:") {
		extra += "\n\tnetwork: mode: \"deny\""
	}
	return attackRigCUE(t, fmt.Sprintf(attackPolicy, more, extra))
}

// attackRigCUE is attackRig for the policy file src.
func attackRigCUE(t *testing.T, src string) (ws string, run func(action string, args map[string]any) executor.Outcome) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	snap := res.Snapshots[0]
	ws = filepath.Join(dir, "ws")
	for _, d := range []string{"out", "secrets"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "secrets", "key"), []byte("TOPSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{}); err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}})
	if err != nil {
		t.Fatal(err)
	}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "t", Workspace: ws, Backend: executor.InProcessBackendName, Profile: executor.ProfileMinimal,
		Policy: executor.SnapshotRefOf(snap)}
	n := 0
	return ws, func(action string, args map[string]any) executor.Outcome {
		n++
		return e.Execute(context.Background(), executor.ExecutionRequest{RequestID: fmt.Sprintf("r%d", n), Action: action,
			Arguments: args, Scope: ec.Scope, Timeout: 10 * time.Second}, ec)
	}
}

// TestAttackBashpidAppendRunsCode: BASHPID has bash's integer attribute,
// so "BASHPID+=VALUE" evaluates OLD+VALUE as arithmetic, and an array
// subscript in the value runs its $(…). The normalizer refuses such values
// only for RANDOM, SRANDOM, OPTIND, HISTCMD and PS4 (specialVars), so with
// an environment grant for BASHPID (a name that chooses nothing a program
// runs, and no env_runs_code warning), "BASHPID+='a[$(touch pwned)]'" is
// judged as an assignment alone, and bash runs touch, which no rule allows.
func TestAttackBashpidAppendRunsCode(t *testing.T) {
	ws, run := attackRig(t, "", `environment: inject: ["BASHPID"]`)
	out := run("bash", map[string]any{"command": "BASHPID+='a[$(touch pwned)]'"})
	if _, err := os.Stat(filepath.Join(ws, "pwned")); err == nil {
		t.Errorf("bash ran touch, which the policy does not allow (outcome %s %s)", out.Kind(), out.Base().ReasonCode)
	}
	if out.Kind() != executor.KindDenied {
		t.Errorf("outcome %s, want denied", out.Kind())
	}
}

// TestAttackHistfilesizeTruncatesAnyFile: assigning HISTFILESIZE makes
// bash (sv_histsize) truncate the file HISTFILE names to that many lines,
// history on or not. The normalizer sees two environment facets and no
// path: with an environment grant for HIST* (names that choose nothing a
// program runs, and no env_runs_code warning), "HISTFILE=secrets/key
// HISTFILESIZE=0 echo; echo" empties secrets/key, which
// filesystem.deny covers, without any redirection.
func TestAttackHistfilesizeTruncatesAnyFile(t *testing.T) {
	ws, run := attackRig(t, "", `environment: inject: ["HIST*"]`)
	out := run("bash", map[string]any{"command": "HISTFILE=secrets/key HISTFILESIZE=0 echo; echo"})
	if b, err := os.ReadFile(filepath.Join(ws, "secrets", "key")); err != nil || string(b) != "TOPSECRET\n" {
		t.Errorf("secrets/key is now %q (%v): bash wrote a file filesystem.deny covers (outcome %s %s)", b, err, out.Kind(), out.Base().ReasonCode)
	}
}

// TestAttackDefaultAssignMakesArrayUnseen: bash 5.2's declare (typeset,
// local -I, …) evaluates "NAME='(…)'" as a compound array assignment when
// NAME is already an array, running the $(…) inside the quotes. The
// normalizer refuses that only for names it knows to be arrays
// (bashArrays, NAME=(…), NAME[i]=…, read -a, mapfile, {NAME[i]}>, coproc,
// declare -a), but "${NAME[0]=v}" (or ":=") also assigns an element and
// makes NAME an array, and its ParamExp case records only the assignment.
// With an environment grant for one ordinary name, the commands below
// run touch (no rule allows it) and write secrets/w (filesystem.deny),
// judged as two echos.
func TestAttackDefaultAssignMakesArrayUnseen(t *testing.T) {
	ws, run := attackRig(t, "", `environment: inject: ["NODE_ENV"]`)
	for _, cmd := range []string{
		"echo ${NODE_ENV[0]=production}; declare NODE_ENV='($(touch pwned) x)'",
		"echo ${NODE_ENV[0]:=production}; declare NODE_ENV='($(echo x > secrets/w) x)'",
	} {
		out := run("bash", map[string]any{"command": cmd})
		if out.Kind() != executor.KindDenied {
			t.Errorf("%q: %s, want denied", cmd, out.Kind())
		}
	}
	for _, f := range []string{"pwned", "secrets/w"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err == nil {
			t.Errorf("%s exists: bash ran a command substitution the policy never judged", f)
		}
	}
}

// TestAttackPS4OctalEscape: the normalizer refuses a PS4 value holding
// "$" or "`" (specialValueSafe), because bash expands PS4, $(…) included,
// for every command traced under set -x. But bash first decodes PS4's
// prompt escapes, and "\044" is "$" (and "\140" a backquote): the value
// '\044(touch pwned) ' passes the check and bash runs touch.
func TestAttackPS4OctalEscape(t *testing.T) {
	ws, run := attackRig(t, `, "set *"`, `environment: inject: ["PS4"]`)
	out := run("bash", map[string]any{"command": `PS4='\044(touch pwned) '; set -x; echo`})
	if _, err := os.Stat(filepath.Join(ws, "pwned")); err == nil {
		t.Errorf("bash ran touch through PS4 (outcome %s %s)", out.Kind(), out.Base().ReasonCode)
	}
}

// TestAttackTimeDashDashRunsDenied: through Execute and the real bash,
// "time -- rm victim" is judged as the command ["--", "rm", "victim"]
// (executor TestAttackTimeDashDash: bash reads "--" after time as the
// end of its options), so a policy allowing commands but denying "rm *"
// lets it run rm: the file is gone.
func TestAttackTimeDashDashRunsDenied(t *testing.T) {
	ws, run := attackRigCUE(t, `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	subprocess: {mode: "allow", deny: ["rm *", "/bin/rm *", "/usr/bin/rm *"], shell: "allow"}
}
`)
	victim := filepath.Join(ws, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := run("bash", map[string]any{"command": "rm victim"}); out.Kind() != executor.KindDenied {
		t.Fatalf("rm victim: %s, want denied", out.Kind())
	}
	out := run("bash", map[string]any{"command": "time -- rm victim"})
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("time -- rm victim (%s) removed the file a deny rule protects: %v", out.Kind(), err)
	}
}
