package harness_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/harness/internal/mockapi"
)

func realPlan(t *testing.T, provider, src string) *harness.Plan {
	t.Helper()
	p := probe(t, provider)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "ws"), 0o755)
	s := specFrom(t, dir, src)
	_, rep, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.All() {
		if r.Status != harness.Enforced {
			s.AllowDegraded = append(s.AllowDegraded, r.Capability)
		}
	}
	plan, _, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func fixedEnv(k string) (string, bool) {
	if k == "POLC_TEST_MODEL_KEY" {
		return "sk-ant-test-secret-0123456789", true
	}
	return "", false
}

// TestClaudeAttestationMismatchStops: a plan whose expected init echo
// differs from what Claude reports is stopped at system/init, before the
// model is asked anything.
func TestClaudeAttestationMismatchStops(t *testing.T) {
	t.Parallel()
	mock := mockapi.Start(t, mockapi.Script{Tool: "Bash", Input: map[string]any{"command": "echo hi"}})
	plan := realPlan(t, "claude-code", fmt.Sprintf(`package h
harnesses: h: {
	provider: "claude-code"
	model: "claude-mock"
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["read_file"]
	environment: secrets: ANTHROPIC_API_KEY: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "60s"
}
`, mock.URL))
	plan.Attestation.Tools = []string{"Read", "Write"} // what a tampered or misread plan would expect
	if err := plan.Seal(); err != nil {
		t.Fatal(err)
	}
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv})
	var ae *harness.AttestationError
	if !errors.As(err, &ae) || res.Stopped != "attestation" {
		t.Fatalf("Spawn = %v, stopped %q", err, res.Stopped)
	}
	if !strings.Contains(err.Error(), "tools are [Read]") {
		t.Errorf("error = %v", err)
	}
	for _, r := range mock.Requests() {
		if strings.HasSuffix(r.Path, "/messages") && strings.Contains(string(r.Body), `"stream":true`) {
			t.Errorf("the model was asked after a failed attestation")
		}
	}
}

// TestClaudeShellSeesSecretRedacted shows why polc reports
// env.secret_isolation/v1 unsupported for Claude with a shell: the model
// key reaches Bash. The observation redacts it.
func TestClaudeShellSeesSecretRedacted(t *testing.T) {
	t.Parallel()
	mock := mockapi.Start(t, mockapi.Script{Tool: "Bash", Input: map[string]any{"command": "echo key=$ANTHROPIC_API_KEY", "description": "x"}})
	plan := realPlan(t, "claude-code", fmt.Sprintf(`package h
harnesses: h: {
	provider: "claude-code"
	model: "claude-mock"
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["bash"]
	environment: secrets: ANTHROPIC_API_KEY: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "60s"
}
`, mock.URL))
	if c, _ := plan.CapabilityReport.Lookup(harness.CapEnvSecrets); c.Status != harness.Unsupported {
		t.Fatalf("env.secret_isolation = %s", c.Status)
	}
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range res.Observations {
		if strings.Contains(o.Text, "sk-ant-test-secret") {
			t.Fatalf("secret value in an observation: %+v", o)
		}
		if o.Kind == harness.ObsToolResult && strings.Contains(o.Text, "key=[redacted:ANTHROPIC_API_KEY]") {
			found = true
		}
	}
	if !found {
		t.Errorf("the shell did not see the (redacted) key: %+v", res.Observations)
	}
}

// TestWatchdogKillsRetryingProvider: Codex waits for the network forever
// when the model API is unreachable; the wall clock stops it.
func TestWatchdogKillsRetryingProvider(t *testing.T) {
	t.Parallel()
	plan := realPlan(t, "codex", `package h
harnesses: h: {
	provider: "codex"
	model: "mock-model"
	endpoint: base_url: "http://127.0.0.1:9"
	workspace: root: "ws"
	environment: secrets: OPENAI_API_KEY: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "4s"
}
`)
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stopped != "wall_clock" {
		t.Fatalf("stopped = %q, exit %d, observations %+v", res.Stopped, res.ExitCode, res.Observations)
	}
}

// TestPreflightRejectsBadSettings: Claude's own validator reports a rule
// Claude would silently drop in -p mode.
func TestPreflightRejectsBadSettings(t *testing.T) {
	t.Parallel()
	plan := realPlan(t, "claude-code", `package h
harnesses: h: {provider: "claude-code", workspace: root: "ws", tools: allow: ["bash"]}
`)
	for i, f := range plan.Preflight[0].Files {
		plan.Preflight[0].Files[i].Content = strings.Replace(f.Content, `"Bash"`, `"bash(rm *)"`, 1)
	}
	err := harness.Preflight(context.Background(), plan)
	var pe *harness.PreflightError
	if !errors.As(err, &pe) || !strings.Contains(pe.Output, "uppercase") {
		t.Fatalf("Preflight = %v", err)
	}
}
