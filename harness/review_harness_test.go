package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/harness/internal/mockapi"
)

// claudeSettings returns the permissions of a Claude plan's --settings file.
func claudeSettings(t *testing.T, plan *harness.Plan) (allow, deny []string) {
	t.Helper()
	for _, f := range plan.Files {
		if strings.HasSuffix(f.Path, "/claude/settings.json") {
			var s struct {
				Permissions struct{ Allow, Deny []string } `json:"permissions"`
			}
			if err := json.Unmarshal([]byte(f.Content), &s); err != nil {
				t.Fatal(err)
			}
			return s.Permissions.Allow, s.Permissions.Deny
		}
	}
	t.Fatal("no claude settings file in the plan")
	return nil, nil
}

// TestReviewClaudeDenyRulesCoverPattern: a neutral command deny pattern
// must become Claude Bash rules that match at least every command the
// pattern matches. Claude reads '?' literally (only '*' is a wildcard), a
// rule ending in ":*" as the legacy prefix form ("grep test:*" denies
// "grep test x" but not "grep test:x"), and makes a trailing " *"
// optional only when it is the rule's one '*' ("ls * --all *" does not
// deny "ls x --all"). Each of these used to leave a denied command
// runnable while subprocess.deny/v1 was reported enforced.
func TestReviewClaudeDenyRulesCoverPattern(t *testing.T) {
	plan, rep := compileFor(t, `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["bash"]
	subprocess: {allow: ["touch *", "ls *", "grep *"], deny: ["touch marker.tx?", "ls * --all *", "grep test:*", "ls -la"]}
}
`, "claude-code", false)
	if r, _ := rep.Lookup(harness.CapSubprocessDeny); r.Status != harness.Enforced {
		t.Fatalf("subprocess.deny/v1 = %s (%s); this test wants the enforced case", r.Status, r.Reason)
	}
	_, deny := claudeSettings(t, plan)
	for _, want := range []string{
		"Bash(touch marker.tx*)", // '?' is literal in Claude: widen it to '*'
		"Bash(ls * --all *)",     // with the trailing token ...
		"Bash(ls * --all)",       // ... and without it
		"Bash(grep test*)",       // not the ":*" prefix form
		"Bash(ls -la)",           // exact stays exact
	} {
		if !slices.Contains(deny, want) {
			t.Errorf("deny rules %q lack %q", deny, want)
		}
	}
	for _, bad := range []string{"Bash(touch marker.tx?)", "Bash(grep test:*)"} {
		if slices.Contains(deny, bad) {
			t.Errorf("deny rules hold %q, which Claude does not read as the neutral pattern", bad)
		}
	}
}

// TestReviewClaudeWideAllowNotEnforced: Claude's '*' matches any run of
// characters, spaces included, so "Bash(touch *.txt)" also allows
// "touch /etc/x a.txt"; the neutral "touch *.txt" is one .txt token. With
// such an allow pattern subprocess.allow/v1 must not be reported enforced.
// A trailing " *" token means the same on both sides; such a list is
// degraded only for the reason every Claude shell is (read-only commands
// run without any rule: TestRealSubprocessAllowOutside).
func TestReviewClaudeWideAllowNotEnforced(t *testing.T) {
	for _, c := range []struct {
		allow  string
		want   harness.Status
		reason string
	}{
		{`["touch *.txt"]`, harness.Degraded, "spaces included"},
		{`["ls * --all"]`, harness.Degraded, "spaces included"},
		{`["touch *", "ls -la"]`, harness.Degraded, "read-only"},
	} {
		_, rep := compileFor(t, `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["bash"]
	subprocess: allow: `+c.allow+`
}
`, "claude-code", false)
		if r, _ := rep.Lookup(harness.CapSubprocessAllow); r.Status != c.want || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("allow %s: subprocess.allow/v1 = %s (%s), want %s for a reason about %q", c.allow, r.Status, r.Reason, c.want, c.reason)
		}
	}
}

// TestReviewRealDenyQuestionMark runs each real CLI with a plan that
// allows "touch *" and denies "touch marker.tx?", and a mock model that asks
// for "touch marker.txt". Where subprocess.deny/v1 is enforced or degraded
// the file must not appear (Claude used to read the '?' literally and run
// the command).
func TestReviewRealDenyQuestionMark(t *testing.T) {
	for _, c := range realCases {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			r, ran, obs := runDeniedTouch(t, c, "touch marker.txt", `{allow: ["touch *"], deny: ["touch marker.tx?"]}`)
			if ran && r.Status != harness.Unsupported {
				t.Errorf("subprocess.deny/v1 is %s, but the denied command ran; observations %+v", r.Status, obs)
			}
		})
	}
}

// runDeniedTouch runs provider case c with bash allowed, the subprocess
// section subprocess, and a mock model that asks to run command (which
// creates marker.txt); it returns the subprocess.deny/v1 row, whether the
// marker appeared, and the observations.
func runDeniedTouch(t *testing.T, c realCase, command, subprocess string) (harness.CapabilityResult, bool, []harness.Observation) {
	input := maps.Clone(c.input)
	for _, k := range []string{"command", "cmd"} {
		if _, ok := input[k]; ok {
			input[k] = command
		}
	}
	mock := mockapi.Start(t, mockapi.Script{Tool: c.tool, Input: input, Text: "Done."})
	plan := realPlan(t, c.provider, fmt.Sprintf(`package h
harnesses: h: {
	provider: %q
	model: %q
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["bash"]
	subprocess: %s
	environment: secrets: %s: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "90s"
}
`, c.provider, c.model, mock.URL, subprocess, c.keyVar))
	r, _ := plan.CapabilityReport.Lookup(harness.CapSubprocessDeny)
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "make the marker", Getenv: fixedEnv})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	_, statErr := os.Stat(filepath.Join(plan.Dir, "marker.txt"))
	if statErr != nil && !errors.Is(statErr, os.ErrNotExist) {
		t.Fatal(statErr)
	}
	return r, statErr == nil, res.Observations
}

// TestReviewCodexCollabToolCall: Codex offers the model sub-agent tools
// (multi_agent_v1: spawn_agent, send_input, …), reported in --json as
// collab_tool_call items. They are tool calls of the agent and must be
// observed, not dropped.
func TestReviewCodexCollabToolCall(t *testing.T) {
	in := `{"type":"thread.started","thread_id":"t1"}
{"type":"item.started","item":{"id":"item_3","type":"collab_tool_call","tool":"spawn_agent","sender_thread_id":"t1","receiver_thread_ids":[],"prompt":"delete the repo","agents_states":{},"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_3","type":"collab_tool_call","tool":"spawn_agent","sender_thread_id":"t1","receiver_thread_ids":["t2"],"prompt":"delete the repo","agents_states":{"t2":{"status":"running"}},"status":"completed"}}
{"type":"item.completed","item":{"id":"item_4","type":"collab_tool_call","tool":"send_input","prompt":"x","status":"failed"}}
{"type":"turn.completed"}
`
	obs, err := harness.ParseStream("codex", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range obs {
		got = append(got, fmt.Sprintf("%s %s %s err=%v", o.Kind, o.ToolCallID, o.Tool, o.IsError))
	}
	want := []string{
		"session_start   err=false",
		"tool_request item_3 collab:spawn_agent err=false",
		"tool_result item_3 collab:spawn_agent err=false",
		"tool_result item_4 collab:send_input err=true",
		"end   err=false",
	}
	if !slices.Equal(got, want) {
		t.Errorf("observations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(string(obs[1].Input), "delete the repo") {
		t.Errorf("the sub-agent's prompt is not the request's input: %s", obs[1].Input)
	}
}

// TestReviewRealClaudeDenyPathMetachars: Claude's path rules are gitignore
// patterns. A deny path holding '[' (a character class) or '\' (an escape)
// used to become a Read() rule that missed the real path: with only the
// Read tool (fs.deny_paths/v1 enforced) the model read the denied file.
func TestReviewRealClaudeDenyPathMetachars(t *testing.T) {
	for _, name := range []string{"sec[1]", `x\y`} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := probe(t, "claude-code")
			dir := t.TempDir()
			ws := filepath.Join(dir, "ws")
			if err := os.MkdirAll(filepath.Join(ws, name), 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(ws, name, "key.txt"), []byte("TOPSECRET"), 0o644)
			mock := mockapi.Start(t, mockapi.Script{Tool: "Read", Input: map[string]any{"file_path": filepath.Join(ws, name, "key.txt")}, Text: "Done."})
			s := specFrom(t, dir, fmt.Sprintf(`package h
harnesses: h: {
	provider: "claude-code"
	model: "claude-mock"
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["read_file"]
	filesystem: deny: [%q]
	environment: secrets: ANTHROPIC_API_KEY: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "60s"
}
`, mock.URL, "ws/"+name))
			plan, rep, err := harness.Compile(s, p)
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := rep.Lookup(harness.CapFSDenyPaths); r.Status != harness.Enforced {
				t.Fatalf("fs.deny_paths/v1 = %s; this test wants the enforced case", r.Status)
			}
			res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "read", Getenv: fixedEnv})
			if err != nil {
				t.Fatal(err)
			}
			sawDenial := false
			for _, o := range res.Observations {
				if strings.Contains(o.Text, "TOPSECRET") {
					t.Fatalf("fs.deny_paths/v1 enforced, but the denied file was read: %+v", o)
				}
				if o.Kind == harness.ObsToolResult && o.Denied {
					sawDenial = true
				}
			}
			if !sawDenial {
				t.Errorf("no denied tool result: %+v", res.Observations)
			}
		})
	}
}

// TestReviewGeminiCommaInDir: Gemini splits every --include-directories
// value on commas, so a working directory named "a,/elsewhere" used to
// make /elsewhere a workspace root that write_file may write, while
// fs.write_roots/v1 was reported enforced. The plan is now refused.
func TestReviewGeminiCommaInDir(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(outside, 0o755)
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	s := specFrom(t, dir, fmt.Sprintf(`package h
harnesses: h: {
	provider: "gemini-cli"
	workspace: {root: "ws", extra_dirs: [%q]}
	tools: allow: ["read_file", "write_file"]
}
`, "ws/a,"+outside))
	plan, rep, err := harness.Compile(s, fakeProbe("gemini-cli", false))
	var ce *harness.CompileError
	if errors.As(err, &ce) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := rep.Lookup(harness.CapFSWriteRoots); r.Status == harness.Enforced {
		t.Errorf("fs.write_roots/v1 enforced, but Gemini reads argv %q as including %s", plan.Argv, outside)
	}
}

// TestReviewRealGeminiCommaInDir shows the split with the real CLI: with
// the old plan the model's write_file into the directory after the comma
// succeeded.
func TestReviewRealGeminiCommaInDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(dir, "ws", "a,"+outside), 0o755)
	os.MkdirAll(filepath.Join(dir, "ws", "a"), 0o755)
	plan, rep, target, err := geminiWriteOutside(t, dir, fmt.Sprintf(`workspace: {root: "ws", extra_dirs: [%q]}`, "ws/a,"+outside))
	var ce *harness.CompileError
	if errors.As(err, &ce) {
		return // refused: nothing runs
	}
	if err != nil {
		t.Fatal(err)
	}
	writeStaysInside(t, plan, rep, target)
}

// TestReviewRealGeminiWorkspaceSettings: Gemini loads a trusted
// workspace's .gemini/settings.json, and a headless run needs a trusted
// workspace. A repository holding {"context":{"includeDirectories":[…]}}
// must not widen the workspace roots while fs.write_roots/v1 is reported
// enforced. (Observed with 0.61.0: it does not; the write is refused.)
func TestReviewRealGeminiWorkspaceSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(dir, "ws", ".gemini"), 0o755)
	os.WriteFile(filepath.Join(dir, "ws", ".gemini", "settings.json"), []byte(`{"context":{"includeDirectories":[`+strconvQuote(outside)+`]}}`), 0o644)
	plan, rep, target, err := geminiWriteOutside(t, dir, `workspace: root: "ws"`)
	if err != nil {
		t.Fatal(err)
	}
	writeStaysInside(t, plan, rep, target)
}

// geminiWriteOutside compiles, for the real Gemini CLI, harness h in dir
// (workspace given by the workspace line) whose mock model writes
// dir/outside/pwned.txt, outside every working directory; it returns the
// plan, its report, that target and Compile's error.
func geminiWriteOutside(t *testing.T, dir, workspace string) (*harness.Plan, *harness.CapabilityReport, string, error) {
	t.Helper()
	p := probe(t, "gemini-cli")
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(outside, 0o755)
	target := filepath.Join(outside, "pwned.txt")
	mock := mockapi.Start(t, mockapi.Script{Tool: "write_file", Input: map[string]any{"file_path": target, "content": "x"}, Text: "Done."})
	s := specFrom(t, dir, fmt.Sprintf(`package h
harnesses: h: {
	provider: "gemini-cli"
	model: "gemini-2.5-flash"
	endpoint: base_url: %q
	%s
	tools: allow: ["read_file", "write_file"]
	environment: secrets: GEMINI_API_KEY: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "60s"
	allow_degraded: ["config.isolation/v1", "mcp.servers/v1"]
}
`, mock.URL, workspace))
	plan, rep, err := harness.Compile(s, p)
	return plan, rep, target, err
}

// writeStaysInside runs plan, whose mock model writes target (outside
// every working dir), when it reports fs.write_roots/v1 enforced, and
// fails if target was written.
func writeStaysInside(t *testing.T, plan *harness.Plan, rep *harness.CapabilityReport, target string) {
	r, _ := rep.Lookup(harness.CapFSWriteRoots)
	if r.Status != harness.Enforced {
		return
	}
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "write", Getenv: fixedEnv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); err == nil {
		t.Errorf("fs.write_roots/v1 enforced, but write_file wrote %s outside every working dir; observations %+v", target, res.Observations)
	} else {
		t.Logf("observations %+v; stderr %s", res.Observations, res.Stderr)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestReviewClaudeSandboxSettingsValid: with bubblewrap and socat on the
// host polc turns Claude's Bash sandbox on and claims the fs.* and net.*
// controls through it. The generated settings used to hold
// "sandbox.filesystem.allowWrite": null whenever the spec had no extra
// dir or write root, which Claude's schema rejects; in -p mode Claude
// silently ignores a settings file that fails validation, so every rule
// and the sandbox itself were dropped (only claude doctor says so).
func TestReviewClaudeSandboxSettingsValid(t *testing.T) {
	real := probe(t, "claude-code")
	for i, extra := range []string{
		``,
		`network: mode: "on"`,
		`network: {mode: "allowlist", allow: ["registry.npmjs.org", "*.example.com:443"]}
	filesystem: {deny: ["ws/secrets"], write: ["out"], read: []}
	workspace: extra_dirs: ["extra"]`,
		`subprocess: deny: ["touch marker.tx?", "ls * --all *", "grep test:*", "rm \\x"]
	filesystem: {deny: ["ws/sec[1]", "ws/x\\y", "ws/a!#b"], read: ["ref[2]"]}`,
	} {
		dir := t.TempDir()
		s := specFrom(t, dir, `package h
harnesses: h: {
	provider: "claude-code"
	workspace: root: "ws"
	tools: allow: ["bash", "read_file", "web_fetch"]
	subprocess: allow: ["ls *"]
	`+extra+`
}
`)
		p := fakeProbe("claude-code", true) // a host with bwrap and socat
		p.Executable, p.Resolved, p.SHA256 = real.Executable, real.Resolved, real.SHA256
		plan, rep, err := harness.Compile(s, p)
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := rep.Lookup(harness.CapFSWriteRoots); i == 0 && r.Status != harness.Enforced {
			t.Fatalf("fs.write_roots/v1 = %s; this test wants the sandboxed, enforced case", r.Status)
		}
		for _, f := range plan.Files {
			if strings.Contains(f.Content, "null") {
				t.Errorf("case %d: %s holds null:\n%s", i, f.Path, f.Content)
			}
		}
		if err := harness.Preflight(context.Background(), plan); err != nil {
			t.Errorf("case %d: claude doctor rejects the generated settings: %v", i, err)
		}
	}
}

// TestReviewRealClaudeWebFetchPreapproved: Claude Code lets WebFetch reach
// a built-in list of documentation hosts (docs.python.org,
// developer.mozilla.org, …, "Preapproved host") without any allow rule,
// after deny and ask rules and before the mode's default. Under network
// mode allowlist polc allowed WebFetch(domain:…) for the listed hosts only
// and reported net.allowlist/v1 enforced; a preapproved host outside the
// list was allowed all the same.
func TestReviewRealClaudeWebFetchPreapproved(t *testing.T) {
	t.Parallel()
	mock := mockapi.Start(t, mockapi.Script{Tool: "WebFetch", Input: map[string]any{"url": "https://docs.python.org/3/", "prompt": "summarise"}, Text: "Done."})
	plan := realPlan(t, "claude-code", fmt.Sprintf(`package h
harnesses: h: {
	provider: "claude-code"
	model: "claude-mock"
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["web_fetch"]
	network: {mode: "allowlist", allow: ["registry.npmjs.org"]}
	environment: secrets: ANTHROPIC_API_KEY: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "60s"
}
`, mock.URL))
	r, _ := plan.CapabilityReport.Lookup(harness.CapNetAllowlist)
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "fetch", Getenv: fixedEnv})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Observations {
		if o.Kind == harness.ObsToolResult && !o.Denied && r.Status == harness.Enforced {
			t.Errorf("net.allowlist/v1 enforced, but WebFetch of a host outside the list was not refused: %q", o.Text)
		}
	}
	t.Logf("net.allowlist/v1 %s; observations %+v", r.Status, res.Observations)
}

// TestReviewSecretRedactedInJSONInput: observation inputs are JSON. A
// secret holding a character JSON escapes ('"', '\', or '<', '>', '&',
// which Go's encoder escapes when polc re-encodes a Codex command) is not
// spelt the same inside the input, and used to pass redaction.
func TestReviewSecretRedactedInJSONInput(t *testing.T) {
	const secret = `s3cr&t<"x\y>`
	dir, script := fakeProvider(t, `echo '{"type":"thread.started","thread_id":"t1"}'
printf '%s\n' '{"type":"item.started","item":{"id":"i1","type":"command_execution","command":"echo s3cr&t<\"x\\y>","aggregated_output":"","exit_code":null,"status":"in_progress"}}'
printf '%s\n' '{"type":"item.completed","item":{"id":"i2","type":"mcp_tool_call","server":"s","tool":"t","arguments":{"k":"s3cr&t<\"x\\y>"},"status":"completed"}}'
printf '%s\n' '{"type":"item.completed","item":{"id":"i3","type":"agent_message","text":"s3cr&t<\"x\\y> not JSON'
echo '{"type":"turn.completed"}'
`)
	res := spawnFakeCodexWithSecret(t, dir, script, "TOKEN", secret)
	esc, _ := json.Marshal(secret)
	inner := strings.Trim(string(esc), `"`)
	n := 0
	for _, o := range res.Observations {
		if len(o.Input) == 0 {
			continue
		}
		n++
		var v any
		if err := json.Unmarshal(o.Input, &v); err != nil {
			t.Errorf("input is not JSON after redaction: %s", o.Input)
		}
		if strings.Contains(string(o.Input), inner) || strings.Contains(string(o.Input), `s3cr\u0026t`) || strings.Contains(string(o.Input), `s3cr&t`) {
			t.Errorf("secret in an observation input: %s", o.Input)
		}
	}
	for _, o := range res.Observations {
		if strings.Contains(o.Text, `s3cr&t`) {
			t.Errorf("secret in an observation text: %q", o.Text)
		}
	}
	if n != 2 {
		t.Errorf("want 2 observations with input, got %d: %+v", n, res.Observations)
	}
}

// TestReviewRealDenyEnvPrefix: a denied command asked for with an
// environment assignment in front ("FOO=1 touch marker.txt"). Claude and
// Gemini (subprocess.deny/v1 enforced) refuse it; Codex's prefix rules do
// not match it and it runs, which is why Codex reports the control
// degraded and says so in its reason.
func TestReviewRealDenyEnvPrefix(t *testing.T) {
	for _, c := range realCases {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			r, ran, _ := runDeniedTouch(t, c, "FOO=1 touch marker.txt", `{allow: ["touch *"], deny: ["touch *"]}`)
			switch {
			case ran && r.Status == harness.Enforced:
				t.Errorf("subprocess.deny/v1 enforced, but FOO=1 touch ran")
			case ran && !strings.Contains(r.Reason, "environment assignment"):
				t.Errorf("FOO=1 touch ran; the %s reason does not say why: %s", r.Status, r.Reason)
			}
		})
	}
}

// TestReviewRealCodexShellSecretExcluded: Codex reports
// env.secret_isolation/v1 enforced with a shell (shell_environment_policy
// excludes the secret names); the model key must not reach the command.
func TestReviewRealCodexShellSecretExcluded(t *testing.T) {
	t.Parallel()
	mock := mockapi.Start(t, mockapi.Script{Tool: "exec_command", Input: map[string]any{"cmd": "echo key=${OPENAI_API_KEY:-unset} polc=${POLC_X:-unset}"}, Text: "Done."})
	plan := realPlan(t, "codex", fmt.Sprintf(`package h
harnesses: h: {
	provider: "codex"
	model: "mock-model"
	endpoint: base_url: %q
	workspace: root: "ws"
	tools: allow: ["bash"]
	environment: secrets: {OPENAI_API_KEY: "env:POLC_TEST_MODEL_KEY", POLC_X: "env:POLC_TEST_MODEL_KEY"}
	resources: wall_clock: "90s"
}
`, mock.URL))
	r, _ := plan.CapabilityReport.Lookup(harness.CapEnvSecrets)
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x", Getenv: fixedEnv})
	if err != nil {
		t.Fatal(err)
	}
	saw := false
	for _, o := range res.Observations {
		if o.Kind == harness.ObsToolResult && strings.Contains(o.Text, "key=") {
			saw = true
			if strings.Contains(o.Text, "[redacted:") && r.Status == harness.Enforced {
				t.Errorf("env.secret_isolation/v1 enforced, but the shell saw a secret: %q", o.Text)
			}
		}
	}
	if !saw {
		t.Errorf("the command did not run: %+v", res.Observations)
	}
}

// TestReviewRedactedInputStaysJSON: a secret that is also a JSON number
// (a numeric PIN) redacted inside an input used to leave the input invalid
// JSON, so the observation no longer encoded.
func TestReviewRedactedInputStaysJSON(t *testing.T) {
	dir, script := fakeProvider(t, `echo '{"type":"thread.started","thread_id":"t1"}'
echo '{"type":"item.completed","item":{"id":"i2","type":"mcp_tool_call","server":"s","tool":"t","arguments":{"pin":98765432},"status":"completed"}}'
echo '{"type":"turn.completed"}'
`)
	res := spawnFakeCodexWithSecret(t, dir, script, "PIN", "98765432")
	for _, o := range res.Observations {
		if strings.Contains(string(o.Input), "98765432") {
			t.Errorf("secret in input %s", o.Input)
		}
		if _, err := json.Marshal(o); err != nil {
			t.Errorf("observation does not encode after redaction: %v (input %s)", err, o.Input)
		}
	}
}

// spawnFakeCodexWithSecret runs the fake codex script (from fakeProvider
// in dir) under a plan whose environment holds the secret name with value.
func spawnFakeCodexWithSecret(t *testing.T, dir, script, name, value string) *harness.RunResult {
	t.Helper()
	plan, _ := fakeCodexPlan(t, dir, script, fmt.Sprintf(`environment: secrets: %s: "env:POLC_SECRET"`, name))
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "x", Getenv: func(k string) (string, bool) {
		return value, k == "POLC_SECRET"
	}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
