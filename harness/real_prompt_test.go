package harness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/harness/internal/mockapi"
)

// TestRealPromptIsNeverAnOption: a prompt that starts with '-' reaches the
// model as text; it never becomes an option of the provider CLI (which
// would let a prompt such as "--approval-mode=yolo" or
// "--dangerously-skip-permissions" change the plan's controls).
func TestRealPromptIsNeverAnOption(t *testing.T) {
	for _, c := range []struct{ provider, model, keyVar string }{
		{"claude-code", "claude-mock", "ANTHROPIC_API_KEY"},
		{"codex", "mock-model", "OPENAI_API_KEY"},
		{"gemini-cli", "gemini-2.5-flash", "GEMINI_API_KEY"},
	} {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			mock := mockapi.Start(t, mockapi.Script{Text: "All done."})
			plan := realPlan(t, c.provider, fmt.Sprintf(`package h
harnesses: h: {
	provider: %q
	model: %q
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["read_file"]
	environment: secrets: %s: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "60s"
}
`, c.provider, c.model, mock.URL, c.keyVar))
			const prompt = "--version"
			res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: prompt, Getenv: fixedEnv})
			if err != nil {
				t.Fatalf("spawn: %v\nstderr: %s", err, res.Stderr)
			}
			seen := false
			for _, r := range mock.Requests() {
				if strings.Contains(string(r.Body), prompt) {
					seen = true
				}
			}
			if !seen {
				t.Fatalf("the prompt %q never reached the model (exit %d, %d requests, observations %v)\nstderr: %s", prompt, res.ExitCode, len(mock.Requests()), res.Observations, res.Stderr)
			}
		})
	}
}
