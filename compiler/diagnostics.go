package compiler

import (
	"fmt"
	"io"

	"polc.dev/polc/internal/diag"
)

// The diagnostic types below are aliases of polc's internal diag package:
// Result.Diagnostics, Load and the declarations' positions use them, and
// an importer outside this module could otherwise neither name them nor
// print them the way the polc CLI does.

// Diagnostics is the list Compile, Vet and Load report (Result.Diagnostics):
// every error and warning, each with a stable code. Its zero value is an
// empty list. HasErrors says whether it fails the input, Errors keeps the
// errors alone, Sorted orders it by position, and Err returns it as an
// error (nil when it has no errors). PrintDiagnostics prints it.
type Diagnostics = diag.List

// Diagnostic is one positioned finding: its Pos, Severity
// (SeverityError or SeverityWarning), Code (a stable code, listed in
// docs/errors.md: match on it, never on Message) and Message. As an
// error it reads "file:line:col: code: message", and errors.Is matches
// one diagnostic by code: errors.Is(d, &compiler.Diagnostic{Code: c}).
// (A Diagnostics list does not unwrap into its diagnostics: range over
// it to find a code.)
type Diagnostic = diag.Diagnostic

// Pos is a source position (Policy.Pos, Harness.Pos, Diagnostic.Pos):
// File relative to Config.Dir when it is inside it (else as given), with
// forward slashes, and 1-based Line and Col. A zero Line means the position is unknown,
// a zero Col that the column is.
type Pos = diag.Pos

// Severity separates errors, which fail the input, from warnings.
type Severity = diag.Severity

// Severities of a Diagnostic.
const (
	SeverityError   Severity = diag.Error
	SeverityWarning Severity = diag.Warning
)

// DiagnosticFormat is an output format of PrintDiagnostics, the formats of
// polc's --diagnostics flag.
type DiagnosticFormat = diag.Format

// Diagnostic formats.
const (
	// DiagnosticsText prints one "file:line:col: code: message" line per
	// diagnostic, "warning: " after the position of a warning.
	DiagnosticsText DiagnosticFormat = diag.FormatText
	// DiagnosticsJSON prints one document: {"diagnostics": [...]}, each with
	// pos {file, line, col}, severity, code and message.
	DiagnosticsJSON DiagnosticFormat = diag.FormatJSON
	// DiagnosticsGitHub prints GitHub Actions workflow commands
	// (::error file=…,line=…,col=…::code: message).
	DiagnosticsGitHub DiagnosticFormat = diag.FormatGitHub
	// DiagnosticsSARIF prints a SARIF 2.1.0 log, for code-scanning uploads.
	DiagnosticsSARIF DiagnosticFormat = diag.FormatSARIF
)

// PrintDiagnostics writes l, sorted and without duplicates, to w in format
// f, exactly as the polc CLI prints them. f must be one of the
// DiagnosticFormat constants: any other is an error and nothing is
// written (printing text instead would hand a JSON or SARIF consumer
// something it cannot parse).
// A document format (JSON, SARIF) prints a document even for an empty
// list; text and GitHub print nothing then.
func PrintDiagnostics(w io.Writer, l Diagnostics, f DiagnosticFormat) error {
	switch f {
	case DiagnosticsText, DiagnosticsJSON, DiagnosticsGitHub, DiagnosticsSARIF:
		return diag.Print(w, l, f)
	}
	return fmt.Errorf("compiler: unknown diagnostic format %q (want text, json, github or sarif)", f)
}
