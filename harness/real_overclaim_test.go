package harness_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/harness/internal/mockapi"
)

// shellInput is the input of provider c's shell tool for command.
func shellInput(c realCase, command string) map[string]any {
	in := map[string]any{}
	for k, v := range c.input {
		in[k] = v
	}
	for _, k := range []string{"command", "cmd"} {
		if _, ok := in[k]; ok {
			in[k] = command
		}
	}
	return in
}

// sawText reports whether s appears in an observation's text or input, or
// in a request the provider sent the model (a tool result travels there).
func sawText(res *harness.RunResult, mock *mockapi.Server, s string) bool {
	for _, o := range res.Observations {
		if strings.Contains(o.Text, s) || strings.Contains(string(o.Input), s) {
			return true
		}
	}
	for _, r := range mock.Requests() {
		if strings.Contains(string(r.Body), s) {
			return true
		}
	}
	return false
}

// TestRealSubprocessAllowOutside runs each real CLI with a plan whose shell
// may run "touch *" and "printenv *" only, and a mock model that asks for
// three commands: "cat notes.txt" and "id", outside the list, then an
// allowed printenv of HOME (the run directory's) and of a variable polc's
// own environment holds but the plan does not allowlist. HOME must be
// printed (otherwise the shell did not work and the rest proves nothing). Where subprocess.allow/v1 is enforced, neither
// the file's content nor id's output may reach the model or the
// observations; where env.allowlist/v1 is enforced (always), the variable's
// value may not. Claude Code runs cat and id without any allow rule (its
// classifier takes them for read-only), which is why it reports
// subprocess.allow/v1 degraded with a shell; the Claude case holds that
// reason to what the CLI does.
func TestRealSubprocessAllowOutside(t *testing.T) {
	const secret = "NOTES-CONTENT-5150"
	const leak = "leaked-value-8086"
	for _, c := range realCases {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			mock := mockapi.Start(t, mockapi.Script{Calls: []mockapi.Call{
				{Tool: c.tool, Input: shellInput(c, "cat notes.txt")},
				{Tool: c.tool, Input: shellInput(c, "id")},
				{Tool: c.tool, Input: shellInput(c, "printenv POLC_TEST_LEAK HOME")},
			}, Text: "Done."})
			plan := realPlan(t, c.provider, fmt.Sprintf(`package h
harnesses: h: {
	provider: %q
	model: %q
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["bash"]
	subprocess: allow: ["touch *", "printenv *"]
	environment: secrets: %s: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "120s"
}
`, c.provider, c.model, mock.URL, c.keyVar))
			if err := os.WriteFile(filepath.Join(plan.Dir, "notes.txt"), []byte(secret+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "look around", Getenv: func(k string) (string, bool) {
				if k == "POLC_TEST_LEAK" {
					return leak, true
				}
				return fixedEnv(k)
			}})
			if err != nil {
				t.Fatalf("spawn: %v", err)
			}
			t.Logf("observations %+v\nstderr %s", res.Observations, res.Stderr)
			if !sawText(res, mock, "polc-run-") {
				t.Fatalf("the allowed printenv did not run: the shell did not work, so nothing was shown")
			}
			allow, _ := plan.CapabilityReport.Lookup(harness.CapSubprocessAllow)
			ran := sawText(res, mock, secret) || sawText(res, mock, "uid=")
			switch {
			case ran && allow.Status == harness.Enforced:
				t.Errorf("subprocess.allow/v1 enforced, but a command outside the allow list ran")
			case c.provider == "claude-code" && (!ran || !strings.Contains(allow.Reason, "read-only")):
				t.Errorf("Claude Code: subprocess.allow/v1 %s (%s); cat and id outside the list ran: %v. The reason should say why they run, or the row should change", allow.Status, allow.Reason, ran)
			}
			if env, _ := plan.CapabilityReport.Lookup(harness.CapEnvAllowlist); env.Status == harness.Enforced && sawText(res, mock, leak) {
				t.Errorf("env.allowlist/v1 enforced, but a variable the plan does not allowlist reached the shell")
			}
		})
	}
}
