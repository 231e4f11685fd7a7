package statestore

import "fmt"

// SchemaVersionError refuses a database this package cannot read safely:
// one written by a newer polc (Found > Supported), one that is not a polc
// state store at all (Found == 0: tables but no single schema_version row),
// or one of a supported version that lacks a table or index of that
// version or has one altered (Problem says which).
type SchemaVersionError struct {
	Path      string
	Found     int
	Supported int
	// Problem is set when the version is supported but the schema is not
	// that version's, e.g. "no table operations, index outbox_by_run differs".
	Problem string
}

func (e *SchemaVersionError) Error() string {
	if e.Problem != "" {
		return fmt.Sprintf("statestore: %s says schema version %d but its schema is damaged: %s", e.Path, e.Found, e.Problem)
	}
	if e.Found == 0 {
		return fmt.Sprintf("statestore: %s is not a polc state store (no valid schema_version)", e.Path)
	}
	return fmt.Sprintf("statestore: %s has schema version %d; this polc supports up to %d", e.Path, e.Found, e.Supported)
}

// InputError rejects input that can never be committed, whatever the state
// of the database: a missing identifier, a payload that is not JSON, an
// evidence record that does not decode, or a terminal record for an
// operation that was never started. Retrying the same input fails the same
// way; nothing of the call was applied.
type InputError struct {
	// What names the offending value, e.g. "attempt 9f…" or "record 1c… of chain 7a…".
	What   string
	Reason string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("statestore: invalid %s: %s", e.What, e.Reason)
}
