package statestore

import (
	"fmt"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
)

// The projection's rules, shared by every store (SQLite here, PostgreSQL
// in package pgstore): which batches are refused, when a record counts as
// applied, and what a record does to its operation. A store only reads and
// writes its rows, so both refuse the same inputs with the same errors.

// CheckProjection checks ApplyProjection's preconditions, with
// *InputError: projector is non-empty, version >= 1, and every record has
// non-empty ChainID, RecordID and ChainHash, a valid chain record type and,
// when the type has one, an operation id.
func CheckProjection(projector string, version int, records []executor.ProjectedRecord) error {
	if projector == "" {
		return &InputError{What: "projection", Reason: "empty projector name"}
	}
	if version < 1 {
		return &InputError{What: "projection " + projector, Reason: fmt.Sprintf("version %d < 1", version)}
	}
	for i := range records {
		if err := validateProjected(&records[i]); err != nil {
			return err
		}
	}
	return nil
}

// CheckCursorVersion refuses, with *executor.StateConflictError, to go on
// from projector's cursor committed under another version: that version
// continuing from it would never apply the records before it.
func CheckCursorVersion(projector string, committed, version int) error {
	if committed != version {
		return &executor.StateConflictError{Key: "projector " + projector,
			Reason: fmt.Sprintf("its cursor was committed under projection version %d, not %d; a new version needs a new projector name", committed, version)}
	}
	return nil
}

// ScanProjected reports whether r is already applied under version, from
// the rows (projection_version, chain_hash) applied under its (chain_id,
// record_id). A record never changes, so one applied under any version
// with another chain_hash is *executor.ProjectionConflictError.
func ScanProjected(rows Rows, r *executor.ProjectedRecord, version int) (bool, error) {
	done := false
	for rows.Next() {
		var v int
		var have string
		if err := rows.Scan(&v, &have); err != nil {
			return false, err
		}
		if have != r.ChainHash {
			return false, &executor.ProjectionConflictError{ChainID: r.ChainID, RecordID: r.RecordID, Projected: have, Got: r.ChainHash}
		}
		done = done || v == version
	}
	return done, rows.Err()
}

func recordWhat(r *executor.ProjectedRecord) string {
	return "record " + r.RecordID + " of chain " + r.ChainID
}

func validateProjected(r *executor.ProjectedRecord) error {
	switch {
	case r.ChainID == "" || r.RecordID == "":
		return &InputError{What: recordWhat(r), Reason: "empty ChainID or RecordID"}
	case r.ChainHash == "":
		return &InputError{What: recordWhat(r), Reason: "empty ChainHash"}
	case !chain.Type(r.RecordType).Valid():
		return &InputError{What: recordWhat(r), Reason: fmt.Sprintf("unknown record type %q", r.RecordType)}
	case chain.Type(r.RecordType).HasOperation() && (r.OperationID == nil || *r.OperationID == ""):
		return &InputError{What: recordWhat(r), Reason: r.RecordType + " without an operation id"}
	}
	return nil
}

// OperationChange is what one newly applied record (Record) does to its
// operation's row: an operation_started inserts the row from Start; a
// terminal sets the row's Status, ReasonCode, ResultDigest and DurationUS
// once.
type OperationChange struct {
	Record      *executor.ProjectedRecord
	Type        chain.Type
	OperationID string
	Start       chain.OperationStartedPayload // operation_started only
	// A terminal's: ReasonCode is the denial or ambiguity reason code or
	// the error class of a failed call, ResultDigest callable_completed's,
	// DurationUS nil for operation_denied only.
	Status       string
	ReasonCode   *string
	ResultDigest *string
	DurationUS   *int64
}

// OperationChangeOf decodes r's payload into its OperationChange; ok is
// false when r neither starts nor ends an operation. A payload that does
// not decode for its type is *InputError.
func OperationChangeOf(r *executor.ProjectedRecord) (c OperationChange, ok bool, err error) {
	t := chain.Type(r.RecordType)
	if t != chain.OperationStarted && !t.Terminal() {
		return OperationChange{}, false, nil
	}
	p, err := chain.DecodePayload(t, r.PayloadJSON)
	if err != nil {
		return OperationChange{}, true, &InputError{What: recordWhat(r), Reason: err.Error()}
	}
	c = OperationChange{Record: r, Type: t, OperationID: *r.OperationID}
	if t == chain.OperationStarted {
		st, ok := p.(chain.OperationStartedPayload)
		if !ok {
			return OperationChange{}, true, &InputError{What: recordWhat(r), Reason: fmt.Sprintf("payload decoded as %T", p)}
		}
		c.Start = st
		return c, true, nil
	}
	c.Status, c.ReasonCode, c.ResultDigest, c.DurationUS, err = terminalState(r, p)
	return c, true, err
}

// Restarted decides an operation_started whose operation startedBy has
// already started: nil when that is this record (the same start, applied
// under another version), else *executor.StateConflictError.
func (c OperationChange) Restarted(startedBy string) error {
	if startedBy == c.Record.RecordID {
		return nil
	}
	return &executor.StateConflictError{Key: "operation " + c.OperationID,
		Reason: fmt.Sprintf("already started by record %s; %s starts it again", startedBy, c.Record.RecordID)}
}

// CheckEnd decides whether a terminal may end its operation, found or not,
// started in chainID and ended by terminalBy (nil: still running). A
// restart never infers anything from absence, so a terminal without its
// start is *InputError rather than invented; one of another chain, or
// after another terminal, is *executor.StateConflictError. done is true
// when this record already ended it (applied under another version).
func (c OperationChange) CheckEnd(found bool, chainID string, terminalBy *string) (done bool, err error) {
	r, key := c.Record, "operation "+c.OperationID
	switch {
	case !found:
		return false, &InputError{What: recordWhat(r), Reason: fmt.Sprintf("%s for operation %s, which has no operation_started", c.Type, c.OperationID)}
	case chainID != r.ChainID:
		return false, &executor.StateConflictError{Key: key, Reason: fmt.Sprintf("started in chain %s; %s of chain %s ends it", chainID, r.RecordID, r.ChainID)}
	case terminalBy == nil:
		return false, nil
	case *terminalBy == r.RecordID:
		return true, nil
	}
	return false, &executor.StateConflictError{Key: key, Reason: fmt.Sprintf("already ended by record %s; %s (%s) would end it again", *terminalBy, r.RecordID, c.Type)}
}

// terminalState derives what a terminal record (r, its payload decoded
// as p) sets on its operation: the status, the reason code, the result
// digest and the duration (nil for operation_denied). A payload of no
// terminal type is *InputError.
func terminalState(r *executor.ProjectedRecord, p chain.Payload) (status string, reason, result *string, dur *int64, err error) {
	var duration int64
	switch v := p.(type) {
	case chain.OperationDeniedPayload:
		status, reason = StatusDenied, &v.ReasonCode
		if v.Disposition == "escalate" {
			status = StatusEscalated
		}
	case chain.CallableCompletedPayload:
		status, result, duration = StatusSucceeded, &v.ResultDigest, v.DurationUS
	case chain.CallableFailedPayload:
		status, reason, duration = StatusFailed, &v.ErrorClass, v.DurationUS
	case chain.OperationCancelledPayload:
		status, duration = StatusCancelled, v.DurationUS
	case chain.OperationTimedOutPayload:
		status, duration = StatusTimedOut, v.DurationUS
	case chain.ExternalResultAmbiguousPayload:
		status, reason, duration = StatusAmbiguous, &v.ReasonCode, v.DurationUS
	default:
		return "", nil, nil, nil, &InputError{What: recordWhat(r), Reason: fmt.Sprintf("no status for terminal type %s", r.RecordType)}
	}
	if chain.Type(r.RecordType) != chain.OperationDenied {
		dur = &duration
	}
	return status, reason, result, dur, nil
}
