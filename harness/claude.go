package harness

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// claudeCode is the Claude Code adapter (capability table ClaudeCode).
type claudeCode struct{}

func (claudeCode) name() string  { return "claude-code" }
func (claudeCode) table() *Table { return ClaudeCode }

// claudeTools maps neutral tool ids to Claude Code's built-in tools.
var claudeTools = map[string]string{
	"bash": "Bash", "read_file": "Read", "write_file": "Write", "edit_file": "Edit",
	"list_files": "Glob", "search_files": "Grep", "web_fetch": "WebFetch", "web_search": "WebSearch",
}

// claudeCommand turns a command pattern into a Bash(…) rule. Claude's '*'
// matches any run of characters, spaces included, and a trailing " *" is
// optional when it is the rule's only '*'; so a pattern of literal tokens,
// optionally ending in a " *" token, means the same on both sides.
func claudeCommand(p string) string { return "Bash(" + p + ")" }

// claudeExact reports whether Claude reads the allow or deny pattern p as
// the neutral grammar does: literal tokens (no '*', '?' or '\', which
// escapes in Claude's rules), optionally ending in a " *" token.
func claudeExact(p string) bool {
	return !strings.ContainsAny(strings.TrimSuffix(p, " *"), `*?\`)
}

// claudeDenyCommands turns a deny pattern into Bash(…) rules that together
// match every command the pattern matches (and maybe more: a deny may
// widen, never narrow). Claude reads '?' literally and '\' as an escape
// (both become '*', which matches them and more), a rule ending in ":*"
// as the legacy prefix form ("a:*" denies "a x" but not "a:x", so the
// colons go), and makes a trailing " *" optional only when it is the
// rule's one '*' (so a rule without the trailing token is added).
func claudeDenyCommands(p string) []string {
	if claudeExact(p) {
		return []string{claudeCommand(p)}
	}
	body := strings.NewReplacer("?", "*", `\`, "*").Replace(p)
	for strings.Contains(body, "**") {
		body = strings.ReplaceAll(body, "**", "*")
	}
	bodies := []string{body}
	if rest, ok := strings.CutSuffix(body, " *"); ok {
		bodies = append(bodies, rest)
	}
	var out []string
	for _, b := range bodies {
		if strings.HasSuffix(b, ":*") {
			b = strings.TrimRight(strings.TrimSuffix(b, "*"), ":") + "*"
		}
		out = append(out, claudeCommand(b))
	}
	return out
}

// claudePath writes an absolute path in Claude's rule syntax (//abs) for a
// deny rule (every caller's). Path rules are gitignore patterns, so the
// characters gitignore reads as pattern syntax ('[', ']', '*', '?', '!',
// '#', a trailing space) are escaped with a backslash: unescaped,
// "secret[1]" would name "secret1" and the deny rule would miss the real
// path. A backslash itself does not survive Claude's rule parsing either
// way, so it becomes '?' (any one character): the rule then denies the
// path and a few more, never fewer.
func claudePath(p string) string {
	var b strings.Builder
	b.WriteString("/")
	for i, r := range p {
		switch {
		case r == '\\':
			b.WriteByte('?')
			continue
		case strings.ContainsRune("[]*?!#", r), r == ' ' && i == len(p)-1:
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (c claudeCode) build(s *Spec, probe *ProbeResult) (*build, error) {
	b := &build{settings: map[string][]string{}, evidence: []string{"stream:claude-code/stream-json", "attestation:system/init"}}
	exe := probe.Executable
	env := []EnvVar{
		{Name: "CLAUDE_CONFIG_DIR", Value: RunDir + "/claude-config"},
		{Name: "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", Value: "1"},
		{Name: "DISABLE_TELEMETRY", Value: "1"},
		{Name: "DISABLE_AUTOUPDATER", Value: "1"},
	}
	if s.Endpoint != "" {
		env = append(env, EnvVar{Name: "ANTHROPIC_BASE_URL", Value: s.Endpoint})
	}
	b.env = env
	if s.Yolo {
		// The legacy mapping (docs/agent-clis.md "Legacy yolo profiles"):
		// bypassPermissions, nothing else.
		b.legacy = true
		b.argv = []string{exe, "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"}
		if s.Model != "" {
			b.argv = append(b.argv, "--model", s.Model)
		}
		// The prompt is an operand after "--": one starting with '-' must
		// never be read as an option.
		b.argv = append(b.argv, "--", Prompt)
		b.attestation = nil
		b.evidence = []string{"stream:claude-code/stream-json"}
		return b, nil
	}
	if s.Network == "allowlist" && slices.Contains(s.EffectiveTools(), "web_fetch") {
		// WebFetch lets a built-in list of documentation hosts through
		// without any rule: more than the allowlist.
		b.conds |= CondPreapprovedHosts
	}
	// Under polc's sandbox Claude's own cannot run (Landlock forbids the
	// mounts bubblewrap makes) and is not needed: polc's holds Bash too.
	sandbox := s.HasShell() && probe.Bwrap != "" && probe.Socat != "" && s.Sandbox != SandboxPolc
	if sandbox {
		b.conds |= CondSandbox
		b.helpers = []SandboxHelper{{Name: "bwrap", Path: probe.Bwrap}, {Name: "socat", Path: probe.Socat}}
	}
	var tools []string
	for _, t := range s.EffectiveTools() {
		tools = append(tools, claudeTools[t])
	}
	slices.Sort(tools)
	allow, deny := []string{}, []string{}
	for _, t := range s.EffectiveTools() {
		switch t {
		case "bash":
			if s.CommandsAllow == nil {
				allow = append(allow, "Bash")
			}
			for _, cmd := range s.CommandsAllow {
				allow = append(allow, claudeCommand(cmd))
				if !claudeExact(cmd) {
					// '*' inside a token (or a '*' token before the
					// end) matches spaces too: the rule allows more.
					b.conds |= CondWideAllow
				}
			}
		case "web_fetch":
			if s.Network == "allowlist" {
				for _, h := range s.Hosts {
					host, _, _ := strings.Cut(h, ":")
					allow = append(allow, "WebFetch(domain:"+host+")")
				}
			} else {
				allow = append(allow, "WebFetch")
			}
		default:
			allow = append(allow, claudeTools[t])
		}
	}
	for _, t := range s.ToolsDeny {
		deny = append(deny, claudeTools[t])
	}
	if s.Network == "off" {
		deny = append(deny, "WebFetch", "WebSearch")
	}
	if s.Network == "allowlist" {
		deny = append(deny, "WebSearch")
	}
	for _, cmd := range s.CommandsDeny {
		deny = append(deny, claudeDenyCommands(cmd)...)
	}
	for _, p := range s.DenyPaths {
		deny = append(deny, "Read("+claudePath(p)+")", "Read("+claudePath(p)+"/**)", "Edit("+claudePath(p)+")", "Edit("+claudePath(p)+"/**)")
	}
	for _, p := range s.ReadRoots {
		deny = append(deny, "Edit("+claudePath(p)+"/**)") // read roots stay read-only
	}
	mcpServers := map[string]any{}
	var mcpNames []string
	for _, m := range s.MCP {
		mcpServers[m.Name] = map[string]any{"type": "stdio", "command": m.Command, "args": nonNil(m.Args), "env": map[string]string{}}
		mcpNames = append(mcpNames, m.Name)
		if m.Tools == nil {
			allow = append(allow, "mcp__"+m.Name)
		}
		for _, t := range m.Tools {
			allow = append(allow, "mcp__"+m.Name+"__"+t)
		}
	}
	addDirs := slices.Concat(s.Workspace.ExtraDirs, s.WriteRoots, s.ReadRoots)
	addDirs = sortedSet(addDirs)
	perms := map[string]any{
		"allow": sortedSet(allow), "deny": sortedSet(deny), "ask": []string{},
		"defaultMode": "dontAsk", "disableBypassPermissionsMode": "disable", "denyInsteadOfPrompting": true,
		"additionalDirectories":                addDirs,
		"blockWritesOutsideWorkingDirectories": true,
		"blockReadsOutsideWorkingDirectories":  s.ReadRoots != nil,
	}
	settings := map[string]any{"permissions": perms}
	if sandbox {
		network := map[string]any{"allowedDomains": []string{}, "strictAllowlist": true}
		switch s.Network {
		case "allowlist":
			network["allowedDomains"] = nonNil(s.Hosts)
		case "on":
			network = map[string]any{"allowedDomains": []string{"*"}}
		}
		settings["sandbox"] = map[string]any{
			"enabled": true, "failIfUnavailable": true, "allowUnsandboxedCommands": false, "autoAllowBashIfSandboxed": false,
			"network": network,
			// nonNil: Claude's schema rejects null, and -p ignores a settings
			// file that fails validation (every rule and the sandbox with it).
			"filesystem": map[string]any{"allowWrite": nonNil(slices.Concat(s.Workspace.ExtraDirs, s.WriteRoots)),
				"denyRead": nonNil(s.DenyPaths), "denyWrite": nonNil(s.DenyPaths)},
		}
	}
	settingsJSON, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return nil, err
	}
	mcpJSON, err := json.MarshalIndent(map[string]any{"mcpServers": mcpServers}, "", "  ")
	if err != nil {
		return nil, err
	}
	settingsPath, mcpPath := RunDir+"/claude/settings.json", RunDir+"/claude/mcp.json"
	b.files = []File{{Path: settingsPath, Mode: 0o600, Content: string(settingsJSON) + "\n"}, {Path: mcpPath, Mode: 0o600, Content: string(mcpJSON) + "\n"}}
	b.argv = []string{exe, "-p", "--output-format", "stream-json", "--verbose",
		"--setting-sources", "", "--settings", settingsPath, "--strict-mcp-config", "--mcp-config", mcpPath,
		"--permission-mode", "dontAsk", "--permission-prompts", "none", "--tools", strings.Join(tools, ","),
		"--no-session-persistence"}
	for _, d := range addDirs {
		b.argv = append(b.argv, "--add-dir="+d)
	}
	if s.Model != "" {
		b.argv = append(b.argv, "--model", s.Model)
	}
	if s.Turns > 0 {
		b.argv = append(b.argv, "--max-turns", fmt.Sprint(s.Turns))
	}
	if s.CostMicroUSD > 0 {
		b.argv = append(b.argv, "--max-budget-usd", fmt.Sprintf("%d.%06d", s.CostMicroUSD/1e6, s.CostMicroUSD%1e6))
	}
	// The prompt is an operand after "--" (it ends variadic options too):
	// a prompt starting with '-' must never be read as an option.
	b.argv = append(b.argv, "--", Prompt)
	b.attestation = &Attestation{Event: "system/init", PermissionMode: "dontAsk", Tools: nonNil(tools), AdditionalDirs: addDirs, MCPServers: nonNil(mcpNames)}
	b.preflight = []PreflightStep{{Name: "claude doctor", Argv: []string{exe, "doctor"},
		Files: []File{{Path: ".claude/settings.json", Mode: 0o600, Content: string(settingsJSON) + "\n"}}}}
	set := func(cap string, keys ...string) { b.settings[cap] = keys }
	set(CapApprovalHeadless, "--permission-mode dontAsk", "--permission-prompts none", "permissions.defaultMode", "permissions.denyInsteadOfPrompting", "permissions.disableBypassPermissionsMode")
	set(CapApprovalAsk, "--permission-prompts none")
	set(CapToolsAllowlist, "--tools")
	set(CapToolsDeny, "permissions.deny")
	set(CapFSWriteRoots, "permissions.blockWritesOutsideWorkingDirectories", "--add-dir")
	set(CapFSReadRoots, "permissions.blockReadsOutsideWorkingDirectories", "--add-dir")
	set(CapFSDenyPaths, "permissions.deny Read()/Edit()")
	set(CapNetEgress, "permissions.deny WebFetch, WebSearch")
	set(CapNetAllowlist, "permissions.allow WebFetch(domain:…)")
	if sandbox {
		for _, c := range []string{CapFSWriteRoots, CapFSDenyPaths, CapFSReadRoots} {
			b.settings[c] = append(b.settings[c], "sandbox.enabled", "sandbox.failIfUnavailable", "sandbox.filesystem")
		}
		for _, c := range []string{CapNetEgress, CapNetAllowlist} {
			b.settings[c] = append(b.settings[c], "sandbox.enabled", "sandbox.failIfUnavailable", "sandbox.network")
		}
	}
	set(CapSubprocessAllow, "permissions.allow Bash(…)")
	set(CapSubprocessDeny, "permissions.deny Bash(…)")
	set(CapMCPServers, "--strict-mcp-config", "--mcp-config")
	set(CapTurns, "--max-turns")
	set(CapBudget, "--max-budget-usd")
	set(CapConfigIsolation, "--setting-sources \"\"", "--strict-mcp-config", "CLAUDE_CONFIG_DIR", "HOME")
	set(CapLaunchAttestation, "--output-format stream-json --verbose (system/init)")
	return b, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// claudeEvent is the part of a stream-json line the parser reads.
type claudeEvent struct {
	Type      string          `json:"type"`
	Subtype   string          `json:"subtype"`
	UUID      string          `json:"uuid"`
	SessionID string          `json:"session_id"`
	Error     string          `json:"error"`
	IsError   bool            `json:"is_error"`
	Result    string          `json:"result"`
	Attempt   int             `json:"attempt"`
	RawMsg    json.RawMessage `json:"message"`
	Message   struct {        // decoded from RawMsg when it is an object
		Content []struct {
			Type      string          `json:"type"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			Text      string          `json:"text"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		} `json:"content"`
	} `json:"-"`
	ToolResultMeta []struct {
		ID                 string `json:"id"`
		NonExecutionKind   string `json:"non_execution_kind"`
		PermissionDecision struct {
			Decision string `json:"decision"`
		} `json:"permission_decision"`
	} `json:"tool_result_meta"`
	PermissionDenials []json.RawMessage `json:"permission_denials"`
}

func (claudeCode) parse(line []byte, n int) []Observation {
	var e claudeEvent
	if json.Unmarshal(line, &e) != nil {
		return []Observation{{Kind: ObsError, Provider: "claude-code", Line: n, EventType: "unparsed", Text: clip(string(line)), IsError: true}}
	}
	if len(e.RawMsg) > 0 && e.RawMsg[0] == '{' {
		json.Unmarshal(e.RawMsg, &e.Message)
	}
	o := Observation{Provider: "claude-code", Line: n, EventType: e.Type, EventID: e.UUID, SessionID: e.SessionID}
	switch e.Type {
	case "system":
		o.EventType = "system/" + e.Subtype
		switch e.Subtype {
		case "init":
			o.Kind = ObsSessionStart
			o.Raw = append(json.RawMessage(nil), line...)
			return []Observation{o}
		case "api_retry":
			o.Kind, o.Text, o.IsError = ObsError, fmt.Sprintf("API retry, attempt %d", e.Attempt), true
			return []Observation{o}
		}
		return nil
	case "assistant":
		var out []Observation
		if e.Error != "" {
			x := o
			x.Kind, x.Text, x.IsError = ObsError, clip(e.Error), true
			out = append(out, x)
		}
		for _, c := range e.Message.Content {
			x := o
			switch c.Type {
			case "tool_use":
				x.Kind, x.ToolCallID, x.Tool, x.Input = ObsToolRequest, c.ID, c.Name, c.Input
			case "text":
				x.Kind, x.Text = ObsMessage, clip(c.Text)
			default:
				continue
			}
			out = append(out, x)
		}
		return out
	case "user":
		var out []Observation
		for _, c := range e.Message.Content {
			if c.Type != "tool_result" {
				continue
			}
			x := o
			x.Kind, x.ToolCallID, x.IsError = ObsToolResult, c.ToolUseID, c.IsError
			x.Text = clip(contentText(c.Content))
			for _, m := range e.ToolResultMeta {
				if m.ID == c.ToolUseID && (m.NonExecutionKind != "" || m.PermissionDecision.Decision == "reject") {
					x.Denied = true
				}
			}
			out = append(out, x)
		}
		return out
	case "result":
		o.EventType = "result/" + e.Subtype
		o.Kind, o.IsError, o.Text = ObsEnd, e.IsError, clip(e.Result)
		return []Observation{o}
	}
	return nil
}

// contentText flattens a tool_result content (a string or text blocks).
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &blocks)
	var parts []string
	for _, b := range blocks {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n")
}

// attest compares system/init with the plan: permission mode, built-in
// tools, additional directories and MCP server names must be exactly the
// planned ones.
func (claudeCode) attest(o Observation, a *Attestation) error {
	var init struct {
		PermissionMode string   `json:"permissionMode"`
		Tools          []string `json:"tools"`
		AdditionalDirs []string `json:"additional_directories"`
		MCPServers     []struct {
			Name string `json:"name"`
		} `json:"mcp_servers"`
	}
	if err := json.Unmarshal(o.Raw, &init); err != nil {
		return &AttestationError{"claude-code", []string{"system/init does not parse: " + err.Error()}}
	}
	var bad []string
	if init.PermissionMode != a.PermissionMode {
		bad = append(bad, fmt.Sprintf("permissionMode is %q, planned %q", init.PermissionMode, a.PermissionMode))
	}
	var builtin []string
	for _, t := range init.Tools {
		if !strings.HasPrefix(t, "mcp__") {
			builtin = append(builtin, t)
		}
	}
	if !sameSet(builtin, a.Tools) {
		bad = append(bad, fmt.Sprintf("tools are %v, planned %v", sortedSet(builtin), a.Tools))
	}
	if !sameSet(init.AdditionalDirs, a.AdditionalDirs) {
		bad = append(bad, fmt.Sprintf("additional_directories are %v, planned %v", sortedSet(init.AdditionalDirs), a.AdditionalDirs))
	}
	var servers []string
	for _, m := range init.MCPServers {
		servers = append(servers, m.Name)
	}
	if !sameSet(servers, a.MCPServers) {
		bad = append(bad, fmt.Sprintf("mcp_servers are %v, planned %v", sortedSet(servers), a.MCPServers))
	}
	if bad != nil {
		return &AttestationError{"claude-code", bad}
	}
	return nil
}

func sameSet(a, b []string) bool { return slices.Equal(sortedSet(a), sortedSet(b)) }
