package harness

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// codex is the Codex CLI adapter (capability table Codex).
type codex struct{}

func (codex) name() string  { return "codex" }
func (codex) table() *Table { return Codex }

// codexSwitchable are the neutral tools Codex can switch off.
var codexSwitchable = []string{"bash", "web_fetch", "web_search"}

func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func tomlStrings(ss []string) string {
	b, _ := json.Marshal(nonNil(ss))
	return string(b)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// codexPrefix returns the literal leading tokens of a command pattern.
func codexPrefix(p string) ([]string, error) {
	var out []string
	for _, t := range strings.Fields(p) {
		if strings.ContainsAny(t, "*?") {
			break
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("command pattern %q starts with a glob, which Codex prefix rules cannot express", p)
	}
	return out, nil
}

func (c codex) build(s *Spec, probe *ProbeResult) (*build, error) {
	// Under polc's sandbox Codex's own is off: bubblewrap cannot make its
	// namespaces and mounts there, and polc's holds Codex itself too.
	polc := s.Sandbox == SandboxPolc
	b := &build{settings: map[string][]string{}, conds: CondSandbox, evidence: []string{"stream:codex/exec-json"}}
	if polc {
		b.conds = 0
	}
	exe := probe.Executable
	b.env = []EnvVar{{Name: "CODEX_HOME", Value: RunDir + "/codex"}}
	b.files = []File{{Path: RunDir + "/codex/.keep", Mode: 0o600, Content: ""}}
	var cfg []string
	if s.Endpoint != "" {
		cfg = append(cfg, `model_provider="polc"`, `model_providers.polc.name="polc endpoint"`,
			"model_providers.polc.base_url="+tomlString(s.Endpoint+"/v1"), `model_providers.polc.wire_api="responses"`,
			`model_providers.polc.env_key="OPENAI_API_KEY"`)
	}
	if probe.BundledBwrap != "" && !slices.Contains(s.EnvAllow, "PATH") && !polc {
		// Codex runs the first bwrap on its PATH and its bundled one only
		// when there is none; a host's older bubblewrap (Debian 12 ships
		// 0.8.0, without --argv0) fails every command. A private
		// directory first on PATH pins the bundled one, with which the
		// capability table was established.
		shim := RunDir + "/codex-bin/bwrap"
		b.files = append(b.files, File{Path: shim, Mode: 0o700, Content: "#!/bin/sh\nexec " + shellQuote(probe.BundledBwrap) + " \"$@\"\n"})
		b.env = append(b.env, EnvVar{Name: "PATH", Value: RunDir + "/codex-bin:" + providerPath(probe.Node)})
		b.helpers = []SandboxHelper{{Name: "bwrap", Path: shim}}
	}
	if s.Yolo {
		// The legacy mapping (docs/agent-clis.md "Legacy yolo profiles"):
		// --sandbox workspace-write --skip-git-repo-check.
		b.legacy = true
		b.argv = []string{exe, "exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write", "-C", s.Workspace.Root}
		for _, kv := range cfg {
			b.argv = append(b.argv, "-c", kv)
		}
		if s.Model != "" {
			b.argv = append(b.argv, "-m", s.Model)
		}
		b.argv = append(b.argv, "--", Prompt)
		return b, nil
	}
	tools := s.EffectiveTools()
	exact := true
	for _, t := range ToolIDs {
		if !slices.Contains(tools, t) && !slices.Contains(codexSwitchable, t) {
			exact = false // a tool the spec leaves out that Codex cannot switch off
		}
	}
	for _, t := range s.ToolsDeny {
		if !slices.Contains(codexSwitchable, t) {
			exact = false
		}
	}
	if exact {
		b.conds |= CondToolsExact
	}
	shell := slices.Contains(tools, "bash")
	web := "disabled"
	if s.Network == "on" && slices.Contains(tools, "web_search") {
		web = "live"
	}
	var secretNames []string
	for _, sec := range s.Secrets {
		secretNames = append(secretNames, sec.Name)
	}
	cfg = append(cfg,
		`approval_policy="never"`,
		fmt.Sprintf("sandbox_workspace_write.network_access=%t", s.Network == "on"),
		"sandbox_workspace_write.exclude_slash_tmp=true",
		"sandbox_workspace_write.exclude_tmpdir_env_var=true",
		`shell_environment_policy.inherit="all"`,
		"shell_environment_policy.ignore_default_excludes=false",
		"shell_environment_policy.exclude="+tomlStrings(secretNames),
		"web_search="+tomlString(web),
		fmt.Sprintf("features.shell_tool=%t", shell),
	)
	for _, m := range s.MCP {
		// approval_policy never refuses every MCP call that needs
		// approval, and by default they all do: the spec allows these
		// tools (enabled_tools keeps the others away), so they are
		// approved.
		cfg = append(cfg, "mcp_servers."+m.Name+".command="+tomlString(m.Command), "mcp_servers."+m.Name+".args="+tomlStrings(m.Args),
			"mcp_servers."+m.Name+`.default_tools_approval_mode="approve"`)
		if m.Tools != nil {
			cfg = append(cfg, "mcp_servers."+m.Name+".enabled_tools="+tomlStrings(m.Tools))
		}
	}
	var rules []string
	for _, p := range s.CommandsDeny {
		prefix, err := codexPrefix(p)
		if err != nil {
			return nil, err
		}
		rules = append(rules, fmt.Sprintf("prefix_rule(pattern=%s, decision=\"forbidden\", justification=\"denied by the polc harness plan\")", tomlStrings(prefix)))
	}
	b.argv = []string{exe, "exec", "--json", "--ephemeral", "--skip-git-repo-check", "--ignore-user-config", "--strict-config"}
	if len(rules) == 0 {
		b.argv = append(b.argv, "--ignore-rules")
	} else {
		b.files = append(b.files, File{Path: RunDir + "/codex/rules/polc.rules", Mode: 0o600, Content: strings.Join(rules, "\n") + "\n"})
	}
	b.argv = append(b.argv, "-C", s.Workspace.Root)
	if polc {
		// Commands run unsandboxed by Codex, inside polc's sandbox
		// (docs/agent-clis.md Codex: inside polc's sandbox).
		b.argv = append(b.argv, "-s", "danger-full-access")
	} else {
		b.argv = append(b.argv, "-s", "workspace-write")
		for _, d := range sortedSet(slices.Concat(s.Workspace.ExtraDirs, s.WriteRoots)) {
			b.argv = append(b.argv, "--add-dir", d)
		}
	}
	for _, kv := range cfg {
		b.argv = append(b.argv, "-c", kv)
	}
	if s.Model != "" {
		b.argv = append(b.argv, "-m", s.Model)
	}
	b.argv = append(b.argv, "--", Prompt)
	check := []string{exe, "app-server", "--print-startup-config", "--strict-config"}
	for _, kv := range cfg {
		check = append(check, "-c", kv)
	}
	b.preflight = []PreflightStep{{Name: "codex app-server --print-startup-config --strict-config", Argv: check, Files: []File{}}}
	if len(rules) > 0 {
		prefix, _ := codexPrefix(s.CommandsDeny[0])
		b.preflight = append(b.preflight, PreflightStep{Name: "codex execpolicy check",
			Argv:  append([]string{exe, "execpolicy", "check", "--rules", "polc.rules"}, prefix...),
			Files: []File{{Path: "polc.rules", Mode: 0o600, Content: strings.Join(rules, "\n") + "\n"}}})
	}
	set := func(cap string, keys ...string) { b.settings[cap] = keys }
	set(CapApprovalHeadless, "codex exec", `approval_policy="never"`)
	set(CapApprovalAsk, `approval_policy="never"`)
	set(CapToolsAllowlist, "features.shell_tool", "web_search")
	set(CapToolsDeny, "features.shell_tool", "web_search")
	set(CapFSWriteRoots, "-s workspace-write", "--add-dir", "sandbox_workspace_write.exclude_slash_tmp", "sandbox_workspace_write.exclude_tmpdir_env_var")
	set(CapNetEgress, "sandbox_workspace_write.network_access=false", `web_search="disabled"`)
	if polc {
		// Codex's own sandbox settings hold nothing here; compile adds
		// "sandbox: polc" to the rows polc's sandbox holds.
		set(CapFSWriteRoots, "-s danger-full-access")
		set(CapNetEgress, "-s danger-full-access", `web_search="disabled"`)
	}
	set(CapSubprocessAllow, "features.shell_tool")
	set(CapSubprocessDeny, "$CODEX_HOME/rules/polc.rules prefix_rule forbidden")
	set(CapMCPServers, "--ignore-user-config", "mcp_servers.*")
	set(CapEnvSecrets, "shell_environment_policy.exclude", "shell_environment_policy.ignore_default_excludes=false")
	set(CapConfigIsolation, "--ignore-user-config", "CODEX_HOME", "HOME", "--strict-config")
	return b, nil
}

type codexEvent struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Message  string `json:"message"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
	Item *struct {
		ID               string          `json:"id"`
		Type             string          `json:"type"`
		Text             string          `json:"text"`
		Message          string          `json:"message"`
		Command          string          `json:"command"`
		AggregatedOutput string          `json:"aggregated_output"`
		ExitCode         *int            `json:"exit_code"`
		Status           string          `json:"status"`
		Server           string          `json:"server"`
		Tool             string          `json:"tool"`
		Arguments        json.RawMessage `json:"arguments"`
		Query            string          `json:"query"`
		Changes          json.RawMessage `json:"changes"`
		Prompt           *string         `json:"prompt"`
	} `json:"item"`
}

func (codex) parse(line []byte, n int) []Observation {
	var e codexEvent
	if json.Unmarshal(line, &e) != nil {
		return []Observation{{Kind: ObsError, Provider: "codex", Line: n, EventType: "unparsed", Text: clip(string(line)), IsError: true}}
	}
	o := Observation{Provider: "codex", Line: n, EventType: e.Type}
	switch e.Type {
	case "thread.started":
		o.Kind, o.EventID, o.SessionID = ObsSessionStart, e.ThreadID, e.ThreadID
		o.Raw = append(json.RawMessage(nil), line...)
		return []Observation{o}
	case "error":
		o.Kind, o.Text, o.IsError = ObsError, clip(e.Message), true
		return []Observation{o}
	case "turn.completed":
		o.Kind = ObsEnd
		return []Observation{o}
	case "turn.failed":
		o.Kind, o.IsError = ObsEnd, true
		if e.Error != nil {
			o.Text = clip(e.Error.Message)
		}
		return []Observation{o}
	case "item.started", "item.completed":
	default:
		return nil
	}
	if e.Item == nil {
		return nil
	}
	it := e.Item
	o.EventType = e.Type + "/" + it.Type
	o.EventID, o.ToolCallID = it.ID, it.ID
	switch it.Type {
	case "agent_message":
		if e.Type != "item.completed" {
			return nil
		}
		o.Kind, o.Text, o.ToolCallID = ObsMessage, clip(it.Text), ""
		return []Observation{o}
	case "error":
		o.Kind, o.Text, o.IsError, o.ToolCallID = ObsError, clip(it.Message), true, ""
		return []Observation{o}
	case "command_execution", "mcp_tool_call", "file_change", "web_search", "collab_tool_call":
	default:
		return nil
	}
	o.Tool = it.Type
	switch it.Type {
	case "mcp_tool_call":
		o.Tool = "mcp:" + it.Server + "/" + it.Tool
	case "collab_tool_call":
		// A sub-agent tool (spawn_agent, send_input, …) of multi_agent_v1.
		o.Tool = "collab:" + it.Tool
	}
	switch {
	case it.Prompt != nil:
		o.Input, _ = json.Marshal(map[string]string{"prompt": *it.Prompt})
	case it.Command != "":
		o.Input, _ = json.Marshal(map[string]string{"command": it.Command})
	case len(it.Arguments) > 0:
		o.Input = it.Arguments
	case it.Query != "":
		o.Input, _ = json.Marshal(map[string]string{"query": it.Query})
	case len(it.Changes) > 0:
		o.Input = it.Changes
	}
	if e.Type == "item.started" {
		o.Kind = ObsToolRequest
		return []Observation{o}
	}
	o.Kind, o.Text = ObsToolResult, clip(it.AggregatedOutput)
	o.IsError = it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0)
	o.Denied = it.Status == "declined"
	return []Observation{o}
}

func (codex) attest(Observation, *Attestation) error { return nil }
