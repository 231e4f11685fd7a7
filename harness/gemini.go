package harness

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// gemini is the Gemini CLI adapter (capability table GeminiCLI).
type gemini struct{}

func (gemini) name() string  { return "gemini-cli" }
func (gemini) table() *Table { return GeminiCLI }

// geminiTools maps neutral tool ids to Gemini CLI's built-in tools.
var geminiTools = map[string][]string{
	"bash": {"run_shell_command"}, "read_file": {"read_file", "read_many_files"}, "write_file": {"write_file"},
	"edit_file": {"replace"}, "list_files": {"list_directory", "glob"}, "search_files": {"grep_search"},
	"web_fetch": {"web_fetch"}, "web_search": {"google_web_search"},
}

// geminiCommandRule turns a command allow pattern into a policy rule. A
// pattern of literal tokens and a trailing "*" is a commandPrefix; any
// other is a commandRegex, which Gemini matches right after `"command":"`
// in the call's JSON, so a closing quote anchors its end.
func geminiCommandRule(p string) tomlRule {
	r := tomlRule{toolName: []string{"run_shell_command"}, decision: "allow", priority: 200}
	if rest, ok := strings.CutSuffix(p, " *"); ok && !strings.ContainsAny(rest, "*?") {
		r.commandPrefix = []string{rest}
		return r
	}
	r.commandRegex = geminiCommandRegex(p)
	return r
}

func geminiCommandRegex(p string) string {
	toks := strings.Fields(p)
	var b strings.Builder
	for i, t := range toks {
		if i == len(toks)-1 && t == "*" {
			b.WriteString(`[^"]*`)
			return b.String()
		}
		if i > 0 {
			b.WriteString(" ")
		}
		for _, r := range t {
			switch r {
			case '*':
				b.WriteString(`[^ "]*`)
			case '?':
				b.WriteString(`[^ "]`)
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
	}
	b.WriteString(`"`)
	return b.String()
}

type tomlRule struct {
	toolName      []string
	mcpName       string
	commandPrefix []string
	commandRegex  string
	decision      string
	priority      int
	denyMessage   string
}

func (r tomlRule) String() string {
	var b strings.Builder
	b.WriteString("[[rule]]\n")
	if len(r.toolName) == 1 {
		fmt.Fprintf(&b, "toolName = %s\n", tomlString(r.toolName[0]))
	} else if len(r.toolName) > 1 {
		fmt.Fprintf(&b, "toolName = %s\n", tomlStrings(r.toolName))
	}
	if r.mcpName != "" {
		fmt.Fprintf(&b, "mcpName = %s\n", tomlString(r.mcpName))
	}
	if r.commandPrefix != nil {
		fmt.Fprintf(&b, "commandPrefix = %s\n", tomlStrings(r.commandPrefix))
	}
	if r.commandRegex != "" {
		fmt.Fprintf(&b, "commandRegex = %s\n", tomlString(r.commandRegex))
	}
	fmt.Fprintf(&b, "decision = %s\npriority = %d\n", tomlString(r.decision), r.priority)
	if r.denyMessage != "" {
		fmt.Fprintf(&b, "denyMessage = %s\n", tomlString(r.denyMessage))
	}
	return b.String()
}

func (g gemini) build(s *Spec, probe *ProbeResult) (*build, error) {
	b := &build{settings: map[string][]string{}, evidence: []string{"stream:gemini-cli/stream-json"}}
	exe := probe.Executable
	home := RunDir + "/gemini-home"
	b.env = []EnvVar{{Name: "GEMINI_CLI_HOME", Value: home}, {Name: "GEMINI_CLI_NO_RELAUNCH", Value: "1"},
		{Name: "NO_COLOR", Value: "1"}}
	if s.Endpoint != "" {
		b.env = append(b.env, EnvVar{Name: "GOOGLE_GEMINI_BASE_URL", Value: s.Endpoint})
	}
	settings := map[string]any{
		"general": map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
		"privacy": map[string]any{"usageStatisticsEnabled": false},
	}
	security := map[string]any{"folderTrust": map[string]any{"enabled": true}}
	if slices.ContainsFunc(s.Secrets, func(x Secret) bool { return x.Name == "GEMINI_API_KEY" }) || slices.Contains(s.EnvAllow, "GEMINI_API_KEY") {
		security["auth"] = map[string]any{"selectedType": "gemini-api-key"}
	}
	settings["security"] = security
	if s.Yolo {
		b.legacy = true
		b.argv = []string{exe, "--prompt=" + Prompt, "-o", "stream-json", "--skip-trust", "--approval-mode", "yolo"}
		if s.Model != "" {
			b.argv = append(b.argv, "--model="+s.Model)
		}
		js, _ := json.MarshalIndent(settings, "", "  ")
		b.files = []File{{Path: home + "/.gemini/settings.json", Mode: 0o600, Content: string(js) + "\n"}}
		return b, nil
	}
	security["disableYoloMode"] = true
	tools := s.EffectiveTools()
	shell := slices.Contains(tools, "bash")
	// Under polc's sandbox Gemini's own cannot run (Landlock forbids the
	// mounts bubblewrap makes) and is not needed: polc's holds the shell.
	sandbox := shell && probe.Bwrap != "" && s.Sandbox != SandboxPolc
	if sandbox {
		b.conds |= CondSandbox
		b.helpers = []SandboxHelper{{Name: "bwrap", Path: probe.Bwrap}}
		security["toolSandboxing"] = true
	}
	if slices.Contains(tools, "write_file") || slices.Contains(tools, "edit_file") {
		// The read roots become workspace roots (--include-directories),
		// which the file tools may write as much as read.
		writable := slices.Concat(s.Workspace.Dirs(), s.WriteRoots)
		for _, r := range s.ReadRoots {
			if !slices.ContainsFunc(writable, func(w string) bool { return within(r, w) }) {
				b.conds |= CondWritableReadRoots
			}
		}
	}
	var secretNames []string
	for _, sec := range s.Secrets {
		secretNames = append(secretNames, sec.Name)
	}
	security["environmentVariableRedaction"] = map[string]any{"enabled": true, "blocked": nonNil(secretNames)}
	var core []string
	for _, t := range tools {
		core = append(core, geminiTools[t]...)
	}
	slices.Sort(core)
	toolsCfg := map[string]any{"core": nonNil(core), "sandboxNetworkAccess": s.Network == "on"}
	settings["tools"] = toolsCfg
	mcpServers := map[string]any{}
	var mcpNames []string
	for _, m := range s.MCP {
		srv := map[string]any{"command": m.Command, "args": nonNil(m.Args)}
		if m.Tools != nil {
			srv["includeTools"] = m.Tools
		}
		mcpServers[m.Name] = srv
		mcpNames = append(mcpNames, m.Name)
	}
	settings["mcpServers"] = mcpServers
	settings["mcp"] = map[string]any{"allowed": nonNil(mcpNames)}
	if s.Turns > 0 {
		settings["model"] = map[string]any{"maxSessionTurns": s.Turns}
	}
	// Admin-tier policy: deny everything, then allow what the plan allows,
	// then deny what it denies (higher priority wins; admin beats every
	// other tier, yolo included).
	rules := []tomlRule{{toolName: []string{"*"}, decision: "deny", priority: 1, denyMessage: "not allowed by the polc harness plan"}}
	var allowNames []string
	for _, t := range tools {
		if t != "bash" {
			allowNames = append(allowNames, geminiTools[t]...)
		}
	}
	if len(allowNames) > 0 {
		slices.Sort(allowNames)
		rules = append(rules, tomlRule{toolName: allowNames, decision: "allow", priority: 100})
	}
	if shell {
		if s.CommandsAllow == nil {
			rules = append(rules, tomlRule{toolName: []string{"run_shell_command"}, decision: "allow", priority: 100})
		}
		for _, c := range s.CommandsAllow {
			rules = append(rules, geminiCommandRule(c))
		}
	}
	// With mcpName set, Gemini prefixes toolName itself (mcp_NAME_TOOL,
	// "*" becoming mcp_NAME_*): a toolName already prefixed would match
	// no tool, the deny * rule would hide every tool of the server.
	for _, m := range s.MCP {
		if m.Tools == nil {
			rules = append(rules, tomlRule{toolName: []string{"*"}, mcpName: m.Name, decision: "allow", priority: 100})
		}
		for _, t := range m.Tools {
			rules = append(rules, tomlRule{toolName: []string{t}, mcpName: m.Name, decision: "allow", priority: 100})
		}
	}
	var denyNames []string
	for _, t := range s.ToolsDeny {
		denyNames = append(denyNames, geminiTools[t]...)
	}
	if s.Network == "off" {
		denyNames = append(denyNames, "web_fetch", "google_web_search")
	}
	if len(denyNames) > 0 {
		rules = append(rules, tomlRule{toolName: sortedSet(denyNames), decision: "deny", priority: 900, denyMessage: "denied by the polc harness plan"})
	}
	for _, c := range s.CommandsDeny {
		prefix, err := codexPrefix(c)
		if err != nil {
			return nil, err
		}
		rules = append(rules, tomlRule{toolName: []string{"run_shell_command"}, commandPrefix: []string{strings.Join(prefix, " ")}, decision: "deny", priority: 900, denyMessage: "denied by the polc harness plan"})
	}
	var policy strings.Builder
	policy.WriteString("# Generated by polc: admin-tier policy of one harness plan.\n")
	for _, r := range rules {
		policy.WriteString("\n" + r.String())
	}
	js, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return nil, err
	}
	policyPath := RunDir + "/gemini/policy.toml"
	b.files = []File{{Path: home + "/.gemini/settings.json", Mode: 0o600, Content: string(js) + "\n"},
		{Path: policyPath, Mode: 0o600, Content: policy.String()}}
	// The prompt is glued to its option: yargs reads a separate value that
	// starts with '-' as an option of its own, so "-p --yolo" would not be
	// a prompt.
	b.argv = []string{exe, "--prompt=" + Prompt, "-o", "stream-json", "--skip-trust", "--approval-mode", "default", "--admin-policy", policyPath}
	for _, d := range sortedSet(slices.Concat(s.Workspace.ExtraDirs, s.WriteRoots, s.ReadRoots)) {
		if strings.Contains(d, ",") || strings.TrimSpace(d) != d {
			// Gemini splits each value on commas and trims the parts:
			// "a,/etc" would make /etc a workspace root.
			return nil, fmt.Errorf("directory %q: gemini-cli splits --include-directories on ',' and trims spaces, so it cannot be passed", d)
		}
		b.argv = append(b.argv, "--include-directories", d)
	}
	if s.Model != "" {
		b.argv = append(b.argv, "--model="+s.Model)
	}
	set := func(cap string, keys ...string) { b.settings[cap] = keys }
	set(CapApprovalHeadless, "-p (headless)", "--approval-mode default", "--admin-policy (deny *)", "security.disableYoloMode")
	set(CapToolsAllowlist, "tools.core", "--admin-policy")
	set(CapToolsDeny, "--admin-policy")
	set(CapFSWriteRoots, "--include-directories")
	set(CapFSReadRoots, "--include-directories")
	set(CapNetEgress, "--admin-policy deny web_fetch, google_web_search", "tools.sandboxNetworkAccess=false")
	if sandbox {
		b.settings[CapFSWriteRoots] = append(b.settings[CapFSWriteRoots], "security.toolSandboxing")
		b.settings[CapNetEgress] = append(b.settings[CapNetEgress], "security.toolSandboxing")
	}
	set(CapSubprocessAllow, "--admin-policy run_shell_command commandRegex")
	set(CapSubprocessDeny, "--admin-policy run_shell_command commandPrefix")
	set(CapMCPServers, "mcpServers", "mcp.allowed", "--admin-policy")
	set(CapEnvSecrets, "security.environmentVariableRedaction")
	set(CapTurns, "model.maxSessionTurns")
	set(CapConfigIsolation, "GEMINI_CLI_HOME", "HOME", "--admin-policy")
	return b, nil
}

// within reports whether path p is root or lies under it (both clean and
// absolute).
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

type geminiEvent struct {
	Type       string          `json:"type"`
	SessionID  string          `json:"session_id"`
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"`
	Status     string          `json:"status"`
	Output     string          `json:"output"`
	Severity   string          `json:"severity"`
	Message    string          `json:"message"`
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func (gemini) parse(line []byte, n int) []Observation {
	var e geminiEvent
	if json.Unmarshal(line, &e) != nil {
		return []Observation{{Kind: ObsError, Provider: "gemini-cli", Line: n, EventType: "unparsed", Text: clip(string(line)), IsError: true}}
	}
	o := Observation{Provider: "gemini-cli", Line: n, EventType: e.Type, SessionID: e.SessionID}
	switch e.Type {
	case "init":
		o.Kind, o.EventID = ObsSessionStart, e.SessionID
		o.Raw = append(json.RawMessage(nil), line...)
	case "message":
		if e.Role != "assistant" {
			return nil
		}
		o.Kind, o.Text = ObsMessage, clip(e.Content)
	case "tool_use":
		o.Kind, o.EventID, o.ToolCallID, o.Tool, o.Input = ObsToolRequest, e.ToolID, e.ToolID, e.ToolName, e.Parameters
	case "tool_result":
		o.Kind, o.EventID, o.ToolCallID, o.Text = ObsToolResult, e.ToolID, e.ToolID, clip(e.Output)
		o.IsError = e.Status != "success"
		if e.Error != nil {
			o.Denied = e.Error.Type == "policy_violation" || e.Error.Type == "tool_not_registered"
		}
	case "error":
		o.Kind, o.Text, o.IsError = ObsError, clip(e.Message), e.Severity != "warning"
	case "result":
		o.Kind, o.IsError = ObsEnd, e.Status != "success"
		if e.Error != nil {
			o.Text = clip(e.Error.Type + ": " + e.Error.Message)
		}
	default:
		return nil
	}
	return []Observation{o}
}

func (gemini) attest(Observation, *Attestation) error { return nil }
