package statestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
)

// Operation statuses. "running" is set by operation_started; each terminal
// record type sets exactly one of the others, once.
const (
	StatusRunning   = "running"
	StatusSucceeded = "succeeded" // callable_completed
	StatusDenied    = "denied"    // operation_denied, disposition deny
	StatusEscalated = "escalated" // operation_denied, disposition escalate
	StatusFailed    = "failed"    // callable_failed
	StatusCancelled = "cancelled" // operation_cancelled
	StatusTimedOut  = "timed_out" // operation_timed_out
	StatusAmbiguous = "ambiguous" // external_result_ambiguous
)

// ApplyProjection implements executor.ProjectionStore. In one transaction it
// applies each record not yet applied under (chain_id, record_id, version),
// derives operation state from it and sets the projector's cursor to next.
//
// A record already applied with the same chain_hash is skipped. One applied
// under any version with a different chain_hash is
// *executor.ProjectionConflictError. A projector name whose cursor was
// committed under another version is *executor.StateConflictError. An
// operation_started for an operation already started by another record, or
// a terminal record for an operation that already has a different terminal
// (or belongs to another chain), is *executor.StateConflictError. A record
// whose payload does not decode for its type, or a terminal for an
// operation never started, is *InputError. On any error nothing of the
// batch is applied and the cursor does not move.
//
// Preconditions: projector is non-empty, version >= 1, and every record has
// non-empty ChainID, RecordID and ChainHash and a valid chain record type.
// Operation rows are keyed by operation id alone, not by version: replaying
// the same evidence under a new version finds them already in place.
func (s *SQLite) ApplyProjection(ctx context.Context, projector string, version int, records []executor.ProjectedRecord, next string) error {
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
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		// The name's cursor belongs to one version: another version
		// continuing from it would never apply the records before it.
		var committed int
		switch err := tx.QueryRowContext(ctx, "SELECT version FROM projection_cursors WHERE projector = ?", projector).Scan(&committed); {
		case err == sql.ErrNoRows:
		case err != nil:
			return err
		case committed != version:
			return &executor.StateConflictError{Key: "projector " + projector,
				Reason: fmt.Sprintf("its cursor was committed under projection version %d, not %d; a new version needs a new projector name", committed, version)}
		}
		for i := range records {
			r := &records[i]
			done, err := projected(ctx, tx, r, version)
			if err != nil {
				return err
			}
			if done {
				continue // a redelivery: at-least-once sources repeat
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO projected_records(
				chain_id, record_id, projection_version, sequence, record_type, operation_id, chain_hash)
				VALUES (?, ?, ?, ?, ?, ?, ?)`,
				r.ChainID, r.RecordID, version, r.Sequence, r.RecordType, r.OperationID, r.ChainHash); err != nil {
				return err
			}
			if err := applyOperation(ctx, tx, r); err != nil {
				return err
			}
			if err := s.step("record[" + strconv.Itoa(i) + "]"); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO projection_cursors(projector, cursor, version) VALUES (?, ?, ?)
			ON CONFLICT(projector) DO UPDATE SET cursor = excluded.cursor, version = excluded.version`,
			projector, next, version); err != nil {
			return err
		}
		return s.step("cursor")
	})
}

// projected reports whether r is already applied under version. A record
// never changes, so one applied under any version with another chain_hash
// is *executor.ProjectionConflictError.
func projected(ctx context.Context, tx *sql.Tx, r *executor.ProjectedRecord, version int) (bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT projection_version, chain_hash FROM projected_records
		WHERE chain_id = ? AND record_id = ?`, r.ChainID, r.RecordID)
	if err != nil {
		return false, err
	}
	defer rows.Close()
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

// CheckProjected checks one record's ApplyProjection preconditions, with
// *InputError (package pgstore refuses the same records).
func CheckProjected(r *executor.ProjectedRecord) error { return validateProjected(r) }

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

// applyOperation derives operation state from one newly applied record.
func applyOperation(ctx context.Context, tx *sql.Tx, r *executor.ProjectedRecord) error {
	t := chain.Type(r.RecordType)
	if t != chain.OperationStarted && !t.Terminal() {
		return nil
	}
	p, err := chain.DecodePayload(t, r.PayloadJSON)
	if err != nil {
		return &InputError{What: recordWhat(r), Reason: err.Error()}
	}
	opID := *r.OperationID
	var chainID, startedBy string
	var terminalBy sql.NullString
	err = tx.QueryRowContext(ctx, "SELECT chain_id, started_record_id, terminal_record_id FROM operations WHERE operation_id = ?", opID).
		Scan(&chainID, &startedBy, &terminalBy)
	exists := err == nil
	if err != nil && err != sql.ErrNoRows {
		return err
	}
	key := "operation " + opID
	if t == chain.OperationStarted {
		if exists {
			if startedBy == r.RecordID {
				return nil // the same start, applied under another version
			}
			return &executor.StateConflictError{Key: key, Reason: fmt.Sprintf("already started by record %s; %s starts it again", startedBy, r.RecordID)}
		}
		st, ok := p.(chain.OperationStartedPayload)
		if !ok {
			return &InputError{What: recordWhat(r), Reason: fmt.Sprintf("payload decoded as %T", p)}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO operations(operation_id, chain_id, run_id, attempt_id, tool_id, request_digest, status, started_record_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, opID, r.ChainID, st.RunID, st.AttemptID, st.ToolID, st.RequestDigest, StatusRunning, r.RecordID)
		return err
	}
	// A terminal. A restart never infers anything from absence, so a
	// terminal without its start is refused rather than invented.
	if !exists {
		return &InputError{What: recordWhat(r), Reason: fmt.Sprintf("%s for operation %s, which has no operation_started", t, opID)}
	}
	if chainID != r.ChainID {
		return &executor.StateConflictError{Key: key, Reason: fmt.Sprintf("started in chain %s; %s of chain %s ends it", chainID, r.RecordID, r.ChainID)}
	}
	if terminalBy.Valid {
		if terminalBy.String == r.RecordID {
			return nil // the same terminal, applied under another version
		}
		return &executor.StateConflictError{Key: key, Reason: fmt.Sprintf("already ended by record %s; %s (%s) would end it again", terminalBy.String, r.RecordID, t)}
	}
	status, reason, result, dur, err := TerminalState(r, p)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE operations SET status = ?, terminal_record_id = ?, terminal_type = ?,
		reason_code = ?, result_digest = ?, duration_us = ? WHERE operation_id = ? AND terminal_record_id IS NULL`,
		status, r.RecordID, string(t), reason, result, dur, opID)
	return err
}

// TerminalState derives what a terminal record (r, its payload decoded
// as p) sets on its operation: the status, the reason code, the result
// digest and the duration (nil for operation_denied). A payload of no
// terminal type is *InputError. Package pgstore derives the same.
func TerminalState(r *executor.ProjectedRecord, p chain.Payload) (status string, reason, result *string, dur *int64, err error) {
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

// ProjectionCursor implements executor.ProjectionStore: the cursor last
// committed by ApplyProjection for projector, or "" when it has committed
// none. The cursor is kept per projector name, and a name is bound to the
// version it was first committed under: a new projection version uses a
// new name.
func (s *SQLite) ProjectionCursor(ctx context.Context, projector string) (string, error) {
	var c string
	err := s.r.QueryRowContext(ctx, "SELECT cursor FROM projection_cursors WHERE projector = ?", projector).Scan(&c)
	if err == sql.ErrNoRows {
		return "", nil
	}
	return c, err
}

// Operation is the projected state of one operation.
type Operation struct {
	OperationID   string
	ChainID       string
	RunID         *string
	AttemptID     string
	ToolID        string
	RequestDigest string
	// Status is StatusRunning until a terminal record is projected.
	Status          string
	StartedRecordID string
	// The members below are nil while the operation is running.
	TerminalRecordID *string
	TerminalType     *string
	// ReasonCode is the denial or ambiguity reason code, or the error class
	// of a failed call.
	ReasonCode   *string
	ResultDigest *string // callable_completed only
	DurationUS   *int64  // every terminal except operation_denied
}

// Operation returns the projected operation; ok is false when no
// operation_started for it has been projected.
func (s *SQLite) Operation(ctx context.Context, operationID string) (op Operation, ok bool, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT operation_id, chain_id, run_id, attempt_id, tool_id, request_digest, status,
		started_record_id, terminal_record_id, terminal_type, reason_code, result_digest, duration_us
		FROM operations WHERE operation_id = ?`, operationID).Scan(
		&op.OperationID, &op.ChainID, &op.RunID, &op.AttemptID, &op.ToolID, &op.RequestDigest, &op.Status,
		&op.StartedRecordID, &op.TerminalRecordID, &op.TerminalType, &op.ReasonCode, &op.ResultDigest, &op.DurationUS)
	if err == sql.ErrNoRows {
		return Operation{}, false, nil
	}
	if err != nil {
		return Operation{}, false, err
	}
	return op, true, nil
}
