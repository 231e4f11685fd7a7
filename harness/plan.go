package harness

import (
	"crypto/sha256"
	"encoding/hex"

	"polc.dev/polc/internal/jcs"
)

// PlanFormat is the value of Plan.Format.
const PlanFormat = "polc.harness-plan/v1"

// Placeholders in a plan's argv, environment values and file paths.
// Spawn replaces them; everything else is used verbatim.
const (
	// RunDir stands for the private (0700) directory Spawn creates for
	// one run and removes afterwards.
	RunDir = "{run}"
	// Prompt stands for the run's prompt; it appears only in argv.
	Prompt = "{prompt}"
)

// Plan is a compiled harness launch: exactly what Spawn will run. It holds
// no secret value (secrets are references) and its digest covers every
// member except Digest, so two plans with the same digest launch the same
// way. Canonical JSON: RFC 8785.
type Plan struct {
	Format           string `json:"format"`
	Harness          string `json:"harness"`
	Profile          string `json:"profile"`
	Provider         string `json:"provider"`
	ProviderVersion  string `json:"provider_version"`
	Executable       string `json:"executable"`
	ExecutableSHA256 string `json:"executable_sha256"`
	// Argv is the full argument vector, Argv[0] the executable.
	Argv []string `json:"argv"`
	// Dir is the working directory (the workspace root).
	Dir string `json:"dir"`
	// Env is the provider's whole environment: nothing else is passed.
	Env []EnvVar `json:"env"`
	// Files are written under the run directory before the provider starts.
	Files []File `json:"files"`
	// Workspace is the leased workspace.
	Workspace Workspace `json:"workspace"`
	// WallClockMicroseconds is the watchdog's limit.
	WallClockMicroseconds int64 `json:"wall_clock_microseconds"`
	// PolicyDigest is the digest of the PermissionPolicy snapshot the
	// harness took its rules from, or "".
	PolicyDigest string `json:"policy_digest"`
	// Controls lists each requested control and where it landed; the
	// details are in CapabilityReport.
	Controls []Control `json:"controls"`
	// AllowedDegraded records the controls the spec allowed to run
	// degraded or unsupported and that are.
	AllowedDegraded []string `json:"allowed_degraded"`
	// ExpectedEvidence names what a run produces for later checks.
	ExpectedEvidence []string `json:"expected_evidence"`
	// Attestation is what the provider must echo after launch, when it
	// echoes anything (Claude Code's system/init); nil otherwise.
	Attestation *Attestation `json:"attestation"`
	// Preflight are the offline validator runs polc performs on the plan.
	Preflight []PreflightStep `json:"preflight"`
	// SandboxHelpers are the programs the plan's OS-sandbox claims rest
	// on, as the provider must find them on its PATH; Spawn refuses to
	// run when the PATH it resolves finds another or none.
	SandboxHelpers []SandboxHelper `json:"sandbox_helpers"`
	// OSSandbox is how polc's own sandbox holds the provider (spec field
	// sandbox: polc); nil (and absent from the JSON) otherwise.
	OSSandbox *OSSandbox `json:"os_sandbox,omitempty"`
	// Governed is the polc mcp session whose tools are the agent's (spec
	// section governed); nil (and absent from the JSON) otherwise.
	Governed         *GovernedPlan     `json:"governed,omitempty"`
	CapabilityReport *CapabilityReport `json:"capability_report"`
	Digest           string            `json:"digest"`
}

// EnvVar is one variable of the provider's environment. Exactly one of
// Value (set by the plan), Inherit (copied from polc's environment when
// set there) or Secret (a reference resolved at spawn) applies.
type EnvVar struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Inherit bool   `json:"inherit"`
	Secret  string `json:"secret"`
}

// File is a configuration file the plan writes. Contents hold no secret.
type File struct {
	Path    string `json:"path"`
	Mode    int    `json:"mode"`
	Content string `json:"content"`
}

// Control summarises one requested control in the plan.
type Control struct {
	Capability      string `json:"capability"`
	Status          Status `json:"status"`
	Required        bool   `json:"required"`
	AllowedDegraded bool   `json:"allowed_degraded"`
}

// Attestation is the effective policy the provider must echo.
type Attestation struct {
	Event          string   `json:"event"`
	PermissionMode string   `json:"permission_mode"`
	Tools          []string `json:"tools"`
	AdditionalDirs []string `json:"additional_directories"`
	MCPServers     []string `json:"mcp_servers"`
}

// SandboxHelper is one program a provider's sandbox runs, looked up by
// Name on the provider's PATH; Path is where it must be found ({run} may
// stand for the run directory).
type SandboxHelper struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// PreflightStep is one offline validator run.
type PreflightStep struct {
	Name  string   `json:"name"`
	Argv  []string `json:"argv"`
	Files []File   `json:"files"`
}

var planDigestExcluded = map[string]bool{"digest": true}

// CanonicalBytes returns the RFC 8785 bytes the digest covers: the plan
// without digest.
func (p *Plan) CanonicalBytes() ([]byte, error) { return jcs.AppendOmit(nil, p, planDigestExcluded) }

// Seal sets Digest to the lowercase hex SHA-256 of CanonicalBytes.
func (p *Plan) Seal() error {
	b, err := p.CanonicalBytes()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	p.Digest = hex.EncodeToString(sum[:])
	return nil
}

// MarshalCanonical returns the plan's canonical JSON, digest included.
func (p *Plan) MarshalCanonical() ([]byte, error) { return jcs.Marshal(p) }
