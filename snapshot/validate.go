package snapshot

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/internal/strictjson"
)

func decodeStrict(body []byte, s *Snapshot) error {
	if err := strictjson.Decode(body, s); err != nil {
		if se, ok := err.(*strictjson.Error); ok {
			return &ParseError{se.Path, se.Msg}
		}
		return &ParseError{"", err.Error()}
	}
	return nil
}

// Validate checks every semantic invariant of the format except the digest
// (see Parse). It returns the first problem as a *ParseError.
func (s *Snapshot) Validate() error {
	fail := func(path, format string, args ...any) error {
		return &ParseError{path, fmt.Sprintf(format, args...)}
	}
	switch {
	case s.Format != Format:
		return fail("format", "unsupported format %q (want %q)", s.Format, Format)
	case s.DigestAlgorithm != DigestAlgorithm:
		return fail("digest_algorithm", "unsupported digest algorithm %q (want %q)", s.DigestAlgorithm, DigestAlgorithm)
	case !hexDigest.MatchString(s.Digest):
		return fail("digest", "want 64 lowercase hex characters")
	case !uuidRe.MatchString(s.PolicyID):
		return fail("policy_id", "want a lowercase UUID")
	case s.Name == "":
		return fail("name", "empty")
	case s.Version == "":
		return fail("version", "empty")
	case s.Provenance.Compiler != CompilerContract:
		return fail("provenance.compiler", "unsupported compiler contract %q (want %q)", s.Provenance.Compiler, CompilerContract)
	}
	for _, sc := range []struct {
		name string
		list []string
	}{{"principal_scope", s.PrincipalScope}, {"tenant_scope", s.TenantScope}} {
		if err := sortedUnique(sc.list); err != nil {
			return fail(sc.name, "%v", err)
		}
		for i, p := range sc.list {
			if err := pattern.Validate(pattern.Principal, p); err != nil {
				return fail(fmt.Sprintf("%s[%d]", sc.name, i), "%v", err)
			}
		}
	}
	ids := make(map[string]bool, len(s.CompiledRules))
	// The policy-wide settings that lowering copies into every rule of a
	// kind: the subprocess shell setting and the budget window. The
	// compiler raises a parent snapshot back into one setting (polc
	// compile --parent), so rules that disagree would be inherited as
	// whichever came first, a wider policy than the parent's.
	var shellRule, windowRule int = -1, -1
	for i, r := range s.CompiledRules {
		path := fmt.Sprintf("compiled_rules[%d]", i)
		b := r.Base()
		if b.Order != i {
			return fail(path+".order", "order %d at index %d; rules are ordered by index", b.Order, i)
		}
		if err := validateRule(r); err != nil {
			return fail(path, "%v", err)
		}
		switch r := r.(type) {
		case *SubprocessRule:
			if r.Effect != EffectAllow {
				break
			}
			if shellRule < 0 {
				shellRule = i
				break
			}
			if first := s.CompiledRules[shellRule].(*SubprocessRule); *first.Shell != *r.Shell {
				return fail(path+".shell", "subprocess allow rules share one shell setting (subprocess.shell); rule %q has %q, rule %q has %q", first.RuleID, *first.Shell, r.RuleID, *r.Shell)
			}
		case *BudgetRule:
			if windowRule < 0 {
				windowRule = i
				break
			}
			if first := s.CompiledRules[windowRule].(*BudgetRule); !sameWindow(first.WindowMicroseconds, r.WindowMicroseconds) {
				return fail(path+".window_microseconds", "budget rules share one window (budgets.window); rule %q has %s, rule %q has %s", first.RuleID, windowText(first.WindowMicroseconds), r.RuleID, windowText(r.WindowMicroseconds))
			}
		}
		if want := ExpectedRuleID(r); b.RuleID != want {
			return fail(path+".rule_id", "rule_id %q does not match its content (want %q)", b.RuleID, want)
		}
		if i > 0 && s.CompiledRules[i-1].Base().RuleID >= b.RuleID {
			return fail(path+".rule_id", "rules must be sorted by rule_id without duplicates")
		}
		if len(b.Provenance) == 0 {
			return fail(path+".provenance", "empty")
		}
		for j, o := range b.Provenance {
			if o.Policy == "" || o.Field == "" {
				return fail(fmt.Sprintf("%s.provenance[%d]", path, j), "policy and field must be non-empty")
			}
			if j > 0 && !originLess(b.Provenance[j-1], o) {
				return fail(path+".provenance", "must be sorted without duplicates")
			}
		}
		ids[b.RuleID] = true
	}
	bound := make(map[string]string, len(ids))
	gateIDs := make(map[string]bool)
	for i, g := range s.GateBindings {
		path := fmt.Sprintf("gate_bindings[%d]", i)
		switch {
		case g.Order != i:
			return fail(path+".order", "order %d at index %d", g.Order, i)
		case g.GateID == "":
			return fail(path+".gate_id", "empty")
		case gateIDs[g.GateID]:
			return fail(path+".gate_id", "duplicate gate %q", g.GateID)
		case g.AdapterID != AdapterID:
			return fail(path+".adapter_id", "unknown adapter %q", g.AdapterID)
		case g.Level != LevelHard && g.Level != LevelSoft && g.Level != LevelAdvisory:
			return fail(path+".level", "unknown level %q", g.Level)
		case len(g.ToolIDs) == 0:
			return fail(path+".tool_ids", "empty")
		}
		gateIDs[g.GateID] = true
		for _, list := range [][]string{g.ToolIDs, g.Selectors, g.RuleIDs} {
			if err := sortedUnique(list); err != nil {
				return fail(path, "%v", err)
			}
		}
		for _, id := range g.RuleIDs {
			if !ids[id] {
				return fail(path+".rule_ids", "unknown rule %q", id)
			}
			if other, dup := bound[id]; dup {
				return fail(path+".rule_ids", "rule %q is already bound to gate %q", id, other)
			}
			bound[id] = g.GateID
		}
	}
	for id := range ids {
		if _, ok := bound[id]; !ok {
			return fail("gate_bindings", "rule %q is bound to no gate", id)
		}
	}
	for i, a := range s.Lineage {
		path := fmt.Sprintf("lineage[%d]", i)
		if !uuidRe.MatchString(a.PolicyID) || a.Name == "" || a.Version == "" || !hexDigest.MatchString(a.Digest) {
			return fail(path, "want a lowercase UUID, a name, a version and a 64-hex digest")
		}
	}
	for i, e := range s.Expansions {
		path := fmt.Sprintf("expansions[%d]", i)
		if e.Path == "" || len(e.Values) == 0 || strings.TrimSpace(e.Authority) == "" || strings.TrimSpace(e.Evidence) == "" {
			return fail(path, "an expansion needs a path, values, an authority and evidence")
		}
		for j, v := range e.Values {
			if !expansionValue(v) {
				return fail(fmt.Sprintf("%s.values[%d]", path, j), "want a string or an integer within ±(2^53-1)")
			}
		}
	}
	switch s.ReleaseState {
	case Staged:
		if s.ActivatedAt != nil || s.ActivatedBy != nil {
			return fail("activated_at", "a staged snapshot has no activation")
		}
	case Active:
		if s.ActivatedAt == nil || !timeRe.MatchString(*s.ActivatedAt) {
			return fail("activated_at", "an active snapshot needs activated_at (YYYY-MM-DDTHH:MM:SS.ffffffZ)")
		}
		if s.ActivatedBy == nil || s.ActivatedBy.Kind == "" || s.ActivatedBy.ID == "" {
			return fail("activated_by", "an active snapshot needs activated_by {kind, id}")
		}
	default:
		return fail("release_state", "unknown release state %q", s.ReleaseState)
	}
	return nil
}

func sameWindow(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func windowText(w *int64) string {
	if w == nil {
		return "null (the policy's lifetime)"
	}
	return fmt.Sprintf("%dµs", *w)
}

func originLess(a, b Origin) bool {
	return a.Policy < b.Policy || a.Policy == b.Policy && a.Field < b.Field
}

func sortedUnique(list []string) error {
	for i := 1; i < len(list); i++ {
		if list[i-1] >= list[i] {
			return fmt.Errorf("list must be sorted without duplicates (%q before %q)", list[i-1], list[i])
		}
	}
	return nil
}

func oneOf(v string, allowed ...string) error {
	if !slices.Contains(allowed, v) {
		return fmt.Errorf("value %q not one of %s", v, strings.Join(allowed, ", "))
	}
	return nil
}

func checkPattern(k pattern.Kind, p string, lower bool) error {
	if err := pattern.Validate(k, p); err != nil {
		return fmt.Errorf("pattern %q: %v", p, err)
	}
	if lower && strings.ToLower(p) != p {
		return fmt.Errorf("deny and approval patterns are stored lowercase: %q", p)
	}
	return nil
}

func checkTime(name string, t *string) error {
	if t == nil {
		return nil
	}
	if !timeRe.MatchString(*t) {
		return fmt.Errorf("%s %q: want YYYY-MM-DDTHH:MM:SS.ffffffZ", name, *t)
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000000Z", *t); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return nil
}

// checkAction validates the action and optional target of action and
// approval rules.
func checkAction(action string, tk, target *string, lower bool) error {
	if err := checkPattern(pattern.Action, action, lower); err != nil {
		return err
	}
	if (tk == nil) != (target == nil) {
		return fmt.Errorf("target_kind and target must both be null or both be set")
	}
	if tk == nil {
		return nil
	}
	want := pattern.TargetKindOf(action)
	if want == "" || string(want) != targetGrammar(*tk) {
		return fmt.Errorf("action %q cannot be qualified by a %q target", action, *tk)
	}
	return checkPattern(want, *target, lower)
}

func targetGrammar(tk string) string {
	switch tk {
	case TargetCommand:
		return string(pattern.Command)
	case TargetPath:
		return string(pattern.Path)
	case TargetHost:
		return string(pattern.Host)
	case TargetMCP:
		return string(pattern.MCP)
	}
	return ""
}

// TargetKindName maps the name of a pattern grammar ("command", "path",
// "host", "mcp") to the target_kind member value of a qualified rule, and
// any other name to "". It is generic over string types so that callers
// outside this module (with a plain string) and the compiler (with its
// internal grammar type) share it.
func TargetKindName[K ~string](grammar K) string {
	switch pattern.Kind(grammar) {
	case pattern.Command:
		return TargetCommand
	case pattern.Path:
		return TargetPath
	case pattern.Host:
		return TargetHost
	case pattern.MCP:
		return TargetMCP
	}
	return ""
}

func validateRule(r Rule) error {
	eff := r.Base().Effect
	switch r := r.(type) {
	case *ActionRule:
		if err := oneOf(eff, EffectAllow, EffectDeny); err != nil {
			return err
		}
		if eff == EffectAllow && r.Target != nil {
			return fmt.Errorf("allow rules name action ids, not qualified actions")
		}
		return checkAction(r.Action, r.TargetKind, r.Target, eff == EffectDeny)
	case *ApprovalRule:
		if err := oneOf(eff, EffectRequireApproval); err != nil {
			return err
		}
		if (r.ApproverClass == nil) != (r.ExpiresAfterMicroseconds == nil) {
			return fmt.Errorf("approver_class and expires_after_microseconds must both be null or both be set")
		}
		if r.ApproverClass != nil && *r.ApproverClass == "" {
			return fmt.Errorf("empty approver_class")
		}
		if r.ExpiresAfterMicroseconds != nil && (*r.ExpiresAfterMicroseconds <= 0 || *r.ExpiresAfterMicroseconds > MaxSafeInt) {
			return fmt.Errorf("expires_after_microseconds must be in [1, 2^53-1]")
		}
		return checkAction(r.Action, r.TargetKind, r.Target, true)
	case *FilesystemRule:
		if err := oneOf(eff, EffectAllow, EffectDeny); err != nil {
			return err
		}
		if eff == EffectDeny {
			if r.Access != "any" {
				return fmt.Errorf("deny rules have access \"any\"")
			}
		} else if err := oneOf(r.Access, "read", "write", "execute"); err != nil {
			return err
		}
		return checkPattern(pattern.Path, r.Pattern, eff == EffectDeny)
	case *NetworkRule:
		if err := oneOf(eff, EffectAllow, EffectDeny); err != nil {
			return err
		}
		return checkPattern(pattern.Host, r.Pattern, true)
	case *SubprocessRule:
		if err := oneOf(eff, EffectAllow, EffectDeny); err != nil {
			return err
		}
		if eff == EffectDeny {
			if r.Shell != nil {
				return fmt.Errorf("deny rules have shell null")
			}
		} else if r.Shell == nil {
			return fmt.Errorf("allow rules need shell")
		} else if err := oneOf(*r.Shell, "forbid", "allow"); err != nil {
			return err
		}
		return checkPattern(pattern.Command, r.Pattern, eff == EffectDeny)
	case *MCPRule:
		if err := oneOf(eff, EffectAllow, EffectDeny); err != nil {
			return err
		}
		if (r.Tool == nil) == (r.Resource == nil) {
			return fmt.Errorf("exactly one of tool and resource must be set")
		}
		if eff == EffectDeny && r.Tool == nil {
			return fmt.Errorf("deny rules name tools")
		}
		if r.Resource != nil {
			return checkPattern(pattern.MCPResource, r.Server+"/"+*r.Resource, false)
		}
		return checkPattern(pattern.MCP, r.Server+"/"+*r.Tool, eff == EffectDeny)
	case *SecretExposureRule:
		want := EffectAllow
		if r.Exposure == "forbid" {
			want = EffectDeny
		}
		if err := oneOf(r.Exposure, "forbid", "reference_only", "inject"); err != nil {
			return err
		}
		if eff != want {
			return fmt.Errorf("exposure %q has effect %q", r.Exposure, want)
		}
		return checkPattern(pattern.Namespace, r.Namespace, eff == EffectDeny)
	case *EnvironmentRule:
		want := EffectAllow
		if r.Exposure == "forbid" {
			want = EffectDeny
		}
		if err := oneOf(r.Exposure, "forbid", "read", "inject"); err != nil {
			return err
		}
		if eff != want {
			return fmt.Errorf("exposure %q has effect %q", r.Exposure, want)
		}
		return checkPattern(pattern.Env, r.Pattern, eff == EffectDeny)
	case *BudgetRule:
		if err := oneOf(eff, EffectLimit); err != nil {
			return err
		}
		if err := oneOf(r.BudgetKind, BudgetKinds...); err != nil {
			return err
		}
		// Integers beyond 2^53-1 have no exact canonical form: JCS writes
		// the nearest double, so 2^53 and 2^53+1 would share a digest.
		if r.Limit < 0 || r.Limit > MaxSafeInt {
			return fmt.Errorf("limit must be in [0, 2^53-1]")
		}
		if r.WindowMicroseconds != nil && (*r.WindowMicroseconds <= 0 || *r.WindowMicroseconds > MaxSafeInt) {
			return fmt.Errorf("window_microseconds must be in [1, 2^53-1]")
		}
		return nil
	case *ExpiryRule:
		if err := oneOf(eff, EffectAllow); err != nil {
			return err
		}
		if r.NotBefore == nil && r.ExpiresAt == nil {
			return fmt.Errorf("an expiry rule needs not_before or expires_at")
		}
		if err := checkTime("not_before", r.NotBefore); err != nil {
			return err
		}
		return checkTime("expires_at", r.ExpiresAt)
	}
	return fmt.Errorf("unknown rule type %T", r)
}

// MaxSafeInt is the largest integer a snapshot holds (2^53-1): canonical
// JSON numbers are doubles, exact up to it. Limits, durations and
// expansion values beyond it are refused.
const MaxSafeInt = 1<<53 - 1

// expansionValue reports whether v is what a declaration's expansion may
// list (the schema's string | #SafeInt): Parse gives numbers as
// json.Number, a snapshot built in memory may hold Go integers.
func expansionValue(v any) bool {
	switch x := v.(type) {
	case string:
		return true
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return false
		}
		n, err := x.Int64()
		return err == nil && n >= -MaxSafeInt && n <= MaxSafeInt
	case int:
		return x >= -MaxSafeInt && x <= MaxSafeInt
	case int64:
		return x >= -MaxSafeInt && x <= MaxSafeInt
	case float64:
		return x == float64(int64(x)) && x >= -MaxSafeInt && x <= MaxSafeInt
	}
	return false
}
