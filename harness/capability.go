package harness

import (
	"fmt"
	"slices"
	"strings"
)

// Capability names: <area>.<control>/v<N>. A name's meaning never changes;
// a changed meaning gets a new version. docs/harness.md defines each.
const (
	CapApprovalHeadless  = "approval.headless_deny/v1" // nothing runs that was not pre-approved; nobody is asked
	CapApprovalAsk       = "approval.ask/v1"           // a human answers permission prompts
	CapToolsAllowlist    = "tools.allowlist/v1"        // only the allowed built-in tools exist
	CapToolsDeny         = "tools.deny/v1"             // the denied built-in tools cannot be used
	CapFSWriteRoots      = "fs.write_roots/v1"         // writes only under the working dirs and write roots
	CapFSReadRoots       = "fs.read_roots/v1"          // reads only under the working dirs and read roots
	CapFSDenyPaths       = "fs.deny_paths/v1"          // the deny paths can be neither read nor written
	CapNetEgress         = "net.egress/v1"             // no network from the agent's tools
	CapNetAllowlist      = "net.allowlist/v1"          // network from the agent's tools only to allowed hosts
	CapSubprocessAllow   = "subprocess.allow/v1"       // the shell runs only allowed commands
	CapSubprocessDeny    = "subprocess.deny/v1"        // the shell never runs denied commands
	CapMCPServers        = "mcp.servers/v1"            // exactly the declared MCP servers, with their allowed tools
	CapEnvAllowlist      = "env.allowlist/v1"          // the provider process gets only the planned environment
	CapEnvSecrets        = "env.secret_isolation/v1"   // secret variables do not reach the agent's subprocesses
	CapTurns             = "resources.turns/v1"        // at most N model turns
	CapBudget            = "resources.budget/v1"       // at most the declared model cost
	CapWallClock         = "resources.wall_clock/v1"   // the run is killed after the wall-clock limit
	CapConfigIsolation   = "config.isolation/v1"       // no user or project configuration changes the plan
	CapLaunchAttestation = "attestation.launch/v1"     // the provider echoes its effective policy and polc checks it
	// CapToolsGoverned (governed.go): the agent acts only through polc mcp.
)

// Capabilities lists every capability name polc knows, sorted.
var Capabilities = sortedCopy([]string{
	CapApprovalHeadless, CapApprovalAsk, CapToolsAllowlist, CapToolsDeny, CapFSWriteRoots,
	CapFSReadRoots, CapFSDenyPaths, CapNetEgress, CapNetAllowlist, CapSubprocessAllow,
	CapSubprocessDeny, CapMCPServers, CapEnvAllowlist, CapEnvSecrets, CapTurns, CapBudget,
	CapWallClock, CapConfigIsolation, CapLaunchAttestation, CapToolsGoverned,
})

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// KnownCapability reports whether name is a capability polc knows.
func KnownCapability(name string) bool {
	_, ok := slices.BinarySearch(Capabilities, name)
	return ok
}

// Status is where a requested control landed.
type Status string

// Statuses. Every requested control has exactly one.
const (
	// Enforced: the control holds against everything the plan lets the
	// agent do, by the mechanisms named in Sources.
	Enforced Status = "enforced"
	// Degraded: part of the control holds; Reason says which part does not.
	Degraded Status = "degraded"
	// Unsupported: nothing in the plan enforces the control.
	Unsupported Status = "unsupported"
)

// Source kinds name who enforces a claim, kept apart so that a reader
// never mistakes a provider-process rule for an OS boundary.
const (
	// SourceProvider: the provider's own process checks the rule (its
	// permission engine or tool registry). Code the agent runs is not
	// bound by it.
	SourceProvider = "provider"
	// SourceHarness: polc itself (the spawn environment, the watchdog, the
	// post-launch check).
	SourceHarness = "harness"
	// SourceOSSandboxPrefix + name: an OS mechanism (os-sandbox:bubblewrap).
	SourceOSSandboxPrefix = "os-sandbox:"
)

// Source is one mechanism behind a claim and what it covers.
type Source struct {
	// By is provider, harness or os-sandbox:<name>.
	By string `json:"by"`
	// Scope says what the mechanism covers ("file tools", "shell and its
	// children").
	Scope string `json:"scope"`
}

// CapabilityResult is the verdict on one requested control.
type CapabilityResult struct {
	Capability string   `json:"capability"`
	Status     Status   `json:"status"`
	Required   bool     `json:"required"`
	Sources    []Source `json:"sources"`
	// Reason says what does not hold (degraded, unsupported) or the limits
	// of what does.
	Reason string `json:"reason"`
	// Evidence cites what established the row: tests of this repository
	// and sections of its docs (see Row.Evidence).
	Evidence string `json:"evidence"`
	// Settings are the argv flags and config keys that implement it.
	Settings []string `json:"settings"`
	// AllowedDegraded is true when the spec's allow_degraded lists a
	// control that is not enforced.
	AllowedDegraded bool `json:"allowed_degraded"`
}

// CapabilityReport is the verdict on every control a spec requested: each
// appears exactly once, in Enforced, Degraded or Unsupported.
type CapabilityReport struct {
	Format          string             `json:"format"`
	Harness         string             `json:"harness"`
	Provider        string             `json:"provider"`
	ProviderVersion string             `json:"provider_version"`
	Profile         string             `json:"profile"`
	Enforced        []CapabilityResult `json:"enforced"`
	Degraded        []CapabilityResult `json:"degraded"`
	Unsupported     []CapabilityResult `json:"unsupported"`
	// ProbeEvidence identifies what the report rests on: the probed
	// executable's hash and version and the host sandbox tools found.
	ProbeEvidence []string `json:"probe_evidence"`
}

// ReportFormat is the value of CapabilityReport.Format.
const ReportFormat = "polc.harness-capability-report/v1"

// All returns every result, in Enforced, Degraded, Unsupported order.
func (r *CapabilityReport) All() []CapabilityResult {
	return slices.Concat(r.Enforced, r.Degraded, r.Unsupported)
}

// Lookup returns the result for a capability.
func (r *CapabilityReport) Lookup(name string) (CapabilityResult, bool) {
	for _, c := range r.All() {
		if c.Capability == name {
			return c, true
		}
	}
	return CapabilityResult{}, false
}

// Blocking returns the results that stop a spawn: required controls that
// are not enforced, and optional ones that are neither enforced nor listed
// in allow_degraded.
func (r *CapabilityReport) Blocking() []CapabilityResult {
	var out []CapabilityResult
	for _, c := range slices.Concat(r.Degraded, r.Unsupported) {
		if c.Required || !c.AllowedDegraded {
			out = append(out, c)
		}
	}
	return out
}

// NotEnforcedError is returned by Spawn (and reported by Compile's caller)
// when the report has blocking results.
type NotEnforcedError struct {
	Harness string
	Results []CapabilityResult
}

func (e *NotEnforcedError) Error() string {
	var parts []string
	for _, c := range e.Results {
		kind := "optional, not in allow_degraded"
		if c.Required {
			kind = "required"
		}
		parts = append(parts, fmt.Sprintf("%s is %s (%s)", c.Capability, c.Status, kind))
	}
	return fmt.Sprintf("harness %q: not spawned: %s", e.Harness, strings.Join(parts, "; "))
}
