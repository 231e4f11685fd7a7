package harness

import (
	"slices"
	"strings"
)

// envRule refuses a variable name (exactly, or every name with the prefix
// when prefix is true) for the providers it lists (nil: every provider).
type envRule struct {
	name      string
	prefix    bool
	providers []string
	why       string
}

const (
	whyLoadsCode = "it loads code into the provider's own process, where the plan's provider-side rules are checked"
	whyGemini    = "Gemini CLI reads it to decide workspace trust, where its settings come from or how its tool sandbox runs (GEMINI_CLI_TRUST_WORKSPACE=true makes it load the workspace's .gemini/settings.json, whose hooks and MCP servers run outside every control, and its .gemini/.env)"
)

// refusedEnv are the variables a spec may neither allowlist nor set as a
// secret: each one lets something other than the plan decide a control
// the report claims (workspace files the agent can write, a settings file
// or sandbox switch of the provider's own, code loaded into the provider).
// A provider's own namespace is refused whole: its CLI reads more of
// these names than its documentation lists, and each release adds some.
var refusedEnv = []envRule{
	{name: "NODE_OPTIONS", why: whyLoadsCode},
	{name: "LD_PRELOAD", why: whyLoadsCode},
	{name: "LD_AUDIT", why: whyLoadsCode},
	{name: "LD_LIBRARY_PATH", why: whyLoadsCode},
	{name: "DYLD_", prefix: true, why: whyLoadsCode},
	{name: "BUN_", prefix: true, providers: []string{"claude-code"}, why: "Claude Code is a Bun executable, and Bun reads these (BUN_OPTIONS preloads code)"},
	{name: "CLAUDE_CODE_", prefix: true, providers: []string{"claude-code"}, why: "Claude Code reads these to switch its permission, sandbox and settings behaviour (its bundle reads dozens, CLAUDE_CODE_EVEN_MORE_DANGEROUSLY_SKIP_PERMISSIONS among them)"},
	{name: "CLAUDE_CONFIG_DIR", providers: []string{"claude-code"}, why: "it chooses where Claude Code reads its user settings; the plan sets it to a private directory"},
	{name: "CODEX_", prefix: true, providers: []string{"codex"}, why: "Codex reads these to choose its home, sandbox (CODEX_SANDBOX, CODEX_BWRAP_SHA256), permission profile and exec server"},
	{name: "GEMINI_CLI_", prefix: true, providers: []string{"gemini-cli"}, why: whyGemini},
	{name: "GEMINI_SANDBOX", prefix: true, providers: []string{"gemini-cli"}, why: whyGemini},
	{name: "SANDBOX", providers: []string{"gemini-cli"}, why: whyGemini},
	{name: "SANDBOX_", prefix: true, providers: []string{"gemini-cli"}, why: whyGemini},
	{name: "SEATBELT_PROFILE", providers: []string{"gemini-cli"}, why: whyGemini},
	{name: "BUILD_SANDBOX", providers: []string{"gemini-cli"}, why: whyGemini},
}

// envCredentials are names inside a refused namespace that carry a
// credential, not configuration: a spec may pass them.
var envCredentials = map[string]bool{
	"CLAUDE_CODE_OAUTH_TOKEN": true, "CODEX_API_KEY": true, "CODEX_ACCESS_TOKEN": true,
}

// envRefusal says why a spec for provider may not pass variable name to
// the provider (allowlisted or as a secret), or returns "".
func envRefusal(provider, name string) string {
	if envCredentials[name] {
		return ""
	}
	for _, r := range refusedEnv {
		if r.providers != nil && !slices.Contains(r.providers, provider) {
			continue
		}
		if name == r.name || r.prefix && strings.HasPrefix(name, r.name) {
			return r.why
		}
	}
	return ""
}
