package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Adapter launches one provider's CLI under a HarnessSpec. Compile never
// runs anything; Probe runs only `--version`; Spawn runs the provider.
type Adapter interface {
	// Provider is the provider name (claude-code, codex, gemini-cli).
	Provider() string
	// Probe identifies the installed CLI (Probe with this provider).
	Probe(ctx context.Context, executable string, opts ProbeOptions) (*ProbeResult, error)
	// Compile turns a spec into a sealed plan and its capability report.
	// A plan is returned even when controls are not enforced; Spawn
	// refuses it then. The error is a *CompileError or *UnsupportedVersionError.
	Compile(spec *Spec, probe *ProbeResult) (*Plan, *CapabilityReport, error)
	// Spawn runs a plan (see the package function Spawn).
	Spawn(ctx context.Context, plan *Plan, opts SpawnOptions) (*RunResult, error)
}

// For returns the adapter of a provider.
func For(provider string) (Adapter, error) {
	p, ok := providers[provider]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (want one of %s)", provider, strings.Join(Providers, ", "))
	}
	return &adapter{p}, nil
}

// providerImpl is what differs between providers.
type providerImpl interface {
	name() string
	table() *Table
	// build compiles the provider-specific parts of a plan.
	build(s *Spec, p *ProbeResult) (*build, error)
	// parse turns one stdout line into observations.
	parse(line []byte, n int) []Observation
	// attest checks a session-start observation against the plan; nil
	// when the provider echoes nothing to check.
	attest(o Observation, a *Attestation) error
}

var providers = map[string]providerImpl{
	"claude-code": claudeCode{},
	"codex":       codex{},
	"gemini-cli":  gemini{},
}

// build is a provider's contribution to a plan.
type build struct {
	legacy      bool
	argv        []string
	env         []EnvVar
	files       []File
	conds       Cond
	settings    map[string][]string
	attestation *Attestation
	preflight   []PreflightStep
	evidence    []string
	// helpers are the sandbox helpers the plan's sandbox claims rest on.
	helpers []SandboxHelper
}

type adapter struct{ p providerImpl }

func (a *adapter) Provider() string { return a.p.name() }

func (a *adapter) Probe(ctx context.Context, exe string, opts ProbeOptions) (*ProbeResult, error) {
	return Probe(ctx, a.p.name(), exe, opts)
}

func (a *adapter) Spawn(ctx context.Context, plan *Plan, opts SpawnOptions) (*RunResult, error) {
	return spawn(ctx, a.p, plan, opts)
}

// CompileError is a compile failure: the plan cannot be built. Nothing may
// be spawned.
type CompileError struct {
	Harness, Provider string
	Msg               string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("harness %q (%s): %s", e.Harness, e.Provider, e.Msg)
}

// UnsupportedVersionError is returned when the probed version has no
// capability table. The accompanying report lists every control as
// unsupported.
type UnsupportedVersionError struct {
	Provider, Version string
	Known             []string
}

func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("%s %s is not a supported version (capability tables cover %s)", e.Provider, e.Version, strings.Join(e.Known, ", "))
}

// Requested returns the controls a spec requests, sorted: what its
// sections ask for, plus every required capability.
func Requested(s *Spec) []string {
	req := []string{CapToolsAllowlist, CapFSWriteRoots, CapMCPServers, CapEnvAllowlist, CapWallClock, CapConfigIsolation}
	if s.Approval == "ask" {
		req = append(req, CapApprovalAsk)
	} else {
		req = append(req, CapApprovalHeadless)
	}
	if len(s.ToolsDeny) > 0 {
		req = append(req, CapToolsDeny)
	}
	if s.ReadRoots != nil {
		req = append(req, CapFSReadRoots)
	}
	if len(s.DenyPaths) > 0 {
		req = append(req, CapFSDenyPaths)
	}
	switch s.Network {
	case "off":
		req = append(req, CapNetEgress)
	case "allowlist":
		req = append(req, CapNetAllowlist)
	}
	if s.CommandsAllow != nil {
		req = append(req, CapSubprocessAllow)
	}
	if len(s.CommandsDeny) > 0 {
		req = append(req, CapSubprocessDeny)
	}
	if len(s.Secrets) > 0 {
		req = append(req, CapEnvSecrets)
	}
	if s.Turns > 0 {
		req = append(req, CapTurns)
	}
	if s.CostMicroUSD > 0 {
		req = append(req, CapBudget)
	}
	if s.Governed != nil {
		req = append(req, CapToolsGoverned)
	}
	req = append(req, s.Required...)
	return sortedSet(req)
}

// openSection says why nothing in a plan enforces capability c when the
// spec's sections leave it open (c is then requested only because
// required_capabilities names it), or "" when they do not.
func openSection(s *Spec, c string) string {
	switch c {
	case CapNetEgress:
		if s.Network != "off" {
			return fmt.Sprintf("network mode is %q: the plan lets the agent's tools reach the network", s.Network)
		}
	case CapNetAllowlist:
		if s.Network == "on" {
			return `network mode is "on": the plan has no host list`
		}
	case CapFSReadRoots:
		if s.ReadRoots == nil {
			return "the spec declares no filesystem.read, so the plan does not confine reads (filesystem.read: [] confines them to the working dirs)"
		}
	case CapTurns:
		if s.Turns <= 0 {
			return "the spec declares no resources.turns, so the plan sets no turn limit"
		}
	case CapBudget:
		if s.CostMicroUSD <= 0 {
			return "the spec declares no resources.cost_microusd, so the plan sets no cost limit"
		}
	}
	return ""
}

// EffectiveTools returns the allowed neutral tools minus the denied ones,
// without the web tools when the network is off.
func (s *Spec) EffectiveTools() []string {
	var out []string
	for _, t := range s.ToolsAllow {
		if slices.Contains(s.ToolsDeny, t) {
			continue
		}
		if s.Network == "off" && (t == "web_fetch" || t == "web_search") {
			continue
		}
		if s.Network == "allowlist" && t == "web_search" {
			continue // search cannot be confined to hosts
		}
		out = append(out, t)
	}
	return out
}

// HasShell reports whether the plan gives the agent a shell.
func (s *Spec) HasShell() bool { return s.Yolo || slices.Contains(s.EffectiveTools(), "bash") }

// runners are programs that run other programs: allowing one allows, in
// effect, any command. The list is conservative, not complete.
var runners = map[string]bool{
	"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "fish": true, "csh": true, "tcsh": true,
	"python": true, "python2": true, "python3": true, "node": true, "nodejs": true, "deno": true, "bun": true,
	"perl": true, "ruby": true, "php": true, "lua": true, "tclsh": true, "env": true, "xargs": true,
	"find": true, "awk": true, "gawk": true, "sed": true, "make": true, "npm": true, "npx": true, "yarn": true,
	"pnpm": true, "go": true, "cargo": true, "git": true, "sudo": true, "su": true, "nohup": true, "timeout": true,
	"nice": true, "watch": true, "script": true, "exec": true, "eval": true, "source": true, "ssh": true,
	"docker": true, "podman": true, "kubectl": true, "time": true, "strace": true, "gdb": true, "java": true,
	"mvn": true, "gradle": true, "pip": true, "pip3": true, "uv": true, "busybox": true, "vim": true, "vi": true,
	"emacs": true, "less": true, "more": true, "man": true, "tar": true, "zip": true, "rsync": true, "parallel": true,
}

// allowsRunner reports whether the allowed commands include any command
// (no allow list) or a program that runs other programs.
func (s *Spec) allowsRunner() bool {
	if s.CommandsAllow == nil {
		return true
	}
	for _, c := range s.CommandsAllow {
		first, _, _ := strings.Cut(c, " ")
		if strings.ContainsAny(first, "*?") || runners[strings.TrimPrefix(first, "/usr/bin/")] || strings.Contains(first, "/") {
			return true
		}
	}
	return false
}

// Profile names the launch profile of a spec on a provider.
func Profile(provider string, yolo bool) string {
	if yolo {
		return provider + ".legacy-yolo"
	}
	return provider + ".harness"
}

func (a *adapter) Compile(s *Spec, probe *ProbeResult) (*Plan, *CapabilityReport, error) {
	return compile(a.p, s, probe)
}

// Compile compiles a spec for the probed provider CLI: it is For(spec.Provider).Compile.
func Compile(s *Spec, probe *ProbeResult) (*Plan, *CapabilityReport, error) {
	p, ok := providers[s.Provider]
	if !ok {
		return nil, nil, &CompileError{s.Name, s.Provider, "unknown provider"}
	}
	return compile(p, s, probe)
}

func compile(p providerImpl, s *Spec, probe *ProbeResult) (*Plan, *CapabilityReport, error) {
	if probe == nil || probe.Provider != p.name() {
		return nil, nil, &CompileError{s.Name, p.name(), "no probe result for this provider"}
	}
	if s.Provider != p.name() {
		return nil, nil, &CompileError{s.Name, p.name(), fmt.Sprintf("the spec is for %s", s.Provider)}
	}
	governed := governedConds(s)
	if s.Governed != nil {
		if s.Yolo || s.Sandbox == SandboxPolc {
			return nil, nil, &CompileError{s.Name, p.name(), "governed is not available with yolo or sandbox polc"}
		}
		if !s.Governed.pinned() {
			// A spec from Check, or built by hand: nobody read the
			// session, so the plan would pin nothing.
			return nil, nil, &CompileError{s.Name, p.name(), "the governed session was not read and pinned (build the spec with FromDeclaration)"}
		}
		s = s.governedView()
	}
	report := &CapabilityReport{Format: ReportFormat, Harness: s.Name, Provider: p.name(), ProviderVersion: probe.Version,
		Profile: Profile(p.name(), s.Yolo), Enforced: []CapabilityResult{}, Degraded: []CapabilityResult{},
		Unsupported: []CapabilityResult{}, ProbeEvidence: probe.Evidence()}
	requested := Requested(s)
	t := p.table()
	if !probe.Supported || !t.Supports(probe.Version) {
		for _, c := range requested {
			report.add(s, CapabilityResult{Capability: c, Status: Unsupported, Sources: []Source{},
				Reason: fmt.Sprintf("%s %s has no capability table", p.name(), probe.Version), Evidence: "docs/harness.md Capability tables", Settings: []string{}})
		}
		return nil, report, &UnsupportedVersionError{p.name(), probe.Version, t.Versions}
	}
	if s.Sandbox == SandboxPolc && s.Yolo {
		return nil, nil, &CompileError{s.Name, p.name(), "sandbox polc is not available with yolo"}
	}
	b, err := p.build(s, spawnProbe(s, probe))
	if err != nil {
		return nil, nil, &CompileError{s.Name, p.name(), err.Error()}
	}
	var osb *OSSandbox
	if s.Sandbox == SandboxPolc {
		if osb, err = planOSSandbox(s, probe); err != nil {
			return nil, nil, &CompileError{s.Name, p.name(), err.Error()}
		}
		b.conds |= CondPolc
		if osb.Network == "proxy" && s.Network == "off" || s.Network == "allowlist" && osb.ModelForward == "" {
			b.conds |= CondModelViaProxy
		}
		for _, c := range []string{CapFSWriteRoots, CapFSReadRoots, CapFSDenyPaths, CapNetEgress, CapNetAllowlist} {
			b.settings[c] = append(b.settings[c], "sandbox: polc")
		}
	}
	// FromDeclaration refuses these with a position; a Spec built by
	// hand meets the same refusal here.
	for _, name := range s.EnvAllow {
		if why := envRefusal(p.name(), name); why != "" {
			return nil, nil, &CompileError{s.Name, p.name(), fmt.Sprintf("allowlisted variable %s may not be passed to %s: %s", name, p.name(), why)}
		}
	}
	for _, sec := range s.Secrets {
		if why := envRefusal(p.name(), sec.Name); why != "" {
			return nil, nil, &CompileError{s.Name, p.name(), fmt.Sprintf("secret %s may not be passed to %s: %s", sec.Name, p.name(), why)}
		}
	}
	// A secret of the same name as a variable the harness sets itself
	// would replace it (assembleEnv lets secrets win): a secret named HOME
	// or CLAUDE_CONFIG_DIR undoes config isolation.
	for _, sec := range s.Secrets {
		if reserved := sec.Name == "HOME" || sec.Name == "PATH" || slices.ContainsFunc(b.env, func(e EnvVar) bool { return e.Name == sec.Name }); reserved {
			return nil, nil, &CompileError{s.Name, p.name(), fmt.Sprintf("secret %s: the harness sets %s itself for %s (a secret may not replace it)", sec.Name, sec.Name, p.name())}
		}
	}
	b.conds |= condsOf(s) | governed
	for _, c := range requested {
		row, ok := t.Decide(c, b.conds)
		if !ok {
			row = Row{Capability: c, Status: Unsupported, Reason: fmt.Sprintf("the %s adapter has no way to enforce %s", p.name(), c), Evidence: "docs/harness.md Capability tables"}
		}
		if osb != nil {
			followKernel(&row, osb)
		}
		settings := b.settings[c]
		if why := openSection(s, c); why != "" {
			// Named in required_capabilities while the spec's own sections
			// leave it open: the table's row describes a plan this is not.
			row = Row{Capability: c, Status: Unsupported, Reason: "required_capabilities names it, but " + why, Evidence: "docs/harness.md Which controls are requested"}
			settings = nil
		}
		if settings == nil {
			settings = []string{}
		}
		sources := row.Sources
		if sources == nil {
			sources = []Source{}
		}
		report.add(s, CapabilityResult{Capability: c, Status: row.Status, Sources: sources, Reason: row.Reason, Evidence: row.Evidence, Settings: settings})
	}
	plan := &Plan{Format: PlanFormat, Harness: s.Name, Profile: report.Profile, Provider: p.name(), ProviderVersion: probe.Version,
		Executable: probe.Executable, ExecutableSHA256: probe.SHA256, Argv: b.argv, Dir: s.Workspace.Root,
		Env: assembleEnv(s, probe, b.env), Files: b.files, Workspace: s.Workspace, WallClockMicroseconds: s.WallClock.Microseconds(),
		PolicyDigest: s.PolicyDigest, Controls: []Control{}, AllowedDegraded: []string{}, ExpectedEvidence: b.evidence,
		Attestation: b.attestation, Preflight: b.preflight, SandboxHelpers: b.helpers, OSSandbox: osb, Governed: s.Governed.plan(), CapabilityReport: report}
	if plan.Files == nil {
		plan.Files = []File{}
	}
	if plan.Preflight == nil {
		plan.Preflight = []PreflightStep{}
	}
	if plan.SandboxHelpers == nil {
		plan.SandboxHelpers = []SandboxHelper{}
	}
	for _, r := range report.All() {
		plan.Controls = append(plan.Controls, Control{r.Capability, r.Status, r.Required, r.AllowedDegraded})
		if r.AllowedDegraded {
			plan.AllowedDegraded = append(plan.AllowedDegraded, r.Capability)
		}
	}
	slices.SortFunc(plan.Controls, func(a, b Control) int { return strings.Compare(a.Capability, b.Capability) })
	slices.Sort(plan.AllowedDegraded)
	if err := plan.Seal(); err != nil {
		return nil, nil, &CompileError{s.Name, p.name(), err.Error()}
	}
	return plan, report, nil
}

func (r *CapabilityReport) add(s *Spec, c CapabilityResult) {
	c.Required = slices.Contains(s.Required, c.Capability)
	switch c.Status {
	case Enforced:
		r.Enforced = append(r.Enforced, c)
	case Degraded:
		c.AllowedDegraded = !c.Required && slices.Contains(s.AllowDegraded, c.Capability)
		r.Degraded = append(r.Degraded, c)
	default:
		c.AllowedDegraded = !c.Required && slices.Contains(s.AllowDegraded, c.Capability)
		r.Unsupported = append(r.Unsupported, c)
	}
}

// spawnProbe is probe with Bwrap and Socat the sandbox helpers the
// provider will find on the PATH the plan gives it: polc's own PATH (as
// probed) when the spec allowlists PATH, the provider PATH otherwise. A
// provider looks its helpers up on its own PATH, so a helper polc can see
// and the provider cannot sandboxes nothing (Claude Code then refuses to
// start, Gemini CLI's shell fails).
func spawnProbe(s *Spec, probe *ProbeResult) *ProbeResult {
	pr := *probe
	if slices.Contains(s.EnvAllow, "PATH") {
		pr.Bwrap, pr.Socat = probe.InheritedBwrap, probe.InheritedSocat
	}
	return &pr
}

func condsOf(s *Spec) Cond {
	var c Cond
	if s.HasShell() {
		c |= CondShell
		if s.allowsRunner() {
			c |= CondRunners
		}
	}
	if len(s.MCP) > 0 {
		c |= CondMCP
	}
	if s.Yolo {
		c |= CondYolo
	}
	return c
}

// assembleEnv builds the provider's environment: the provider's own
// variables, HOME and PATH, the allowlisted names and the secrets, sorted
// by name. A provider variable wins over an allowlisted one of the same name.
func assembleEnv(s *Spec, probe *ProbeResult, own []EnvVar) []EnvVar {
	byName := map[string]EnvVar{}
	for _, n := range s.EnvAllow {
		byName[n] = EnvVar{Name: n, Inherit: true}
	}
	byName["HOME"] = EnvVar{Name: "HOME", Value: RunDir + "/home"}
	if !slices.Contains(s.EnvAllow, "PATH") {
		byName["PATH"] = EnvVar{Name: "PATH", Value: providerPath(probe.Node)}
	}
	for _, e := range own {
		byName[e.Name] = e
	}
	for _, sec := range s.Secrets {
		byName[sec.Name] = EnvVar{Name: sec.Name, Secret: sec.Ref}
	}
	out := make([]EnvVar, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return out
}
