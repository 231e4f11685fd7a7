package harness_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/harness/internal/mockapi"
)

// TestRealSubprocessDeny runs each real CLI with a plan whose shell may
// run "touch *" but must never run a command matching the deny rule
// "touch *", and a mock model that asks it to create a file in the
// workspace. Where the capability report says subprocess.deny/v1 is
// enforced, or degraded (every provider's degradation is about commands
// run indirectly, by an interpreter or a script, never about a denied
// command asked for directly), the file must not exist afterwards. The control run, the same
// plan without the deny rule, must create it: otherwise the deny run
// would pass for a reason other than the rule (the request not reaching
// the shell, a sandbox refusing writes, a provider's own refusal — Codex
// refuses "rm -f" by itself, so the command is a harmless touch).
//
// Each provider runs a second time under polc's sandbox (subtest polc),
// where its own sandbox is off (Codex runs commands with
// danger-full-access): the provider's command rules must hold there too.
func TestRealSubprocessDeny(t *testing.T) {
	for _, c := range realCases {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			touchDeny(t, c, "")
			t.Run("polc", func(t *testing.T) { touchDeny(t, c, `sandbox: "polc"`) })
		})
	}
}

// touchDeny runs the control and the deny run of TestRealSubprocessDeny;
// extra is a line added to the spec.
func touchDeny(t *testing.T, c realCase, extra string) {
	for _, deny := range []bool{false, true} {
		status, ran, obs := runTouch(t, c, deny, extra)
		switch {
		case !deny && !ran:
			t.Fatalf("control: with touch allowed and not denied the file was not created; observations %v", obs)
		case deny && (status == harness.Enforced || status == harness.Degraded) && ran:
			t.Fatalf("the report says %s is %s, but the denied command ran; observations %v", harness.CapSubprocessDeny, status, obs)
		case deny:
			t.Logf("%s: %s %s; denied command ran: %v; observations %v", c.provider, harness.CapSubprocessDeny, status, ran, obs)
		}
	}
}

// runTouch spawns c's CLI against a mock model that asks for
// "touch marker.txt" in the workspace and reports the plan's
// subprocess.deny/v1 status, whether the file exists afterwards, and the
// kinds of the observations.
func runTouch(t *testing.T, c realCase, deny bool, extra string) (harness.Status, bool, []string) {
	t.Helper()
	input := maps.Clone(c.input)
	for _, k := range []string{"command", "cmd"} {
		if _, ok := input[k]; ok {
			input[k] = "touch marker.txt"
		}
	}
	mock := mockapi.Start(t, mockapi.Script{Tool: c.tool, Input: input, Text: "Done."})
	rules := `allow: ["echo *", "touch *"]`
	if deny {
		rules += `, deny: ["touch *"]`
	}
	plan := realPlan(t, c.provider, fmt.Sprintf(`package h
harnesses: h: {
	provider: %q
	model: %q
	endpoint: base_url: %q
	workspace: root: "ws"
	%s
	tools: allow: ["bash"]
	subprocess: {%s}
	environment: secrets: %s: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "90s"
}
`, c.provider, c.model, mock.URL, extra, rules, c.keyVar))
	var status harness.Status
	for _, r := range plan.CapabilityReport.All() {
		if r.Capability == harness.CapSubprocessDeny {
			status = r.Status
		}
	}
	marker := filepath.Join(plan.Dir, "marker.txt")
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "clean up", Getenv: fixedEnv})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	var kinds []string
	for _, o := range res.Observations {
		kinds = append(kinds, string(o.Kind))
		t.Logf("%s deny=%v: %s %q", c.provider, deny, o.Kind, o.Text) // shown on failure (or -v)
	}
	t.Logf("%s deny=%v: exit %d in %v; stderr: %s", c.provider, deny, res.ExitCode, res.Duration, res.Stderr)
	_, statErr := os.Stat(marker)
	if statErr != nil && !errors.Is(statErr, os.ErrNotExist) {
		t.Fatal(statErr)
	}
	return status, statErr == nil, kinds
}
