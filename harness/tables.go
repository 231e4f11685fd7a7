package harness

import "slices"

// Cond is a set of facts about one compiled plan that decide which row of
// a capability table applies.
type Cond uint

// Conditions.
const (
	// CondShell: the plan gives the agent a shell tool.
	CondShell Cond = 1 << iota
	// CondSandbox: the plan runs the shell inside an OS sandbox.
	CondSandbox
	// CondMCP: the plan starts MCP servers (which no provider sandboxes).
	CondMCP
	// CondRunners: the allowed commands include one that runs other
	// programs (an interpreter, a shell, a build tool) or any command.
	CondRunners
	// CondYolo: the plan is a provider's legacy yolo profile.
	CondYolo
	// CondToolsExact: the provider can express the requested tool
	// allow/deny sets exactly.
	CondToolsExact
	// CondWritableReadRoots: the plan gives the agent a file-writing tool
	// and the provider can make a read root readable only by making it a
	// writable working directory (Gemini's --include-directories).
	CondWritableReadRoots
	// CondWideAllow: a command allow pattern becomes a provider rule that
	// matches more commands than the pattern (Claude's '*' spans spaces).
	CondWideAllow
	// CondPreapprovedHosts: the plan allows a web tool that the provider
	// lets reach built-in hosts without any rule (Claude's WebFetch).
	CondPreapprovedHosts
	// CondPolc: polc's Landlock sandbox holds the provider and everything
	// it starts (spec field sandbox: polc); the provider's own is off.
	CondPolc
	// CondModelViaProxy: under polc's sandbox the model API is not on
	// loopback, so polc's egress proxy admits its host, for the agent's
	// tools too.
	CondModelViaProxy
	// CondGoverned: the agent's tools are a polc mcp session's (spec
	// section governed); the provider's own are off.
	CondGoverned
	// CondForeignMCP: a governed plan also starts declared MCP servers.
	CondForeignMCP
)

// Row is one line of a capability table: when every condition in When
// holds and none in Unless, the capability has this status.
type Row struct {
	Capability string
	When       Cond
	Unless     Cond
	Status     Status
	Sources    []Source
	Reason     string
	// Evidence is what established the row: citations separated by "; ",
	// each a test of this repository ("harness/real_rows_test.go
	// TestRealEnforcedRows/codex/shell") or a section of one of its docs
	// ("docs/agent-clis.md Codex: the sandbox", the heading's text). An
	// enforced row cites exactly one real-CLI test
	// (TestEveryEnforcedRowCitesARealTest); TestEveryRowCitationResolves
	// checks that each citation names a file, test and heading that exist.
	Evidence string
}

// Table is the capability table of one provider, valid for the listed
// versions only: they are the versions whose behaviour was established by
// running them (docs/harness.md). Rows are tried in order; the first that
// matches decides.
type Table struct {
	Provider string
	Versions []string
	Rows     []Row
}

// Supports reports whether the table applies to version.
func (t *Table) Supports(version string) bool { return slices.Contains(t.Versions, version) }

// Decide returns the row for a capability under conditions c; ok is false
// when the table has no row for it, which Compile reports as unsupported.
func (t *Table) Decide(capability string, c Cond) (Row, bool) {
	for _, r := range t.Rows {
		if r.Capability == capability && c&r.When == r.When && c&r.Unless == 0 {
			return r, true
		}
	}
	return Row{}, false
}

func src(by, scope string) Source { return Source{By: by, Scope: scope} }

var (
	byProvider = func(scope string) Source { return src(SourceProvider, scope) }
	byBwrap    = func(scope string) Source { return src(SourceOSSandboxPrefix+"bubblewrap", scope) }
	byHarness  = func(scope string) Source { return src(SourceHarness, scope) }
	byPolc     = func(scope string) Source { return src(LandlockSource, scope) }
)

// Evidence and reasons of the rows that rest on polc's sandbox.
const (
	polcEvidence     = "docs/harness.md polc's sandbox"
	polcMCPReason    = "MCP servers are started by the provider inside polc's sandbox too, but no real-CLI test has shown one held by it"
	polcModelReason  = "the model API is not on loopback, so polc's egress proxy admits its host, to the agent's tools as much as to the provider"
	polcScope        = "the provider process and every process it starts"
	polcWriteReason  = "Landlock grants writes only to the working dirs, the write roots and the run's private directory (the provider's HOME, config and TMPDIR, removed after the run); the provider's own sandbox is off"
	polcReadReason   = "Landlock grants reads only to the working dirs, the read and write roots, the run's private directory, the provider's install directory and the system paths (docs/harness.md polc's sandbox)"
	polcDenyReason   = "Landlock carves the deny paths out of every grant, for the provider and everything it starts"
	polcEgressReason = "the provider runs in a network namespace without interfaces; Landlock allows TCP connect only to the forwarded loopback model endpoint"
	polcAllowReason  = "the provider runs in a network namespace whose only way out is polc's egress proxy, which admits only the allowed hosts"
)

// polcRows are the rows of a provider whose own sandbox polc's replaces;
// evidence names the provider's real-CLI cases (c is the case prefix).
// fileTools names the provider's file tools that confine themselves, or
// "" when the provider has none (Codex: its file edits are bounded by the
// sandbox alone, and its own is off).
func polcRows(c string, fileTools, webTools string) []Row {
	real := "harness/real_rows_test.go TestRealEnforcedRows/" + c
	fs := []Source{byPolc(polcScope)}
	if fileTools != "" {
		fs = []Source{byProvider(fileTools), byPolc(polcScope)}
	}
	return []Row{
		{Capability: CapFSWriteRoots, When: CondPolc | CondMCP, Status: Degraded, Sources: fs,
			Reason: polcMCPReason, Evidence: polcEvidence},
		{Capability: CapFSWriteRoots, When: CondPolc, Status: Enforced, Sources: fs,
			Reason: polcWriteReason, Evidence: real + "/polc"},
		{Capability: CapFSReadRoots, When: CondPolc | CondMCP, Status: Degraded, Sources: fs,
			Reason: polcMCPReason, Evidence: polcEvidence},
		{Capability: CapFSReadRoots, When: CondPolc, Status: Enforced, Sources: fs,
			Reason: polcReadReason, Evidence: real + "/polc"},
		{Capability: CapFSDenyPaths, When: CondPolc | CondMCP, Status: Degraded, Sources: []Source{byPolc(polcScope)},
			Reason: polcMCPReason, Evidence: polcEvidence},
		{Capability: CapFSDenyPaths, When: CondPolc, Status: Enforced, Sources: []Source{byPolc(polcScope)},
			Reason: polcDenyReason, Evidence: real + "/polc"},
		{Capability: CapNetEgress, When: CondPolc | CondMCP, Status: Degraded, Sources: []Source{byProvider(webTools), byPolc(polcScope)},
			Reason: polcMCPReason, Evidence: polcEvidence},
		{Capability: CapNetEgress, When: CondPolc | CondModelViaProxy, Status: Degraded, Sources: []Source{byProvider(webTools), byPolc(polcScope)},
			Reason: polcModelReason, Evidence: polcEvidence},
		{Capability: CapNetEgress, When: CondPolc, Status: Enforced, Sources: []Source{byProvider(webTools), byPolc(polcScope)},
			Reason: polcEgressReason, Evidence: real + "/polc"},
		{Capability: CapNetAllowlist, When: CondPolc | CondMCP, Status: Degraded, Sources: []Source{byPolc(polcScope)},
			Reason: polcMCPReason, Evidence: polcEvidence},
		{Capability: CapNetAllowlist, When: CondPolc | CondModelViaProxy, Status: Degraded, Sources: []Source{byPolc(polcScope)},
			Reason: polcModelReason, Evidence: polcEvidence},
		{Capability: CapNetAllowlist, When: CondPolc, Status: Enforced, Sources: []Source{byPolc(polcScope + " (egress proxy)")},
			Reason: polcAllowReason, Evidence: real + "/polc-allowlist"},
	}
}

// harnessRows are the controls polc enforces itself, whatever the provider.
var harnessRows = []Row{
	{Capability: CapEnvAllowlist, Status: Enforced,
		Sources:  []Source{byHarness("the provider process environment")},
		Reason:   "polc starts the provider with exactly the planned variables (allowlisted names and secret references); the provider passes them on to its tools as its own rows for env.secret_isolation/v1 say",
		Evidence: "harness/real_overclaim_test.go TestRealSubprocessAllowOutside"},
	{Capability: CapWallClock, Status: Enforced,
		Sources:  []Source{byHarness("the provider's process group")},
		Reason:   "polc kills the provider's process group when the wall clock runs out; no provider has a limit of its own, and offline they retry for a long time or forever",
		Evidence: "harness/real_more_test.go TestWatchdogKillsRetryingProvider"},
}

const yoloReason = "the legacy yolo profile sets nothing that enforces this"

// Evidence cited by many rows: docs/agent-clis.md sections.
const (
	yoloEvidence    = "docs/agent-clis.md Legacy yolo profiles"
	outsideEvidence = "docs/agent-clis.md What runs outside every sandbox"
)

// ClaudeCode is the capability table of Claude Code.
var ClaudeCode = &Table{Provider: "claude-code", Versions: []string{"2.1.328"}, Rows: slices.Concat(polcRows("claude-code", "file tools", "WebFetch, WebSearch"), []Row{
	// approval
	{Capability: CapApprovalHeadless, When: CondYolo, Status: Unsupported, Reason: "legacy yolo is --dangerously-skip-permissions (bypassPermissions): every call is approved; as root Claude refuses to start unless IS_SANDBOX=1", Evidence: yoloEvidence},
	{Capability: CapApprovalHeadless, Status: Enforced, Sources: []Source{byProvider("every tool call")},
		Reason:   "--permission-mode dontAsk and --permission-prompts none refuse every call that no allow rule pre-approves; nobody is asked",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	{Capability: CapApprovalAsk, Status: Degraded, Sources: []Source{byProvider("every tool call")},
		Reason:   "headless -p has no approval surface: a call that would ask is refused instead (no permission host is implemented)",
		Evidence: "docs/agent-clis.md Claude Code: approval"},
	// tools
	{Capability: CapToolsAllowlist, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapToolsAllowlist, Status: Enforced, Sources: []Source{byProvider("built-in tools offered to the model")},
		Reason:   "--tools lists exactly the allowed built-in tools; the others are not in the model's context, and system/init.tools echoes the list",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	{Capability: CapToolsDeny, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapToolsDeny, Status: Enforced, Sources: []Source{byProvider("built-in tools offered to the model")},
		Reason:   "a bare deny rule removes the tool from the model's context (deny wins over allow, also under bypass)",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	// filesystem
	{Capability: CapFSWriteRoots, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapFSWriteRoots, When: CondShell | CondSandbox | CondMCP, Status: Degraded,
		Sources:  []Source{byProvider("file tools"), byBwrap("Bash and its children")},
		Reason:   "MCP servers run outside the sandbox and are not confined",
		Evidence: outsideEvidence},
	{Capability: CapFSWriteRoots, When: CondShell | CondSandbox, Status: Enforced,
		Sources:  []Source{byProvider("file tools"), byBwrap("Bash and its children")},
		Reason:   "blockWritesOutsideWorkingDirectories confines the file tools; the Bash sandbox (sandbox.enabled, failIfUnavailable, allowUnsandboxedCommands false) allows writes only to the working dirs",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/sandbox"},
	{Capability: CapFSWriteRoots, When: CondShell, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason:   "only the file tools are confined (blockWritesOutsideWorkingDirectories, which 'does not limit shell commands'); without bubblewrap and socat on the provider's PATH (the probe evidence says which it found) there is no Bash sandbox, so a command run through Bash writes anywhere the user can",
		Evidence: "docs/harness.md Sandbox helpers; harness/sandbox_helpers_test.go TestProbeHelpersOnProviderPath"},
	{Capability: CapFSWriteRoots, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason: "MCP servers are not confined", Evidence: outsideEvidence},
	{Capability: CapFSWriteRoots, Status: Enforced, Sources: []Source{byProvider("file tools")},
		Reason:   "the plan has no shell and no MCP server; Write/Edit/NotebookEdit outside the working dirs are refused (blockWritesOutsideWorkingDirectories)",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	{Capability: CapFSReadRoots, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapFSReadRoots, When: CondShell | CondSandbox, Status: Degraded,
		Sources:  []Source{byProvider("file tools"), byBwrap("Bash and its children")},
		Reason:   "the Bash sandbox reads the whole disk except denyRead paths; that blockReadsOutsideWorkingDirectories also denies sandbox reads is read from the settings schema, not observed",
		Evidence: "docs/agent-clis.md Claude Code: the Bash sandbox"},
	{Capability: CapFSReadRoots, When: CondShell, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason:   "only the file tools are confined (blockReadsOutsideWorkingDirectories); a program run through Bash reads anything the user can",
		Evidence: "docs/agent-clis.md Claude Code: Bash without the sandbox"},
	{Capability: CapFSReadRoots, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason: "MCP servers are not confined", Evidence: outsideEvidence},
	{Capability: CapFSReadRoots, Status: Enforced, Sources: []Source{byProvider("file tools")},
		Reason:   "the plan has no shell and no MCP server; blockReadsOutsideWorkingDirectories refuses file-tool reads outside the working dirs",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	{Capability: CapFSDenyPaths, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapFSDenyPaths, When: CondShell | CondSandbox | CondMCP, Status: Degraded,
		Sources: []Source{byProvider("file tools"), byBwrap("Bash and its children")},
		Reason:  "MCP servers are not confined", Evidence: outsideEvidence},
	{Capability: CapFSDenyPaths, When: CondShell | CondSandbox, Status: Enforced,
		Sources:  []Source{byProvider("file tools"), byBwrap("Bash and its children")},
		Reason:   "Read()/Edit() deny rules for the file tools, sandbox.filesystem.denyRead/denyWrite for Bash",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/sandbox"},
	{Capability: CapFSDenyPaths, When: CondShell, Status: Degraded, Sources: []Source{byProvider("file tools and commands that name the path")},
		Reason:   "Read()/Edit() deny rules are matched in the Claude process: cat of a denied file is refused, but python3 -c \"open('…')\" under an allowed Bash rule read it",
		Evidence: "docs/agent-clis.md Claude Code: Bash without the sandbox"},
	{Capability: CapFSDenyPaths, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason: "MCP servers are not confined", Evidence: outsideEvidence},
	{Capability: CapFSDenyPaths, Status: Enforced, Sources: []Source{byProvider("file tools")},
		Reason:   "the plan has no shell and no MCP server; Read()/Edit() deny rules refuse the paths",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	// network
	{Capability: CapNetEgress, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapNetEgress, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("WebFetch, WebSearch")},
		Reason: "MCP servers run outside every sandbox and keep their network", Evidence: outsideEvidence},
	{Capability: CapNetEgress, When: CondShell | CondSandbox, Status: Enforced,
		Sources:  []Source{byProvider("WebFetch, WebSearch"), byBwrap("Bash and its children (network namespace and proxy, empty allowedDomains, strictAllowlist)")},
		Reason:   "web tools are denied in the Claude process; Bash runs in the sandbox with no allowed domain",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/sandbox"},
	{Capability: CapNetEgress, When: CondShell, Status: Unsupported, Sources: []Source{byProvider("WebFetch, WebSearch")},
		Reason:   "without the Bash sandbox there is no network control for Bash at all: curl under an allowed Bash rule reached the network with WebFetch denied",
		Evidence: "docs/agent-clis.md Claude Code: Bash without the sandbox"},
	{Capability: CapNetEgress, Status: Enforced, Sources: []Source{byProvider("WebFetch, WebSearch")},
		Reason:   "the plan has no shell and no MCP server; the only network tools, WebFetch and WebSearch, are denied",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	{Capability: CapNetAllowlist, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapNetAllowlist, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("WebFetch")},
		Reason: "MCP servers run outside every sandbox and keep their network", Evidence: outsideEvidence},
	{Capability: CapNetAllowlist, When: CondPreapprovedHosts, Status: Degraded, Sources: []Source{byProvider("WebFetch(domain:…) rules; WebSearch denied")},
		Reason:   "WebFetch also reaches Claude Code's built-in preapproved documentation hosts (docs.python.org, developer.mozilla.org, github.com/anthropics, …) without any allow rule, and asks claude.ai whether a domain is safe before fetching",
		Evidence: "harness/review_harness_test.go TestReviewRealClaudeWebFetchPreapproved; docs/agent-clis.md Claude Code: web tools"},
	{Capability: CapNetAllowlist, When: CondShell | CondSandbox, Status: Enforced,
		Sources:  []Source{byProvider("WebFetch(domain:…) rules; WebSearch denied"), byBwrap("Bash and its children (sandbox.network.allowedDomains, strictAllowlist)")},
		Reason:   "strictAllowlist denies unlisted hosts for sandboxed commands",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/sandbox-allowlist"},
	{Capability: CapNetAllowlist, When: CondShell, Status: Unsupported, Sources: []Source{byProvider("WebFetch(domain:…) rules")},
		Reason: "without the Bash sandbox, Bash has unrestricted network", Evidence: "docs/agent-clis.md Claude Code: Bash without the sandbox"},
	{Capability: CapNetAllowlist, Status: Enforced, Sources: []Source{byProvider("WebFetch(domain:…) rules; WebSearch denied")},
		Reason:   "the plan has no shell and no MCP server; WebFetch is allowed only for the listed domains",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/net-allowlist"},
	// subprocess
	{Capability: CapSubprocessAllow, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapSubprocessAllow, When: CondShell | CondRunners, Status: Degraded, Sources: []Source{byProvider("Bash command text")},
		Reason:   "Bash(…) allow rules match the command as the agent spells it; an allowed command that runs other programs (an interpreter, a shell, a build tool, or any command) runs them unchecked",
		Evidence: "docs/agent-clis.md Claude Code: Bash without the sandbox"},
	{Capability: CapSubprocessAllow, When: CondShell | CondWideAllow, Status: Degraded, Sources: []Source{byProvider("Bash command text")},
		Reason:   "Claude's '*' matches any run of characters, spaces included: an allow pattern with '*' inside a token or before its last token (\"cat *.md\") becomes a rule that also allows other arguments (\"cat /etc/passwd x.md\")",
		Evidence: "harness/review_harness_test.go TestReviewClaudeWideAllowNotEnforced; docs/agent-clis.md Claude Code: tools and rules"},
	{Capability: CapSubprocessAllow, When: CondShell, Status: Degraded, Sources: []Source{byProvider("Bash command text")},
		Reason:   "Claude Code runs every command its own classifier takes for read-only (cat, grep -r, find, ps aux, id, uname -a, …) without any allow rule, in dontAsk mode too, so the shell is not confined to the allowed commands: they read the workspace and the host as the user can. Deny rules still win over that approval; no setting turns it off (a PreToolUse hook sees those commands, but polc installs none)",
		Evidence: "harness/real_overclaim_test.go TestRealSubprocessAllowOutside"},
	{Capability: CapSubprocessAllow, Status: Enforced, Sources: []Source{byProvider("--tools without Bash")},
		Reason:   "the plan has no shell tool: Bash is not among the tools Claude offers or runs",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	{Capability: CapSubprocessDeny, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapSubprocessDeny, When: CondShell | CondRunners, Status: Degraded, Sources: []Source{byProvider("Bash command text")},
		Reason:   "Bash(…) deny rules match the command as the agent spells it; an allowed command that runs other programs can run a denied one",
		Evidence: "docs/agent-clis.md Claude Code: Bash without the sandbox"},
	{Capability: CapSubprocessDeny, Status: Enforced, Sources: []Source{byProvider("Bash command text")},
		Reason:   "deny rules win over allow rules and bypass; compound commands are split; no allowed command runs other programs",
		Evidence: "harness/real_deny_test.go TestRealSubprocessDeny"},
	// MCP, env, resources, config, attestation
	{Capability: CapMCPServers, When: CondYolo, Status: Unsupported, Reason: "the legacy yolo profile loads the user's and project's MCP configuration", Evidence: yoloEvidence},
	{Capability: CapMCPServers, Status: Enforced, Sources: []Source{byProvider("MCP server set and tool rules")},
		Reason:   "--strict-mcp-config with --mcp-config loads exactly the declared servers (system/init echoes them); mcp__server__tool rules allow only the declared tools. The servers themselves run unsandboxed",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/mcp"},
	{Capability: CapEnvSecrets, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapEnvSecrets, When: CondShell, Status: Unsupported,
		Reason:   "Claude has no inherit filter for tool subprocesses: every variable of the provider's environment, secrets such as ANTHROPIC_API_KEY included, reaches Bash (CLAUDE_CODE_SUBPROCESS_ENV_SCRUB needs bubblewrap and was not observed)",
		Evidence: "harness/real_more_test.go TestClaudeShellSeesSecretRedacted; docs/agent-clis.md Claude Code: environment"},
	{Capability: CapEnvSecrets, When: CondMCP, Status: Unsupported,
		Reason: "MCP stdio servers inherit the provider's environment", Evidence: "docs/agent-clis.md Claude Code: environment"},
	{Capability: CapEnvSecrets, Status: Enforced, Sources: []Source{byProvider("tool set")},
		Reason:   "the plan gives the agent no shell and no MCP server, so no subprocess of the agent's exists to receive a secret",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-shell"},
	{Capability: CapTurns, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapTurns, Status: Enforced, Sources: []Source{byProvider("model turns")},
		Reason: "--max-turns ends the run with result subtype error_max_turns", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/turns"},
	{Capability: CapBudget, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapBudget, Status: Enforced, Sources: []Source{byProvider("model cost, as Claude computes it")},
		Reason: "--max-budget-usd ends the run with result subtype error_max_budget_usd", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/claude-code/budget"},
	{Capability: CapConfigIsolation, When: CondYolo, Status: Unsupported, Reason: "the legacy yolo profile loads user, project and local settings", Evidence: yoloEvidence},
	{Capability: CapConfigIsolation, Status: Enforced, Sources: []Source{byProvider("settings sources"), byHarness("private HOME and CLAUDE_CONFIG_DIR")},
		Reason:   "--setting-sources \"\" loads no user, project or local settings; --strict-mcp-config ignores .mcp.json. Managed settings (/etc/claude-code) still apply, as they are meant to",
		Evidence: "harness/real_workspace_config_test.go TestRealWorkspaceConfigNotLoaded"},
	{Capability: CapLaunchAttestation, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapLaunchAttestation, Status: Enforced, Sources: []Source{byProvider("system/init event"), byHarness("compared with the plan; the run is stopped on a mismatch")},
		Reason:   "system/init echoes permissionMode, tools, additional_directories and mcp_servers; polc stops the run when they differ from the plan",
		Evidence: "harness/real_more_test.go TestClaudeAttestationMismatchStops"},
}, harnessRows)}

// Codex is the capability table of the Codex CLI.
var Codex = &Table{Provider: "codex", Versions: []string{"0.169.0"}, Rows: slices.Concat(polcRows("codex", "", "web_search disabled"), []Row{
	{Capability: CapApprovalHeadless, When: CondPolc, Status: Enforced, Sources: []Source{byProvider("every command")},
		Reason:   "codex exec with approval_policy never asks nobody: a command that asks for escalated permissions is rejected (\"approval policy is Never\"); under polc's sandbox Codex's own is off (danger-full-access), so every other command runs without asking, inside polc's sandbox",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/polc"},
	{Capability: CapApprovalHeadless, When: CondYolo, Status: Enforced, Sources: []Source{byProvider("escalations out of the sandbox")},
		Reason:   "the legacy profile sets no approval policy, but codex exec asks nobody: a command that asks to leave the sandbox is refused",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/legacy-yolo"},
	{Capability: CapApprovalHeadless, Status: Enforced, Sources: []Source{byProvider("escalations out of the sandbox")},
		Reason:   "codex exec with approval_policy never asks nobody: a command that needs more than the sandbox allows fails",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/shell"},
	{Capability: CapApprovalAsk, Status: Degraded, Sources: []Source{byProvider("escalations out of the sandbox")},
		Reason:   "exec never prompts; on-request routes to an LLM reviewer, not a human, so ask becomes deny",
		Evidence: "docs/agent-clis.md Codex: approval"},
	{Capability: CapToolsAllowlist, When: CondToolsExact, Unless: CondYolo, Status: Enforced, Sources: []Source{byProvider("feature toggles")},
		Reason:   "the requested set differs from Codex's own only in the shell (features.shell_tool) and web search (web_search), which have switches",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/no-shell"},
	{Capability: CapToolsAllowlist, Status: Degraded, Sources: []Source{byProvider("feature toggles")},
		Reason:   "Codex has no per-tool list: only the shell (features.shell_tool) and web search (web_search) can be switched off; reading and editing files have no switch and are bounded by the sandbox only",
		Evidence: "docs/agent-clis.md Codex: tools"},
	{Capability: CapToolsDeny, When: CondToolsExact, Unless: CondYolo, Status: Enforced, Sources: []Source{byProvider("feature toggles")},
		Reason:   "every denied tool has a switch (features.shell_tool, web_search)",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/no-shell"},
	{Capability: CapToolsDeny, Status: Degraded, Sources: []Source{byProvider("feature toggles")},
		Reason:   "only the shell and web search can be switched off; file reading and editing cannot be denied",
		Evidence: "docs/agent-clis.md Codex: tools"},
	{Capability: CapFSWriteRoots, When: CondYolo, Status: Degraded, Sources: []Source{byBwrap("every command (bwrap + seccomp)")},
		Reason:   "legacy yolo is --sandbox workspace-write, which also makes /tmp and $TMPDIR writable",
		Evidence: "docs/agent-clis.md Codex: the sandbox; docs/agent-clis.md Legacy yolo profiles"},
	{Capability: CapFSWriteRoots, When: CondMCP, Status: Degraded, Sources: []Source{byBwrap("every command (bwrap + seccomp)")},
		Reason: "MCP servers run outside the sandbox", Evidence: outsideEvidence},
	{Capability: CapFSWriteRoots, Status: Enforced, Sources: []Source{byBwrap("every command the agent runs (bwrap + seccomp, Codex's bundled bubblewrap)")},
		Reason:   "workspace-write with exclude_slash_tmp and exclude_tmpdir_env_var: only the workdir and --add-dir roots are writable (a write to /etc or /tmp fails with Read-only file system); cwd/.git and cwd/.codex stay read-only",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/shell"},
	{Capability: CapFSReadRoots, Status: Unsupported,
		Reason:   "the sandbox modes read the whole disk; only beta permission profiles deny reads, and they do not compose with sandbox_mode",
		Evidence: "docs/agent-clis.md Codex: the sandbox"},
	{Capability: CapFSDenyPaths, Status: Unsupported,
		Reason:   "no deny path outside beta permission profiles (which do not compose with sandbox_mode): a deny path inside the workdir stays readable and writable",
		Evidence: "docs/agent-clis.md Codex: the sandbox"},
	{Capability: CapNetEgress, When: CondMCP, Status: Degraded, Sources: []Source{byBwrap("every command (seccomp)"), byProvider("web_search")},
		Reason: "MCP servers run outside the sandbox and keep their network", Evidence: outsideEvidence},
	{Capability: CapNetEgress, When: CondYolo, Status: Degraded, Sources: []Source{byBwrap("every command (seccomp)")},
		Reason: "legacy yolo leaves web_search at Codex's default", Evidence: yoloEvidence},
	{Capability: CapNetEgress, Status: Enforced, Sources: []Source{byBwrap("every command (seccomp: socket/connect fail with EPERM, loopback too)"), byProvider("web_search disabled")},
		Reason:   "sandbox_workspace_write.network_access = false; web_search = \"disabled\"",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/shell"},
	{Capability: CapNetAllowlist, Status: Unsupported,
		Reason:   "domain rules are enforced only with the experimental features.network_proxy and a beta permission profile, and silently fail open without it; polc does not enable experimental features",
		Evidence: "docs/agent-clis.md Codex: the sandbox"},
	{Capability: CapSubprocessAllow, Unless: CondShell, Status: Enforced, Sources: []Source{byProvider("features.shell_tool = false")},
		Reason: "the plan has no shell tool", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/no-shell"},
	{Capability: CapSubprocessAllow, Status: Unsupported,
		Reason:   "prefix rules decide only commands that ask to leave the sandbox; inside it any command runs",
		Evidence: "docs/agent-clis.md Codex: command rules"},
	{Capability: CapSubprocessDeny, Unless: CondShell, Status: Enforced, Sources: []Source{byProvider("features.shell_tool = false")},
		Reason: "the plan has no shell tool", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/no-shell"},
	{Capability: CapSubprocessDeny, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapSubprocessDeny, Status: Degraded, Sources: []Source{byProvider("prefix_rule forbidden ($CODEX_HOME/rules)")},
		Reason:   "prefix rules match the argv the model asks for; a command run by another (an interpreter, a shell script) is not matched, nor one asked for behind an environment assignment (FOO=1 touch … ran under a forbidden touch rule)",
		Evidence: "harness/review_harness_test.go TestReviewRealDenyEnvPrefix; docs/agent-clis.md Codex: command rules"},
	{Capability: CapMCPServers, When: CondYolo, Status: Unsupported, Reason: "the legacy yolo profile loads the user's config.toml and its MCP servers", Evidence: yoloEvidence},
	{Capability: CapMCPServers, Status: Enforced, Sources: []Source{byProvider("MCP server set and enabled_tools")},
		Reason:   "--ignore-user-config with a private CODEX_HOME: only the -c mcp_servers.* entries of the plan exist, each with enabled_tools. The servers themselves run unsandboxed",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/codex/mcp"},
	{Capability: CapEnvSecrets, When: CondYolo, Status: Unsupported, Reason: "Codex's default shell environment policy passes secrets through (FOO_TOKEN was visible)", Evidence: "docs/agent-clis.md Legacy yolo profiles; docs/agent-clis.md Codex: shell environment"},
	{Capability: CapEnvSecrets, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("shell environment policy")},
		Reason: "MCP servers are started by Codex outside the shell environment policy", Evidence: "docs/agent-clis.md Codex: shell environment"},
	{Capability: CapEnvSecrets, Status: Enforced, Sources: []Source{byProvider("shell environment policy (built before each command is spawned)")},
		Reason:   "shell_environment_policy excludes the secret variables (and ignore_default_excludes = false drops *KEY*/*SECRET*/*TOKEN*)",
		Evidence: "harness/review_harness_test.go TestReviewRealCodexShellSecretExcluded"},
	{Capability: CapTurns, Status: Unsupported, Reason: "Codex has no turn limit", Evidence: "docs/agent-clis.md Codex: limits and attestation"},
	{Capability: CapBudget, Status: Unsupported, Reason: "Codex has no token or cost limit", Evidence: "docs/agent-clis.md Codex: limits and attestation"},
	{Capability: CapConfigIsolation, When: CondYolo, Status: Unsupported, Reason: "the legacy yolo profile loads the user's config.toml", Evidence: yoloEvidence},
	{Capability: CapConfigIsolation, Status: Enforced, Sources: []Source{byProvider("config layers"), byHarness("private HOME and CODEX_HOME")},
		Reason:   "--ignore-user-config and a private CODEX_HOME; an untrusted project's .codex/config.toml is not loaded. /etc/codex and managed requirements still apply, as they are meant to",
		Evidence: "harness/real_workspace_config_test.go TestRealWorkspaceConfigNotLoaded"},
	{Capability: CapLaunchAttestation, Status: Unsupported,
		Reason:   "--json echoes no effective policy (thread.started carries only thread_id); the stderr banner exists only in human mode",
		Evidence: "docs/agent-clis.md Codex: limits and attestation"},
}, harnessRows)}

// GeminiCLI is the capability table of Gemini CLI.
var GeminiCLI = &Table{Provider: "gemini-cli", Versions: []string{"0.61.0"}, Rows: slices.Concat(polcRows("gemini-cli", "file tools", "web_fetch, google_web_search"), []Row{
	{Capability: CapApprovalHeadless, When: CondYolo, Status: Unsupported, Reason: "legacy yolo is --approval-mode yolo: every tool call is allowed", Evidence: yoloEvidence},
	{Capability: CapApprovalHeadless, Status: Enforced, Sources: []Source{byProvider("policy engine")},
		Reason:   "headless runs never ask (ask_user is deny) and an admin-tier policy denies every tool the plan does not allow",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/no-shell"},
	{Capability: CapApprovalAsk, Status: Degraded, Sources: []Source{byProvider("policy engine")},
		Reason: "in headless mode ask_user is deny", Evidence: "docs/agent-clis.md Gemini CLI: approval and policy"},
	{Capability: CapToolsAllowlist, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapToolsAllowlist, Status: Enforced, Sources: []Source{byProvider("tool registry and policy engine")},
		Reason:   "tools.core lists the allowed built-ins and the admin-tier policy denies every other tool (a globally denied tool is not registered)",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/no-shell"},
	{Capability: CapToolsDeny, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapToolsDeny, Status: Enforced, Sources: []Source{byProvider("policy engine (admin tier)")},
		Reason: "admin-tier deny rules beat every other tier, yolo included", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/no-shell"},
	{Capability: CapFSWriteRoots, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapFSWriteRoots, When: CondWritableReadRoots, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason:   "Gemini has no read-only workspace directory: the read roots are --include-directories workspace roots, which write_file and replace may write",
		Evidence: "harness/regress_test.go TestGeminiReadRootsAreNotWriteRoots; docs/agent-clis.md Gemini CLI: workspace directories"},
	{Capability: CapFSWriteRoots, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason: "MCP servers are not covered by the tool sandbox", Evidence: outsideEvidence},
	{Capability: CapFSWriteRoots, When: CondShell | CondSandbox, Status: Enforced,
		Sources:  []Source{byProvider("file tools"), byBwrap("shell commands (security.toolSandboxing)")},
		Reason:   "file tools write only inside the workspace roots; shell commands run in bwrap with the workspace bound writable and / read-only (/tmp is a throw-away tmpfs)",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/sandbox"},
	{Capability: CapFSWriteRoots, When: CondShell, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason:   "only the file tools are confined; without bwrap on the provider's PATH (the probe evidence says which it found) there is no tool sandbox and a shell command writes anywhere the user can",
		Evidence: "docs/harness.md Sandbox helpers; harness/sandbox_helpers_test.go TestProbeHelpersOnProviderPath"},
	{Capability: CapFSWriteRoots, Status: Enforced, Sources: []Source{byProvider("file tools")},
		Reason: "the plan has no shell and no MCP server; the file tools write only inside the workspace roots", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/no-shell"},
	{Capability: CapFSReadRoots, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapFSReadRoots, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason: "MCP servers are not covered by the tool sandbox", Evidence: outsideEvidence},
	{Capability: CapFSReadRoots, When: CondShell, Status: Degraded, Sources: []Source{byProvider("file tools")},
		Reason: "shell commands read the whole disk (the tool sandbox binds / read-only)", Evidence: "docs/agent-clis.md Gemini CLI: the tool sandbox"},
	{Capability: CapFSReadRoots, Status: Enforced, Sources: []Source{byProvider("file tools")},
		Reason: "the plan has no shell and no MCP server; the file tools read only inside the workspace roots", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/no-shell"},
	{Capability: CapFSDenyPaths, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapFSDenyPaths, Status: Unsupported,
		Reason:   "Gemini has no deny-path setting; a policy argsPattern is a regex over the tool's JSON arguments, which another spelling of the path escapes, and polc does not claim it",
		Evidence: "docs/agent-clis.md Gemini CLI: approval and policy"},
	{Capability: CapNetEgress, When: CondYolo, Status: Unsupported, Reason: "yolo turns the tool sandbox's network on", Evidence: "docs/agent-clis.md Legacy yolo profiles; docs/agent-clis.md Gemini CLI: the tool sandbox"},
	{Capability: CapNetEgress, When: CondMCP, Status: Degraded, Sources: []Source{byProvider("web_fetch, google_web_search")},
		Reason: "MCP servers run outside every sandbox and keep their network", Evidence: outsideEvidence},
	{Capability: CapNetEgress, When: CondShell | CondSandbox, Status: Enforced,
		Sources:  []Source{byProvider("web_fetch, google_web_search"), byBwrap("shell commands (--unshare-all)")},
		Reason:   "web tools denied by admin policy; shell commands run in bwrap without network (approval mode is never yolo)",
		Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/sandbox"},
	{Capability: CapNetEgress, When: CondShell, Status: Unsupported, Sources: []Source{byProvider("web_fetch, google_web_search")},
		Reason: "without the tool sandbox (no bwrap on the provider's PATH) shell commands have the host's network", Evidence: "docs/harness.md Sandbox helpers; harness/sandbox_helpers_test.go TestProbeHelpersOnProviderPath"},
	{Capability: CapNetEgress, Status: Enforced, Sources: []Source{byProvider("web_fetch, google_web_search")},
		Reason: "the plan has no shell and no MCP server; the web tools are denied by admin policy", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/no-shell"},
	{Capability: CapNetAllowlist, Status: Unsupported,
		Reason: "Gemini has only network on/off on Linux (a proxy command exists only for container and Seatbelt sandboxes)", Evidence: "docs/agent-clis.md Gemini CLI: the tool sandbox"},
	{Capability: CapSubprocessAllow, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapSubprocessAllow, When: CondShell | CondRunners, Status: Degraded, Sources: []Source{byProvider("policy engine commandPrefix")},
		Reason:   "commandPrefix rules match the command text; an allowed command that runs other programs runs them unchecked",
		Evidence: "docs/agent-clis.md Gemini CLI: approval and policy"},
	{Capability: CapSubprocessAllow, Status: Enforced, Sources: []Source{byProvider("policy engine commandPrefix")},
		Reason:   "admin-tier commandPrefix allows plus a default deny; chained commands are split and each part checked; no allowed command runs other programs",
		Evidence: "harness/real_overclaim_test.go TestRealSubprocessAllowOutside"},
	{Capability: CapSubprocessDeny, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapSubprocessDeny, When: CondShell | CondRunners, Status: Degraded, Sources: []Source{byProvider("policy engine commandPrefix")},
		Reason:   "deny rules match the command text; an allowed command that runs other programs can run a denied one",
		Evidence: "docs/agent-clis.md Gemini CLI: approval and policy"},
	{Capability: CapSubprocessDeny, Status: Enforced, Sources: []Source{byProvider("policy engine commandPrefix (admin tier)")},
		Reason: "admin-tier deny rules; chained commands are split; no allowed command runs other programs", Evidence: "harness/real_deny_test.go TestRealSubprocessDeny"},
	{Capability: CapMCPServers, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapMCPServers, Status: Degraded, Sources: []Source{byProvider("settings mcpServers and mcp.allowed; admin-tier policy for tools")},
		Reason:   "the declared servers come from the private settings (mcpServers, mcp.allowed) and the admin-tier policy allows only their declared tools; the workspace's own .gemini/settings.json is read before --skip-trust trusts the folder, so its servers do not start, but the run then trusts the workspace and loads the project agents, skills and policy files under its .gemini/, and no run has shown that none of those starts a server",
		Evidence: "harness/real_workspace_config_test.go TestRealWorkspaceConfigNotLoaded"},
	{Capability: CapEnvSecrets, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapEnvSecrets, Unless: CondShell | CondMCP, Status: Enforced, Sources: []Source{byProvider("tool set")},
		Reason: "the plan gives the agent no shell and no MCP server, so no subprocess of the agent's exists to receive a secret", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/no-shell"},
	{Capability: CapEnvSecrets, Status: Degraded, Sources: []Source{byProvider("environmentVariableRedaction")},
		Reason:   "redaction is by variable name and value pattern and is off by default; polc turns it on and blocks the secret names, which is a filter, not an allowlist",
		Evidence: "docs/agent-clis.md Gemini CLI: environment"},
	{Capability: CapTurns, When: CondYolo, Status: Unsupported, Reason: yoloReason, Evidence: yoloEvidence},
	{Capability: CapTurns, Status: Enforced, Sources: []Source{byProvider("model turns")},
		Reason: "model.maxSessionTurns ends the run (exit 53)", Evidence: "harness/real_rows_test.go TestRealEnforcedRows/gemini-cli/turns"},
	{Capability: CapBudget, Status: Unsupported, Reason: "Gemini has no cost limit", Evidence: "docs/agent-clis.md Gemini CLI: limits and attestation"},
	{Capability: CapConfigIsolation, When: CondYolo, Status: Unsupported, Reason: "the legacy yolo profile loads the user's settings", Evidence: yoloEvidence},
	{Capability: CapConfigIsolation, Status: Degraded, Sources: []Source{byHarness("private GEMINI_CLI_HOME and HOME"), byProvider("admin-tier policy beats every settings file")},
		Reason:   "a headless run needs a trusted workspace: --skip-trust trusts it only after the settings are read, so the workspace's .gemini/settings.json and .gemini/.env are not loaded, but project agents, skills and policy files under its .gemini/ are (the admin-tier policy still decides every tool). A spec may not trust the workspace through the environment (GEMINI_CLI_TRUST_WORKSPACE is refused): the settings and their hooks would load",
		Evidence: "harness/real_workspace_config_test.go TestRealWorkspaceConfigNotLoaded"},
	{Capability: CapLaunchAttestation, Status: Unsupported,
		Reason: "the init event has only session_id and model", Evidence: "docs/agent-clis.md Gemini CLI: limits and attestation"},
}, harnessRows)}

// Tables are the capability tables by provider.
var Tables = map[string]*Table{"claude-code": ClaudeCode, "codex": Codex, "gemini-cli": GeminiCLI}
