package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/harness/internal/mockapi"
	"polc.dev/polc/harness/internal/providertest"
)

func probe(t *testing.T, provider string) *harness.ProbeResult {
	t.Helper()
	exe := providertest.Executable(t, provider)
	p, err := harness.Probe(context.Background(), provider, exe, harness.ProbeOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type realCase struct {
	provider, model, keyVar, tool string
	input                         map[string]any
}

var realCases = []realCase{
	{"claude-code", "claude-mock", "ANTHROPIC_API_KEY", "Bash", map[string]any{"command": "echo hello-from-bash", "description": "greet"}},
	{"codex", "mock-model", "OPENAI_API_KEY", "exec_command", map[string]any{"cmd": "echo hello-from-codex"}},
	{"gemini-cli", "gemini-2.5-flash", "GEMINI_API_KEY", "run_shell_command", map[string]any{"command": "echo hello-from-gemini", "description": "greet"}},
}

// TestRealSpawn probes each real CLI, compiles a spec, runs its offline
// validators and spawns it against the loopback mock model API, which
// asks for one shell command; the stream must show the tool request and
// its real result.
func TestRealSpawn(t *testing.T) {
	for _, c := range realCases {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			p := probe(t, c.provider)
			if !p.Supported {
				t.Fatalf("pinned version %s unsupported: %s", p.Version, p.Reason)
			}
			mock := mockapi.Start(t, mockapi.Script{Tool: c.tool, Input: c.input, Text: "All done."})
			dir := t.TempDir()
			ws := filepath.Join(dir, "ws")
			os.Mkdir(ws, 0o755)
			src := fmt.Sprintf(`package h
harnesses: h: {
	provider: %q
	model: %q
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["bash", "read_file"]
	subprocess: allow: ["echo *"]
	environment: secrets: %s: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "90s"
}
`, c.provider, c.model, mock.URL, c.keyVar)
			s := specFrom(t, dir, src)
			plan, report, err := harness.Compile(s, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range report.All() {
				if r.Status != harness.Enforced {
					s.AllowDegraded = append(s.AllowDegraded, r.Capability)
				}
			}
			plan, _, err = harness.Compile(s, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := harness.Preflight(context.Background(), plan); err != nil {
				t.Fatal(err)
			}
			secret := "sk-test-" + strings.Repeat("x", 16)
			var raw bytes.Buffer
			res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{
				Stream: &raw,
				Prompt: "run the greeting",
				Getenv: func(k string) (string, bool) {
					if k == "POLC_TEST_MODEL_KEY" {
						return secret, true
					}
					return "", false
				},
			})
			if err != nil {
				t.Fatalf("spawn: %v\nstderr: %s", err, res.Stderr)
			}
			var kinds []string
			var sawReq, sawResult bool
			for _, o := range res.Observations {
				kinds = append(kinds, string(o.Kind))
				if o.Kind == harness.ObsToolRequest {
					sawReq = true
				}
				if o.Kind == harness.ObsToolResult && strings.Contains(o.Text, "hello-from-") && !o.IsError {
					sawResult = true
				}
			}
			if !sawReq || !sawResult {
				t.Fatalf("exit %d, kinds %v\nstderr: %s", res.ExitCode, kinds, res.Stderr)
			}
			if strings.Contains(raw.String(), secret) {
				t.Errorf("the model key reached the stream")
			}
			if dir := os.Getenv("POLC_RECORD_STREAMS"); dir != "" {
				os.WriteFile(filepath.Join(dir, c.provider+".jsonl"), raw.Bytes(), 0o644)
			}
			t.Logf("%s: exit %d in %v, observations %v", c.provider, res.ExitCode, res.Duration, kinds)
		})
	}
}
