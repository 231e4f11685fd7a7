package compiler

import (
	"encoding/json"

	"cuelang.org/go/cue"

	"polc.dev/polc/internal/diag"
)

// PolicyDecl is one declared PermissionPolicy as the author wrote it:
// pointer and slice-pointer fields are nil exactly when the field is unset
// (absent), which for a child policy means "inherit".
type PolicyDecl struct {
	Name        *string          `json:"name,omitempty"`
	Version     string           `json:"version"`
	UUID        *string          `json:"uuid,omitempty"`
	Extends     *string          `json:"extends,omitempty"`
	Description *string          `json:"description,omitempty"`
	Principals  *[]string        `json:"principals,omitempty"`
	Tenants     *[]string        `json:"tenants,omitempty"`
	Actions     *ActionsDecl     `json:"actions,omitempty"`
	Filesystem  *FSDecl          `json:"filesystem,omitempty"`
	Network     *NetDecl         `json:"network,omitempty"`
	Subprocess  *SubDecl         `json:"subprocess,omitempty"`
	MCP         *MCPDecl         `json:"mcp,omitempty"`
	Environment *EnvDecl         `json:"environment,omitempty"`
	Secrets     *[]SecretDecl    `json:"secrets,omitempty"`
	Budgets     *BudgetsDecl     `json:"budgets,omitempty"`
	ExpiresAt   *string          `json:"expires_at,omitempty"`
	NotBefore   *string          `json:"not_before,omitempty"`
	Gates       *[]GateDecl      `json:"gates,omitempty"`
	Expansions  *[]ExpansionDecl `json:"expansions,omitempty"`
}

// ActionsDecl is the actions section.
type ActionsDecl struct {
	Allow   *[]string       `json:"allow,omitempty"`
	Deny    *[]string       `json:"deny,omitempty"`
	Approve *[]ApprovalDecl `json:"approve,omitempty"`
}

// ApprovalDecl is one approval requirement. Approver is nil for an explicit
// null (nobody may approve).
type ApprovalDecl struct {
	Pattern      string  `json:"pattern"`
	Approver     *string `json:"approver"`
	ExpiresAfter *string `json:"expires_after,omitempty"`
}

// FSDecl is the filesystem section.
type FSDecl struct {
	Read    *[]string `json:"read,omitempty"`
	Write   *[]string `json:"write,omitempty"`
	Execute *[]string `json:"execute,omitempty"`
	Deny    *[]string `json:"deny,omitempty"`
}

// NetDecl is the network section.
type NetDecl struct {
	Mode  *string   `json:"mode,omitempty"`
	Allow *[]string `json:"allow,omitempty"`
	Deny  *[]string `json:"deny,omitempty"`
}

// SubDecl is the subprocess section.
type SubDecl struct {
	Mode  *string   `json:"mode,omitempty"`
	Allow *[]string `json:"allow,omitempty"`
	Deny  *[]string `json:"deny,omitempty"`
	Shell *string   `json:"shell,omitempty"`
}

// MCPDecl is the mcp section.
type MCPDecl struct {
	Servers *[]MCPServerDecl `json:"servers,omitempty"`
	Deny    *[]string        `json:"deny,omitempty"`
}

// MCPServerDecl grants tools and resources of one MCP server pattern.
type MCPServerDecl struct {
	Server    string    `json:"server"`
	Tools     *[]string `json:"tools,omitempty"`
	Resources *[]string `json:"resources,omitempty"`
}

// EnvDecl is the environment section.
type EnvDecl struct {
	Read   *[]string `json:"read,omitempty"`
	Inject *[]string `json:"inject,omitempty"`
	Deny   *[]string `json:"deny,omitempty"`
}

// SecretDecl sets the exposure of a secret namespace pattern.
type SecretDecl struct {
	Namespace string `json:"namespace"`
	Exposure  string `json:"exposure"`
}

// BudgetsDecl is the budgets section. Window is microseconds (json.Number)
// or a duration string.
type BudgetsDecl struct {
	Calls            *int64 `json:"calls,omitempty"`
	Tokens           *int64 `json:"tokens,omitempty"`
	CostMicrounits   *int64 `json:"cost_microunits,omitempty"`
	WallMicroseconds *int64 `json:"wall_microseconds,omitempty"`
	Window           any    `json:"window,omitempty"`
}

// GateDecl binds the rules whose ids match Rules to a gate.
type GateDecl struct {
	ID    string   `json:"id"`
	Level string   `json:"level"`
	Rules []string `json:"rules"`
}

// ExpansionDecl authorizes granting Values at Path beyond the parent.
type ExpansionDecl struct {
	Path      string `json:"path"`
	Values    []any  `json:"values"`
	Authority string `json:"authority"`
	Evidence  string `json:"evidence"`
}

// Policy is a loaded declaration with its source positions.
type Policy struct {
	// Name is the key under `policies`.
	Name string
	// Decl is the decoded declaration.
	Decl PolicyDecl
	// Pos is the position of the policy's key.
	Pos diag.Pos
	// Value is the author's CUE value (before unification with the schema).
	Value cue.Value
	// positions maps a declaration path ("network.allow[1]") to its position.
	positions map[string]diag.Pos
}

// PosOf returns the position of a declaration path within the policy, or of
// the nearest enclosing path that has one, or of the policy itself.
func (p *Policy) PosOf(path string) diag.Pos { return posIn(p.positions, path, p.Pos) }

// Harness is a loaded HarnessSpec declaration, validated against the
// schema. Package harness decodes and compiles it.
type Harness struct {
	// Name is the key under `harnesses`.
	Name string
	// Pos is the position of the harness's key.
	Pos diag.Pos
	// Value is the author's CUE value.
	Value cue.Value
	// JSON is the declaration as JSON, exactly as authored (unset fields
	// absent).
	JSON      []byte
	positions map[string]diag.Pos
}

// PosOf returns the position of a declaration path within the harness
// ("workspace.extra_dirs[1]"), or of the nearest enclosing path that has
// one, or of the harness itself.
func (h *Harness) PosOf(path string) diag.Pos { return posIn(h.positions, path, h.Pos) }

func posIn(positions map[string]diag.Pos, path string, fallback diag.Pos) diag.Pos {
	for path != "" {
		if pos, ok := positions[path]; ok {
			return pos
		}
		path = parentPath(path)
	}
	return fallback
}

func parentPath(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		switch p[i] {
		case '.':
			return p[:i]
		case '[':
			return p[:i]
		}
	}
	return ""
}

// decodeDecl decodes a validated policy value.
func decodeDecl(v cue.Value) (PolicyDecl, error) {
	var d PolicyDecl
	raw, err := v.MarshalJSON()
	if err != nil {
		return d, err
	}
	err = unmarshalNumbers(raw, &d)
	return d, err
}

func unmarshalNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytesReader(raw))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
