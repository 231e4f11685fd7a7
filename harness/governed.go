package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"polc.dev/polc/internal/diag"
)

// CapToolsGoverned is the claim that the agent touches the world only
// through polc: the provider's own world-touching tools (shell, file
// tools, web tools) are off, and its only tools are those of the `polc
// mcp` session the plan starts, each call one governed Execute.
const CapToolsGoverned = "tools.governed/v1"

// GovernedServer is the name of the MCP server a governed plan starts:
// the agent sees its tools as mcp__polc__bash (Claude Code, Codex) or
// mcp_polc_bash (Gemini CLI).
const GovernedServer = "polc"

// governedDrain is how long Spawn waits, once the provider has exited,
// for the processes it left (polc mcp closing its session: task_closed,
// the certificate) before it kills them. polc mcp's own grace for calls
// in flight (governedGrace) is shorter, so a clean close fits in it.
const (
	governedDrain = 20 * time.Second
	governedGrace = "5s"
)

// PolcExecutable returns the polc program a governed plan starts as its
// MCP server: this program, by default. Tests that are not polc replace it.
var PolcExecutable = os.Executable

// Governed is a spec's governed section: the agent's tools are those of
// a `polc mcp` session (docs/mcp.md), started by the provider over stdio.
type Governed struct {
	// Polc is the polc executable (PolcExecutable when the spec was built).
	Polc string `json:"polc"`
	// Session is the polc serve session file: snapshot, profile,
	// principal, tenant, backend. Its workspace is replaced by the
	// harness's workspace root.
	Session  string `json:"session"`
	Evidence string `json:"evidence"`
	Cert     string `json:"cert"`
	// SignKey is the signer key of the certificate, or "".
	SignKey string `json:"sign_key"`
}

// governedDecl mirrors the governed section of #HarnessSpec.
type governedDecl struct {
	Session  string  `json:"session"`
	Evidence string  `json:"evidence"`
	Cert     string  `json:"cert"`
	SignKey  *string `json:"sign_key"`
}

// fromGovernedDecl checks a governed section against the rest of the spec
// (its other sections already in s) and sets s.Governed. What governed
// turns off may not be declared on: native tools, the policy section
// (whose rules become native tool rules), a declared server named polc,
// polc's sandbox (in which polc mcp could not write its evidence).
// Evidence, certificate and key may not lie where the agent writes.
func fromGovernedDecl(s *Spec, d *specDecl, abs func(string) string, errf func(path, code, format string, args ...any)) {
	g := d.Governed
	if g == nil {
		return
	}
	exe, err := PolcExecutable()
	if err != nil {
		errf("governed", diag.CodeIO, "governed: cannot find the polc executable: %v", err)
		return
	}
	s.Governed = &Governed{Polc: exe, Session: abs(g.Session), Evidence: abs(g.Evidence), Cert: abs(g.Cert)}
	if g.SignKey != nil {
		s.Governed.SignKey = abs(*g.SignKey)
	}
	if d.Tools != nil && d.Tools.Allow != nil && len(*d.Tools.Allow) > 0 {
		errf("tools.allow", diag.CodeInvalidValue, "governed: the agent acts only through polc's tools, so tools.allow (the provider's own tools) must be empty")
	}
	if d.Policy != nil {
		errf("policy", diag.CodeInvalidValue, "governed: the session's snapshot decides what the agent may do; policy maps rules onto the provider's own tools, which governed turns off")
	}
	if d.Sandbox != nil && *d.Sandbox == SandboxPolc {
		errf("sandbox", diag.CodeInvalidValue, "governed is not available with sandbox %q yet: polc mcp would run inside the sandbox, where it cannot write its evidence", SandboxPolc)
	}
	if slices.ContainsFunc(s.MCP, func(m MCPServer) bool { return m.Name == GovernedServer }) {
		errf("mcp.servers."+GovernedServer, diag.CodeInvalidValue, "mcp server name %q is the governed session's", GovernedServer)
	}
	writable := slices.Concat(s.Workspace.Dirs(), s.WriteRoots)
	for _, f := range []struct{ path, decl, p string }{{"governed.evidence", g.Evidence, s.Governed.Evidence},
		{"governed.cert", g.Cert, s.Governed.Cert}, {"governed.sign_key", deref(g.SignKey), s.Governed.SignKey}} {
		if f.p == "" {
			continue
		}
		if slices.ContainsFunc(writable, func(w string) bool { return within(f.p, w) || within(w, f.p) }) {
			errf(f.path, diag.CodeInvalidValue, "%s %q lies in (or holds) a working dir or write root, where the agent's tools may write: the evidence of a run must be out of the agent's reach", f.path, f.decl)
		}
	}
}

// governedView returns the spec the provider adapters compile for a
// governed spec: every native tool denied and none allowed, and the polc
// MCP server (all its tools allowed) before the declared ones.
func (s *Spec) governedView() *Spec {
	v := *s
	g := s.Governed
	args := []string{"mcp", g.Session, "--workspace", s.Workspace.Root, "--evidence", g.Evidence, "--cert", g.Cert}
	if g.SignKey != "" {
		args = append(args, "--sign-key", g.SignKey)
	}
	args = append(args, "--grace", governedGrace)
	v.ToolsAllow = []string{}
	v.ToolsDeny = slices.Clone(ToolIDs)
	v.MCP = append([]MCPServer{{Name: GovernedServer, Command: g.Polc, Args: args}}, s.MCP...)
	return &v
}

// GovernedPlan is what a governed plan records of its polc session.
type GovernedPlan struct {
	Polc     string `json:"polc"`
	Session  string `json:"session"`
	Evidence string `json:"evidence"`
	Cert     string `json:"cert"`
	SignKey  string `json:"sign_key"`
}

func (g *Governed) plan() *GovernedPlan {
	if g == nil {
		return nil
	}
	return &GovernedPlan{Polc: g.Polc, Session: g.Session, Evidence: g.Evidence, Cert: g.Cert, SignKey: g.SignKey}
}

// governedConds are the conditions of a governed plan's rows.
func governedConds(s *Spec) Cond {
	if s.Governed == nil {
		return 0
	}
	c := CondGoverned
	if len(s.MCP) > 0 {
		c |= CondForeignMCP
	}
	return c
}

// Evidence and reasons of the tools.governed/v1 rows.
const (
	governedForeignReason = "a declared MCP server besides polc's gives the agent tools polc does not govern"
	governedEvidence      = "harness/real_governed_test.go TestRealGoverned"
)

// governedRows are each provider's rows for CapToolsGoverned.
var governedRows = map[string][]Row{
	"claude-code": {
		{Capability: CapToolsGoverned, When: CondForeignMCP, Status: Degraded, Sources: []Source{byProvider("built-in tools and MCP servers offered to the model")},
			Reason: governedForeignReason, Evidence: "docs/harness.md Governed tools"},
		{Capability: CapToolsGoverned, When: CondGoverned, Status: Enforced,
			Sources:  []Source{byProvider("built-in tools offered to the model (--tools \"\", permissions.deny)"), byHarness("polc mcp: every call one governed Execute")},
			Reason:   "--tools \"\" leaves Claude no built-in tool (system/init echoes none) and permissions.deny refuses them all; --strict-mcp-config loads only polc's server, whose every call polc decides and records",
			Evidence: governedEvidence + "ClaudeCode"},
	},
	"gemini-cli": {
		{Capability: CapToolsGoverned, When: CondForeignMCP, Status: Degraded, Sources: []Source{byProvider("tools offered to the model")},
			Reason: governedForeignReason, Evidence: "docs/harness.md Governed tools"},
		{Capability: CapToolsGoverned, When: CondGoverned, Status: Enforced,
			Sources:  []Source{byProvider("built-in tools offered to the model (tools.core = [], --admin-policy deny *)"), byHarness("polc mcp: every call one governed Execute")},
			Reason:   "tools.core = [] registers no built-in tool and the admin-tier policy denies every tool but polc's server's (mcpName = \"polc\"), so the model is offered polc's tools alone and a call of any other is refused; each call of polc's polc decides and records",
			Evidence: governedEvidence + "GeminiCLI"},
	},
	"codex": {
		{Capability: CapToolsGoverned, When: CondGoverned, Status: Degraded,
			Sources:  []Source{byProvider("features.shell_tool = false, web_search disabled"), byHarness("polc mcp: every call one governed Execute")},
			Reason:   "the shell and web search are off and polc's tools run through polc, but Codex has no switch for its other tools (view_image reads any file its sandbox can read; sub-agents, goals and image tools stay), bounded only by its sandbox",
			Evidence: "docs/agent-clis.md Codex: tools; " + governedEvidence + "Codex"},
	},
}

func init() {
	for _, t := range []*Table{ClaudeCode, Codex, GeminiCLI} {
		t.Rows = append(t.Rows, governedRows[t.Provider]...)
	}
}

// governedEnded reports, after a governed run, where its certificate is:
// polc mcp writes it when the provider closes its stdin (docs/mcp.md).
func governedEnded(p *GovernedPlan) (string, error) {
	if _, err := os.Stat(p.Cert); err != nil {
		return "", fmt.Errorf("the governed session left no certificate at %s (polc mcp did not close its session; its diagnostics went to the provider)", p.Cert)
	}
	return filepath.Clean(p.Cert), nil
}
