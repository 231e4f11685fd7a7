// Package diag holds polc's one positioned diagnostic type: every error or
// warning a policy author sees is a Diagnostic with a stable code, printed as
//
//	file:line:col: code: message
//
// with paths relative to the working directory and forward slashes. Lists are
// sorted by position, then code, then message, and deduplicated, so output is
// deterministic whatever order the compiler found problems in.
package diag

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
)

// Severity separates problems that fail a command from advice.
type Severity string

const (
	// Error diagnostics make vet/compile exit 1 and write nothing.
	Error Severity = "error"
	// Warning diagnostics are printed but do not change the exit code.
	Warning Severity = "warning"
)

// Stable diagnostic codes. They are a contract: tests and CI consumers match
// on them, never on message text. docs/errors.md describes each.
const (
	CodeSyntax                = "syntax_error"
	CodeInvalidEncoding       = "invalid_encoding"
	CodeSchemaViolation       = "schema_violation"
	CodeUnknownField          = "unknown_field"
	CodeExpansionUnauth       = "expansion_unauthorized"
	CodeExtendsCycle          = "extends_cycle"
	CodeExtendsMissing        = "extends_missing"
	CodeInvalidPattern        = "invalid_pattern"
	CodeInheritNotAPreset     = "inherit_not_a_preset"
	CodeAllowShadowed         = "allow_shadowed"
	CodeDuplicatePolicy       = "duplicate_policy"
	CodeNameMismatch          = "name_mismatch"
	CodeInvalidValue          = "invalid_value"
	CodeExpansionUnused       = "expansion_unused"
	CodeExpiryClamped         = "expiry_clamped"
	CodeGateUnknownRule       = "gate_unknown_rule"
	CodeInvalidInput          = "invalid_input"
	CodeIO                    = "io_error"
	CodeNoPolicies            = "no_policies"
	CodeNoTests               = "no_tests"
	CodeLegacyUnrepresentable = "legacy_unrepresentable"
	CodeLegacyOverridden      = "legacy_overridden"
	CodeTestFailed            = "test_failed"
	CodeActionUnknown         = "action_unknown"
	CodeChainDamaged          = "chain_damaged"
	CodeCertificateRefused    = "certificate_refused"
	CodeEnvRunsCode           = "env_runs_code"
	// CodeHostNeverRequested: a host pattern no normalized request can
	// carry (a loopback address other than 127.0.0.1, the unspecified
	// address, an address not in the spelling requests use).
	CodeHostNeverRequested = "host_never_requested"
	CodeScopeEmpty         = "scope_empty"
)

// Pos is a source position. Line and Col are 1-based; a zero Line means the
// position is unknown (then only the file, or nothing, is printed), and a
// zero Col that only the column is (file:line is printed).
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

func (p Pos) String() string {
	switch {
	case p.File == "" && p.Line == 0:
		return "-"
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Compare orders positions by file, line and column.
func (p Pos) Compare(q Pos) int {
	return cmp.Or(strings.Compare(p.File, q.File), cmp.Compare(p.Line, q.Line), cmp.Compare(p.Col, q.Col))
}

// Diagnostic is one positioned finding.
type Diagnostic struct {
	Pos      Pos      `json:"pos"`
	Severity Severity `json:"severity"`
	Code     string   `json:"code"`
	Message  string   `json:"message"`
}

// Error implements error in the canonical one-line form.
func (d *Diagnostic) Error() string {
	return fmt.Sprintf("%s: %s: %s", d.Pos, d.Code, d.Message)
}

// Is lets errors.Is match a diagnostic by code: errors.Is(err, &Diagnostic{Code: c}).
func (d *Diagnostic) Is(target error) bool {
	t, ok := target.(*Diagnostic)
	return ok && t.Code == d.Code
}

// List is a set of diagnostics. Its zero value is empty and ready to use.
type List []*Diagnostic

// Add appends an error diagnostic.
func (l *List) Add(pos Pos, code, format string, args ...any) {
	*l = append(*l, &Diagnostic{Pos: pos, Severity: Error, Code: code, Message: fmt.Sprintf(format, args...)})
}

// Warn appends a warning diagnostic.
func (l *List) Warn(pos Pos, code, format string, args ...any) {
	*l = append(*l, &Diagnostic{Pos: pos, Severity: Warning, Code: code, Message: fmt.Sprintf(format, args...)})
}

// Append adds every diagnostic of m.
func (l *List) Append(m List) { *l = append(*l, m...) }

// HasErrors reports whether any diagnostic is an error.
func (l List) HasErrors() bool {
	return slices.ContainsFunc(l, func(d *Diagnostic) bool { return d.Severity == Error })
}

// Errors returns only the error diagnostics.
func (l List) Errors() List {
	return slices.DeleteFunc(slices.Clone(l), func(d *Diagnostic) bool { return d.Severity != Error })
}

// Sorted returns the list sorted by position, severity, code and message, with
// exact duplicates removed.
func (l List) Sorted() List {
	out := slices.Clone(l)
	slices.SortStableFunc(out, func(a, b *Diagnostic) int {
		return cmp.Or(a.Pos.Compare(b.Pos), strings.Compare(string(a.Severity), string(b.Severity)),
			strings.Compare(a.Code, b.Code), strings.Compare(a.Message, b.Message))
	})
	return slices.CompactFunc(out, func(a, b *Diagnostic) bool { return *a == *b })
}

// Err returns the list as an error when it has errors, nil otherwise.
func (l List) Err() error {
	if !l.HasErrors() {
		return nil
	}
	return l.Sorted()
}

// Error joins the sorted diagnostics one per line.
func (l List) Error() string {
	var b strings.Builder
	for i, d := range l.Sorted() {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(d.Error())
	}
	return b.String()
}

// Rel rewrites an absolute or cwd-relative file name into the portable form
// printed to users: relative to cwd, forward slashes, "./"-free. Names that
// are not files (like "<stdin>") are returned unchanged.
func Rel(cwd, file string) string {
	if file == "" || strings.HasPrefix(file, "<") {
		return file
	}
	if filepath.IsAbs(file) && cwd != "" {
		if r, err := filepath.Rel(cwd, file); err == nil && !strings.HasPrefix(r, "..") {
			file = r
		}
	}
	return filepath.ToSlash(filepath.Clean(file))
}

// Format names an output format for diagnostics.
type Format string

// Output formats accepted by polc's --diagnostics.
const (
	FormatText   Format = "text"
	FormatJSON   Format = "json"
	FormatGitHub Format = "github"
	// FormatSARIF is a SARIF 2.1.0 log (OASIS), for code-scanning uploads.
	FormatSARIF Format = "sarif"
)

// Document reports whether f prints one document (JSON, SARIF), which a
// command writes to stdout even when the list is empty, rather than lines.
func (f Format) Document() bool { return f == FormatJSON || f == FormatSARIF }

// Print writes the sorted list in the given format. Text prints
// "file:line:col: code: message", prefixing warnings with "warning: " after
// the position; JSON prints {"diagnostics":[...]}; GitHub prints workflow
// commands (::error file=…,line=…,col=…::code: message); SARIF prints one
// run of the tool "polc" whose rules are the codes (sarif.go).
func Print(w io.Writer, l List, f Format) error {
	l = l.Sorted()
	switch f {
	case FormatSARIF:
		b, err := json.MarshalIndent(sarifLog(l), "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case FormatJSON:
		if l == nil {
			l = List{}
		}
		b, err := json.MarshalIndent(struct {
			Diagnostics List `json:"diagnostics"`
		}{l}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case FormatGitHub:
		for _, d := range l {
			kind := "error"
			if d.Severity == Warning {
				kind = "warning"
			}
			if _, err := fmt.Fprintf(w, "::%s%s::%s: %s\n", kind, githubProperties(d.Pos), d.Code, escapeGitHub(d.Message)); err != nil {
				return err
			}
		}
		return nil
	default:
		for _, d := range l {
			var err error
			if d.Severity == Warning {
				_, err = fmt.Fprintf(w, "%s: warning: %s: %s\n", d.Pos, d.Code, d.Message)
			} else {
				_, err = fmt.Fprintln(w, d.Error())
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// githubProperties is " file=…,line=…,col=…" with only what is known:
// GitHub reads "file=" as a file named "" and "line=0" as a line, and
// annotates nothing or the wrong place; without them the annotation is
// on the run.
func githubProperties(p Pos) string {
	var props []string
	if p.File != "" {
		props = append(props, "file="+escapeGitHubProperty(p.File))
		if p.Line > 0 {
			props = append(props, fmt.Sprintf("line=%d", p.Line))
			if p.Col > 0 {
				props = append(props, fmt.Sprintf("col=%d", p.Col))
			}
		}
	}
	if len(props) == 0 {
		return ""
	}
	return " " + strings.Join(props, ",")
}

func escapeGitHub(s string) string {
	return githubData.Replace(s)
}

// escapeGitHubProperty escapes a workflow command's property value, where
// ':' and ',' also delimit (a file named "a,line=9" must not move the
// annotation).
func escapeGitHubProperty(s string) string {
	return githubProperty.Replace(s)
}

var (
	githubData     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	githubProperty = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)

// Further stable codes.
const (
	CodeUnknownCapability       = "unknown_capability"
	CodeHarnessPolicyConflict   = "harness_policy_conflict"
	CodeHarnessPolicyUnmappable = "harness_policy_unmappable"
	CodeLegacyYolo              = "legacy_yolo"
	CodeHarnessMissing          = "harness_missing"
	CodeHarnessCompile          = "harness_compile_error"
	CodeNoEffect                = "no_effect"
	CodePolicyExpired           = "policy_expired"
	CodeHarnessEnvRefused       = "harness_env_refused"
	// CodeRuleNeverEffective: polc vet: a grant or approval no request
	// can take effect through (every value it matches is denied).
	CodeRuleNeverEffective = "rule_never_effective"
	// CodeRuleUnmatchable: polc vet: a rule that matches no value a
	// request can carry.
	CodeRuleUnmatchable = "rule_unmatchable"
	// CodeRuleRedundant: polc vet: a rule other rules of its kind
	// already cover.
	CodeRuleRedundant = "rule_redundant"
	// CodeFacetEmptied: polc vet: a child allows no value of a facet its
	// parent allows some of.
	CodeFacetEmptied = "facet_emptied"
	// CodeRulesUnanalysed: polc vet: rules whose questions need more
	// work than the search's bound, for which no finding is reported.
	CodeRulesUnanalysed = "rules_unanalysed"
	// CodeNoProperties: polc prove found no property to decide.
	CodeNoProperties = "no_properties"
	// CodePropertyFailed: a property fails; the message holds the
	// counterexample request both engines decided.
	CodePropertyFailed = "property_failed"
	// CodePropertyUndecided: a property could not be decided (a
	// violating value no request was confirmed for, or a search beyond
	// its bound); never reported as holding.
	CodePropertyUndecided = "property_undecided"
)
