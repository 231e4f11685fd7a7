package statestore

import (
	"context"
	"database/sql"
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
// Preconditions (CheckProjection): projector is non-empty, version >= 1,
// and every record has non-empty ChainID, RecordID and ChainHash and a
// valid chain record type.
// Operation rows are keyed by operation id alone, not by version: replaying
// the same evidence under a new version finds them already in place.
func (s *SQLite) ApplyProjection(ctx context.Context, projector string, version int, records []executor.ProjectedRecord, next string) error {
	if err := CheckProjection(projector, version, records); err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var committed int
		switch err := tx.QueryRowContext(ctx, "SELECT version FROM projection_cursors WHERE projector = ?", projector).Scan(&committed); {
		case err == sql.ErrNoRows:
		case err != nil:
			return err
		default:
			if err := CheckCursorVersion(projector, committed, version); err != nil {
				return err
			}
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

// projected reports whether r is already applied under version.
func projected(ctx context.Context, tx *sql.Tx, r *executor.ProjectedRecord, version int) (bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT projection_version, chain_hash FROM projected_records
		WHERE chain_id = ? AND record_id = ?`, r.ChainID, r.RecordID)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return ScanProjected(rows, r, version)
}

// applyOperation derives operation state from one newly applied record.
func applyOperation(ctx context.Context, tx *sql.Tx, r *executor.ProjectedRecord) error {
	c, ok, err := OperationChangeOf(r)
	if !ok || err != nil {
		return err
	}
	var chainID, startedBy string
	var terminalBy *string
	err = tx.QueryRowContext(ctx, "SELECT chain_id, started_record_id, terminal_record_id FROM operations WHERE operation_id = ?", c.OperationID).
		Scan(&chainID, &startedBy, &terminalBy)
	found := err == nil
	if err != nil && err != sql.ErrNoRows {
		return err
	}
	if c.Type == chain.OperationStarted {
		if found {
			return c.Restarted(startedBy)
		}
		st := &c.Start
		_, err := tx.ExecContext(ctx, `INSERT INTO operations(operation_id, chain_id, run_id, attempt_id, tool_id, request_digest, status, started_record_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, c.OperationID, r.ChainID, st.RunID, st.AttemptID, st.ToolID, st.RequestDigest, StatusRunning, r.RecordID)
		return err
	}
	if done, err := c.CheckEnd(found, chainID, terminalBy); done || err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE operations SET status = ?, terminal_record_id = ?, terminal_type = ?,
		reason_code = ?, result_digest = ?, duration_us = ? WHERE operation_id = ? AND terminal_record_id IS NULL`,
		c.Status, r.RecordID, string(c.Type), c.ReasonCode, c.ResultDigest, c.DurationUS, c.OperationID)
	return err
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
