package builtin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"polc.dev/polc/executor"
)

// refusalPolicy is a tight allowlist: echo, cat and ls (and more, CUE list
// elements each after a comma) with shell allowed, reads anywhere in the
// workspace but secrets/, writes only to out/, no network; inject is the
// environment.inject list.
const refusalPolicy = `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["out/**"], deny: ["secrets/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "ls *"%s], shell: "allow"}
	environment: inject: [%s]
	network: mode: "deny"
}
`

// refusalRig is rig (proc_test.go) with a secrets/key in the workspace,
// returning a function running one bash command through Execute.
func refusalRig(t *testing.T, src string) (ws string, run func(command string) executor.Outcome) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws, execute := rig(t, src)
	if err := os.MkdirAll(filepath.Join(ws, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "secrets", "key"), []byte("TOPSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ws, func(command string) executor.Outcome {
		return execute(context.Background(), "bash", map[string]any{"command": command}, 10*time.Second)
	}
}

// deniedAndHarmless runs each command and checks that Execute denies it
// and that none of the files made exists afterwards.
func deniedAndHarmless(t *testing.T, ws string, run func(string) executor.Outcome, cmds []string, made ...string) {
	t.Helper()
	for _, cmd := range cmds {
		out := run(cmd)
		if out.Kind() != executor.KindDenied {
			t.Errorf("%q: %s, want denied", cmd, out.Kind())
		}
		for _, f := range made {
			if _, err := os.Stat(filepath.Join(ws, f)); err == nil {
				t.Errorf("%q made %s: bash ran a command substitution the policy never judged", cmd, f)
				os.RemoveAll(filepath.Join(ws, f))
			}
		}
	}
}

// TestBashDeclareArrayValueRunsNothing: through Execute and the real bash,
// an environment grant for one ordinary name no longer lets "declare
// NAME='(…)'" run the $(…) in it after ${NAME[0]=v} made NAME an array
// (executor TestDeclareRefusesArrayValue).
func TestBashDeclareArrayValueRunsNothing(t *testing.T) {
	ws, run := refusalRig(t, fmt.Sprintf(refusalPolicy, "", `"NODE_ENV"`))
	deniedAndHarmless(t, ws, run, []string{
		"echo ${NODE_ENV[0]=production}; declare NODE_ENV='($(touch pwned) x)'",
		"echo ${NODE_ENV[0]:=production}; declare NODE_ENV='($(echo x > secrets/w) x)'",
	}, "pwned", "secrets/w")
	if out := run("declare NODE_ENV=production; echo"); out.Kind() != executor.KindSucceeded {
		t.Errorf("a plain declare: %s", out.Kind())
	}
}

// TestBashIntegerVarRunsNothing: BASHPID has bash's integer attribute, so
// "BASHPID+='a[$(…)]'" ran the $(…) with only an environment grant for
// BASHPID (executor TestIntegerVarsRefuseCodeValues).
func TestBashIntegerVarRunsNothing(t *testing.T) {
	ws, run := refusalRig(t, fmt.Sprintf(refusalPolicy, "", `"BASHPID", "OPTIND"`))
	deniedAndHarmless(t, ws, run, []string{
		"BASHPID+='a[$(touch pwned)]'",
		"export OPTIND='a[$(touch pwned)]'",
	}, "pwned")
}

// TestBashHistoryFileUntouched: "HISTFILE=secrets/key HISTFILESIZE=0 echo;
// echo" emptied secrets/key, which filesystem.deny covers, with only an
// environment grant for HIST* (executor TestHistoryFileIsNeverTouched).
func TestBashHistoryFileUntouched(t *testing.T) {
	ws, run := refusalRig(t, fmt.Sprintf(refusalPolicy, `, "history *"`, `"HIST*"`))
	for _, cmd := range []string{"HISTFILE=secrets/key HISTFILESIZE=0 echo; echo", "history -w secrets/key; echo"} {
		if out := run(cmd); out.Kind() != executor.KindDenied {
			t.Errorf("%q: %s, want denied", cmd, out.Kind())
		}
		if b, err := os.ReadFile(filepath.Join(ws, "secrets", "key")); err != nil || string(b) != "TOPSECRET\n" {
			t.Fatalf("%q: secrets/key is now %q (%v)", cmd, b, err)
		}
	}
}

// TestBashPromptEscapeRunsNothing: PS4='\044(…)' passed the check for '$'
// and bash decoded it to $(…) under set -x (executor
// TestPromptVarsRefuseEscapes).
func TestBashPromptEscapeRunsNothing(t *testing.T) {
	ws, run := refusalRig(t, fmt.Sprintf(refusalPolicy, `, "set *"`, `"PS4"`))
	deniedAndHarmless(t, ws, run, []string{`PS4='\044(touch pwned) '; set -x; echo`, `PS4='\140touch pwned\140 '; set -x; echo`}, "pwned")
	if out := run(`PS4='+ '; set -x; echo`); out.Kind() != executor.KindSucceeded {
		t.Errorf("PS4='+ ': %s", out.Kind())
	}
}

// TestBashTimeDashDashDenied: "time -- rm victim" was judged as the
// command ["--", "rm", "victim"], so a deny rule for "rm *" let bash run
// rm (executor TestTimeOptionsJudgeTheProgram).
func TestBashTimeDashDashDenied(t *testing.T) {
	ws, run := refusalRig(t, `package p
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
	for _, cmd := range []string{"rm victim", "time -- rm victim", "time -p -- rm victim", "! time -- rm victim"} {
		out := run(cmd)
		if out.Kind() != executor.KindDenied {
			t.Errorf("%q: %s, want denied", cmd, out.Kind())
		}
		if _, err := os.Stat(victim); err != nil {
			t.Fatalf("%q removed the file a deny rule protects: %v", cmd, err)
		}
	}
}
