package snapshot

import (
	"encoding/json"
	"fmt"
	"strings"

	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

// Kind is the discriminator of the closed compiled-rule union.
type Kind string

// The closed set of compiled rule kinds (docs/snapshot.md).
const (
	KindAction         Kind = "action"
	KindApproval       Kind = "approval"
	KindFilesystem     Kind = "filesystem"
	KindNetwork        Kind = "network"
	KindSubprocess     Kind = "subprocess"
	KindMCP            Kind = "mcp"
	KindSecretExposure Kind = "secret_exposure"
	KindEnvironment    Kind = "environment"
	KindBudget         Kind = "budget"
	KindExpiry         Kind = "expiry"
)

// Effects. Only approval rules take EffectRequireApproval and only budget
// rules EffectLimit; every other kind takes allow or deny.
const (
	EffectAllow           = "allow"
	EffectDeny            = "deny"
	EffectRequireApproval = "require_approval"
	EffectLimit           = "limit"
)

// Target kinds of qualified action and approval rules.
const (
	TargetCommand = "command"
	TargetPath    = "path"
	TargetHost    = "host"
	TargetMCP     = "mcp"
)

// Rule is one compiled rule. The set of implementations is closed: ActionRule,
// ApprovalRule, FilesystemRule, NetworkRule, SubprocessRule, MCPRule,
// SecretExposureRule, EnvironmentRule, BudgetRule and ExpiryRule.
type Rule interface {
	// Kind returns the rule's discriminator.
	Kind() Kind
	// Base returns the members every rule has.
	Base() *RuleBase
	isRule()
}

// RuleBase holds the members shared by every rule kind.
type RuleBase struct {
	RuleID     string   `json:"rule_id"`
	Order      int      `json:"order"`
	Effect     string   `json:"effect"`
	Provenance []Origin `json:"provenance"`
}

// Base implements Rule.
func (b *RuleBase) Base() *RuleBase { return b }
func (*RuleBase) isRule()           {}

// Origin names the policy and declaration field a rule came from.
type Origin struct {
	Policy string `json:"policy"`
	Field  string `json:"field"`
}

// ActionRule allows an action id pattern (effect allow, unqualified) or
// denies an action or qualified action (effect deny). Deny patterns are
// stored lowercase and match case-insensitively.
type ActionRule struct {
	RuleBase
	Action     string  `json:"action"`
	TargetKind *string `json:"target_kind"`
	Target     *string `json:"target"`
}

// ApprovalRule requires approval by ApproverClass for matching requests; a
// null ApproverClass means nobody can approve, so a match is a denial.
// ExpiresAfterMicroseconds is null exactly when ApproverClass is.
type ApprovalRule struct {
	RuleBase
	Action                   string  `json:"action"`
	TargetKind               *string `json:"target_kind"`
	Target                   *string `json:"target"`
	ApproverClass            *string `json:"approver_class"`
	ExpiresAfterMicroseconds *int64  `json:"expires_after_microseconds"`
}

// FilesystemRule grants Access ("read", "write" or "execute") under Pattern
// (effect allow) or denies every access (effect deny, Access "any").
type FilesystemRule struct {
	RuleBase
	Access  string `json:"access"`
	Pattern string `json:"pattern"`
}

// NetworkRule allows or denies a host[:port] destination pattern; the
// pattern "*" (allow only) is network mode "allow".
type NetworkRule struct {
	RuleBase
	Pattern string `json:"pattern"`
}

// SubprocessRule allows or denies a command pattern; the allow pattern "*"
// is subprocess mode "allow". Shell ("forbid" or "allow") says whether
// commands this rule allows may use shell control operators; it is null on
// deny rules.
type SubprocessRule struct {
	RuleBase
	Pattern string  `json:"pattern"`
	Shell   *string `json:"shell"`
}

// MCPRule grants (allow) or denies an MCP server's tool or resource.
// Exactly one of Tool and Resource is set; deny rules name tools.
type MCPRule struct {
	RuleBase
	Server   string  `json:"server"`
	Tool     *string `json:"tool"`
	Resource *string `json:"resource"`
}

// SecretExposureRule sets the exposure of secret namespaces: "forbid"
// (effect deny), "reference_only" or "inject" (effect allow).
type SecretExposureRule struct {
	RuleBase
	Namespace string `json:"namespace"`
	Exposure  string `json:"exposure"`
}

// EnvironmentRule grants reading or injecting environment variables (effect
// allow, exposure "read" or "inject") or denies them (effect deny, "forbid").
type EnvironmentRule struct {
	RuleBase
	Pattern  string `json:"pattern"`
	Exposure string `json:"exposure"`
}

// BudgetRule limits a budget kind ("calls", "tokens", "cost_microunits",
// "wall_microseconds") per window (null: the policy's lifetime).
type BudgetRule struct {
	RuleBase
	BudgetKind         string `json:"budget_kind"`
	Limit              int64  `json:"limit"`
	WindowMicroseconds *int64 `json:"window_microseconds"`
}

// ExpiryRule allows requests only within [NotBefore, ExpiresAt) (either end
// may be null, not both). Times are RFC 3339 UTC with 6 fractional digits.
type ExpiryRule struct {
	RuleBase
	NotBefore *string `json:"not_before"`
	ExpiresAt *string `json:"expires_at"`
}

// Kind implementations.
func (*ActionRule) Kind() Kind         { return KindAction }
func (*ApprovalRule) Kind() Kind       { return KindApproval }
func (*FilesystemRule) Kind() Kind     { return KindFilesystem }
func (*NetworkRule) Kind() Kind        { return KindNetwork }
func (*SubprocessRule) Kind() Kind     { return KindSubprocess }
func (*MCPRule) Kind() Kind            { return KindMCP }
func (*SecretExposureRule) Kind() Kind { return KindSecretExposure }
func (*EnvironmentRule) Kind() Kind    { return KindEnvironment }
func (*BudgetRule) Kind() Kind         { return KindBudget }
func (*ExpiryRule) Kind() Kind         { return KindExpiry }

// BudgetKinds lists the budget kinds in canonical order.
var BudgetKinds = []string{"calls", "cost_microunits", "tokens", "wall_microseconds"}

// Rules is the compiled_rules member: a list of rules encoded with their kind.
type Rules []Rule

// MarshalJSON encodes each rule as one object with a "kind" member.
func (rs Rules) MarshalJSON() ([]byte, error) { return rs.AppendCanonical(nil) }

// AppendCanonical appends the canonical JSON of the rules (jcs.Appender).
func (rs Rules) AppendCanonical(dst []byte) ([]byte, error) {
	if rs == nil {
		return append(dst, "null"...), nil
	}
	dst = append(dst, '[')
	for i, r := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		var v any
		switch r := r.(type) {
		case *ActionRule:
			v = struct {
				Kind Kind `json:"kind"`
				*ActionRule
			}{r.Kind(), r}
		case *ApprovalRule:
			v = struct {
				Kind Kind `json:"kind"`
				*ApprovalRule
			}{r.Kind(), r}
		case *FilesystemRule:
			v = struct {
				Kind Kind `json:"kind"`
				*FilesystemRule
			}{r.Kind(), r}
		case *NetworkRule:
			v = struct {
				Kind Kind `json:"kind"`
				*NetworkRule
			}{r.Kind(), r}
		case *SubprocessRule:
			v = struct {
				Kind Kind `json:"kind"`
				*SubprocessRule
			}{r.Kind(), r}
		case *MCPRule:
			v = struct {
				Kind Kind `json:"kind"`
				*MCPRule
			}{r.Kind(), r}
		case *SecretExposureRule:
			v = struct {
				Kind Kind `json:"kind"`
				*SecretExposureRule
			}{r.Kind(), r}
		case *EnvironmentRule:
			v = struct {
				Kind Kind `json:"kind"`
				*EnvironmentRule
			}{r.Kind(), r}
		case *BudgetRule:
			v = struct {
				Kind Kind `json:"kind"`
				*BudgetRule
			}{r.Kind(), r}
		case *ExpiryRule:
			v = struct {
				Kind Kind `json:"kind"`
				*ExpiryRule
			}{r.Kind(), r}
		default:
			return nil, fmt.Errorf("snapshot: unknown rule type %T", r)
		}
		var err error
		if dst, err = jcs.Append(dst, v); err != nil {
			return nil, err
		}
	}
	return append(dst, ']'), nil
}

// NewRule returns an empty rule of kind k, or nil for an unknown kind.
func NewRule(k Kind) Rule {
	switch k {
	case KindAction:
		return &ActionRule{}
	case KindApproval:
		return &ApprovalRule{}
	case KindFilesystem:
		return &FilesystemRule{}
	case KindNetwork:
		return &NetworkRule{}
	case KindSubprocess:
		return &SubprocessRule{}
	case KindMCP:
		return &MCPRule{}
	case KindSecretExposure:
		return &SecretExposureRule{}
	case KindEnvironment:
		return &EnvironmentRule{}
	case KindBudget:
		return &BudgetRule{}
	case KindExpiry:
		return &ExpiryRule{}
	}
	return nil
}

// UnmarshalJSON decodes rules strictly: the kind selects the variant, and the
// object must have exactly that variant's members plus "kind".
func (rs *Rules) UnmarshalJSON(data []byte) error {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return fmt.Errorf("want an array of rules")
	}
	out := make(Rules, len(raws))
	for i, raw := range raws {
		var head struct {
			Kind *Kind `json:"kind"`
		}
		if err := json.Unmarshal(raw, &head); err != nil || head.Kind == nil {
			return fmt.Errorf("[%d].kind: missing or not a string", i)
		}
		r := NewRule(*head.Kind)
		if r == nil {
			return fmt.Errorf("[%d].kind: unknown rule kind %q", i, *head.Kind)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("[%d]: want an object", i)
		}
		delete(obj, "kind")
		rest, _ := json.Marshal(obj)
		if err := strictjson.Decode(rest, r); err != nil {
			return fmt.Errorf("[%d].%s", i, strings.TrimPrefix(err.Error(), "."))
		}
		out[i] = r
	}
	*rs = out
	return nil
}

// ExpectedRuleID returns the id a rule with r's content must have. Rule ids
// are derived, never chosen, so that they are stable across reformatting and
// reordering of the source and readable in decisions ("action.deny:bash:rm *").
func ExpectedRuleID(r Rule) string {
	qualified := func(action string, target *string) string {
		if target == nil {
			return action
		}
		return action + ":" + *target
	}
	switch r := r.(type) {
	case *ActionRule:
		return "action." + r.Effect + ":" + qualified(r.Action, r.Target)
	case *ApprovalRule:
		approver := ""
		if r.ApproverClass != nil {
			approver = *r.ApproverClass
		}
		return "approval[" + approver + "]:" + qualified(r.Action, r.Target)
	case *FilesystemRule:
		if r.Effect == EffectDeny {
			return "filesystem.deny:" + r.Pattern
		}
		return "filesystem." + r.Access + ":" + r.Pattern
	case *NetworkRule:
		return "network." + r.Effect + ":" + r.Pattern
	case *SubprocessRule:
		return "subprocess." + r.Effect + ":" + r.Pattern
	case *MCPRule:
		switch {
		case r.Effect == EffectDeny:
			return "mcp.deny:" + r.Server + "/" + deref(r.Tool)
		case r.Resource != nil:
			return "mcp.resource:" + r.Server + "/" + *r.Resource
		}
		return "mcp.tool:" + r.Server + "/" + deref(r.Tool)
	case *SecretExposureRule:
		return "secret." + r.Exposure + ":" + r.Namespace
	case *EnvironmentRule:
		if r.Effect == EffectDeny {
			return "environment.deny:" + r.Pattern
		}
		return "environment." + r.Exposure + ":" + r.Pattern
	case *BudgetRule:
		return "budget." + r.BudgetKind
	case *ExpiryRule:
		return "expiry"
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
