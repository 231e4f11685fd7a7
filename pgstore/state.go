package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
)

// State is the durable state on PostgreSQL: executor.StateStore,
// ProjectionStore, BudgetLedger and ApprovalLedger, with the semantics of
// statestore.SQLite (docs/statestore.md), the same checks and the same
// errors (*statestore.InputError, *executor.StateConflictError,
// *executor.ProjectionConflictError), for many processes at once: every
// change is one READ COMMITTED transaction, a budget account is changed
// under a lock on its row, and a conflict is decided by a unique key, so
// no two processes commit the same attempt, message, nonce or count.
type State struct {
	// BudgetLedger is the budget ledger on this database.
	statestore.BudgetLedger

	db   *db
	name string
}

var (
	_ executor.StateStore      = (*State)(nil)
	_ executor.ProjectionStore = (*State)(nil)
	_ executor.BudgetLedger    = (*State)(nil)
	_ executor.ApprovalLedger  = (*State)(nil)
)

// OpenState connects to the database dsn names and creates or migrates
// the schema. The caller must Close it.
func OpenState(ctx context.Context, dsn string) (*State, error) {
	o, err := connect(ctx, dsn, 0)
	if err != nil {
		return nil, err
	}
	s := &State{db: o.db, name: Redact(dsn)}
	s.BudgetLedger = statestore.NewBudgetLedger("pgstore", pgBudget{s})
	return s, nil
}

// Close closes the connections.
func (s *State) Close() error {
	s.db.pool.Close()
	return nil
}

// Name is the store's redacted DSN.
func (s *State) Name() string { return s.name }

// tx runs fn in a READ COMMITTED transaction and commits it when fn
// returns nil. The transaction commits durably or not at all, whatever the
// server's configuration became since the connection was made (see
// durableBegin).
func (s *State) tx(ctx context.Context, fn func(*qtx) error) error {
	return durabilityErr(s.db.txFunc(ctx, durableTx, fn))
}

// uniqueViolation reports whether err is a unique key violation on the
// constraint named constraint ("" for any).
func uniqueViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && (constraint == "" || pe.ConstraintName == constraint)
}

// CommitAttempt implements executor.StateStore as statestore.SQLite does:
// the run row (if new), the attempt and every outbox message, or nothing.
func (s *State) CommitAttempt(ctx context.Context, a executor.AttemptRecord) error {
	if err := statestore.CheckAttempt(&a); err != nil {
		return err
	}
	for i, m := range a.Outbox {
		// PostgreSQL text holds no NUL; the JSON escapes it, so only a
		// raw NUL byte is refused here.
		if slices.Contains([]byte(m.PayloadJSON), 0) || slices.Contains([]byte(m.Topic), 0) {
			return &statestore.InputError{What: "attempt " + a.AttemptID, Reason: fmt.Sprintf("outbox[%d]: a NUL byte", i)}
		}
	}
	return s.tx(ctx, func(tx *qtx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO polc_runs(run_id, created_at) VALUES ($1, $2) ON CONFLICT (run_id) DO NOTHING",
			a.RunID, statestore.FormatTime(a.StartedAt)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO polc_attempts(
			attempt_id, run_id, owner_attempt_id, request_id, operation_id, action_id, request_digest,
			outcome, reason_code, result_digest, call_executed, profile, started_at, finished_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			a.AttemptID, a.RunID, a.OwnerAttemptID, a.RequestID, a.OperationID, a.ActionID, a.RequestDigest,
			a.Outcome, a.ReasonCode, a.ResultDigest, a.CallExecuted, string(a.Profile),
			statestore.FormatTime(a.StartedAt), statestore.FormatTime(a.FinishedAt))
		if uniqueViolation(err, "") {
			return &executor.StateConflictError{Key: "attempt " + a.AttemptID, Reason: "attempt already committed"}
		}
		if err != nil {
			return err
		}
		for i, m := range a.Outbox {
			_, err := tx.Exec(ctx, `INSERT INTO polc_outbox(message_id, run_id, attempt_id, position, topic, payload_json)
				VALUES ($1, $2, $3, $4, $5, $6)`, m.MessageID, a.RunID, a.AttemptID, i, m.Topic, m.PayloadJSON)
			if uniqueViolation(err, "") {
				return &executor.StateConflictError{Key: "outbox message " + m.MessageID, Reason: "message id already committed"}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Attempt returns the committed attempt with its outbox messages in commit
// order; ok is false when no such attempt was committed.
func (s *State) Attempt(ctx context.Context, attemptID string) (a executor.AttemptRecord, ok bool, err error) {
	var profile, started, finished string
	err = s.db.QueryRow(ctx, `SELECT run_id, attempt_id, owner_attempt_id, request_id, operation_id, action_id,
		request_digest, outcome, reason_code, result_digest, call_executed, profile, started_at, finished_at
		FROM polc_attempts WHERE attempt_id = $1`, attemptID).Scan(
		&a.RunID, &a.AttemptID, &a.OwnerAttemptID, &a.RequestID, &a.OperationID, &a.ActionID,
		&a.RequestDigest, &a.Outcome, &a.ReasonCode, &a.ResultDigest, &a.CallExecuted, &profile, &started, &finished)
	if errors.Is(err, pgx.ErrNoRows) {
		return executor.AttemptRecord{}, false, nil
	}
	if err != nil {
		return executor.AttemptRecord{}, false, err
	}
	a.Profile = executor.Profile(profile)
	if a.StartedAt, err = statestore.ParseTime(started); err != nil {
		return executor.AttemptRecord{}, false, err
	}
	if a.FinishedAt, err = statestore.ParseTime(finished); err != nil {
		return executor.AttemptRecord{}, false, err
	}
	rows, err := s.db.Query(ctx, "SELECT message_id, topic, payload_json FROM polc_outbox WHERE attempt_id = $1 ORDER BY position", attemptID)
	if err != nil {
		return executor.AttemptRecord{}, false, err
	}
	a.Outbox, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (executor.OutboxMessage, error) {
		var m executor.OutboxMessage
		return m, r.Scan(&m.MessageID, &m.Topic, &m.PayloadJSON)
	})
	if err != nil {
		return executor.AttemptRecord{}, false, err
	}
	if len(a.Outbox) == 0 {
		a.Outbox = nil
	}
	return a, true, nil
}

// Outbox returns every committed outbox message of the run in commit order.
func (s *State) Outbox(ctx context.Context, runID string) ([]statestore.OutboxEntry, error) {
	rows, err := s.db.Query(ctx, `SELECT seq, run_id, attempt_id, message_id, topic, payload_json
		FROM polc_outbox WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (statestore.OutboxEntry, error) {
		var e statestore.OutboxEntry
		return e, r.Scan(&e.Seq, &e.RunID, &e.AttemptID, &e.MessageID, &e.Topic, &e.PayloadJSON)
	})
}

// Run returns the run's committed attempts (in commit order) and projected
// operations; ok is false when neither names the run.
func (s *State) Run(ctx context.Context, runID string) (r statestore.Run, ok bool, err error) {
	err = s.db.txFunc(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx *qtx) error {
		var created string
		switch err := tx.QueryRow(ctx, "SELECT created_at FROM polc_runs WHERE run_id = $1", runID).Scan(&created); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			t, err := statestore.ParseTime(created)
			if err != nil {
				return err
			}
			r.CreatedAt, ok = t, true
		}
		var err error
		if r.Attempts, err = queryStrings(ctx, tx, "SELECT attempt_id FROM polc_attempts WHERE run_id = $1 ORDER BY seq", runID); err != nil {
			return err
		}
		if r.Operations, err = queryStrings(ctx, tx, "SELECT operation_id FROM polc_operations WHERE run_id = $1 ORDER BY operation_id COLLATE \"C\"", runID); err != nil {
			return err
		}
		ok = ok || len(r.Operations) > 0
		return nil
	})
	if err != nil || !ok {
		return statestore.Run{}, false, err
	}
	r.RunID = runID
	return r, true, nil
}

func queryStrings(ctx context.Context, tx *qtx, query string, args ...any) ([]string, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// ApplyProjection implements executor.ProjectionStore as
// statestore.SQLite does: the records not yet applied under (chain_id,
// record_id, version), the operation state they derive and the
// projector's cursor, in one transaction, or nothing.
func (s *State) ApplyProjection(ctx context.Context, projector string, version int, records []executor.ProjectedRecord, next string) error {
	if err := statestore.CheckProjection(projector, version, records); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *qtx) error {
		// The projector's row is locked for the transaction: two
		// projectors of one name apply one after the other.
		var committed int
		switch err := tx.QueryRow(ctx, "SELECT version FROM polc_projection_cursors WHERE projector = $1 FOR UPDATE", projector).Scan(&committed); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			if err := statestore.CheckCursorVersion(projector, committed, version); err != nil {
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
				continue
			}
			tag, err := tx.Exec(ctx, `INSERT INTO polc_projected_records(
				chain_id, record_id, projection_version, sequence, record_type, operation_id, chain_hash)
				VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
				r.ChainID, r.RecordID, version, r.Sequence, r.RecordType, r.OperationID, r.ChainHash)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				// Applied meanwhile by another projector's transaction:
				// check it again against what that one stored.
				if _, err := projected(ctx, tx, r, version); err != nil {
					return err
				}
				continue
			}
			if err := applyOperation(ctx, tx, r); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO polc_projection_cursors(projector, cursor, version) VALUES ($1, $2, $3)
			ON CONFLICT (projector) DO UPDATE SET cursor = excluded.cursor, version = excluded.version`,
			projector, next, version)
		if uniqueViolation(err, "") {
			return &executor.StateConflictError{Key: "projector " + projector, Reason: "another projector of this name committed its first cursor at the same time"}
		}
		return err
	})
}

// projected reports whether r is already applied under version.
func projected(ctx context.Context, tx *qtx, r *executor.ProjectedRecord, version int) (bool, error) {
	rows, err := tx.Query(ctx, `SELECT projection_version, chain_hash FROM polc_projected_records
		WHERE chain_id = $1 AND record_id = $2`, r.ChainID, r.RecordID)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return statestore.ScanProjected(rows, r, version)
}

// applyOperation derives operation state from one newly applied record,
// as statestore.SQLite does; the operation's row is locked while it is
// read and changed.
func applyOperation(ctx context.Context, tx *qtx, r *executor.ProjectedRecord) error {
	c, ok, err := statestore.OperationChangeOf(r)
	if !ok || err != nil {
		return err
	}
	if c.Type == chain.OperationStarted {
		st := &c.Start
		tag, err := tx.Exec(ctx, `INSERT INTO polc_operations(operation_id, chain_id, run_id, attempt_id, tool_id, request_digest, status, started_record_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (operation_id) DO NOTHING`,
			c.OperationID, r.ChainID, st.RunID, st.AttemptID, st.ToolID, st.RequestDigest, statestore.StatusRunning, r.RecordID)
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		var startedBy string
		if err := tx.QueryRow(ctx, "SELECT started_record_id FROM polc_operations WHERE operation_id = $1", c.OperationID).Scan(&startedBy); err != nil {
			return err
		}
		return c.Restarted(startedBy)
	}
	var chainID string
	var terminalBy *string
	err = tx.QueryRow(ctx, "SELECT chain_id, terminal_record_id FROM polc_operations WHERE operation_id = $1 FOR UPDATE", c.OperationID).Scan(&chainID, &terminalBy)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if done, err := c.CheckEnd(found, chainID, terminalBy); done || err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE polc_operations SET status = $1, terminal_record_id = $2, terminal_type = $3,
		reason_code = $4, result_digest = $5, duration_us = $6 WHERE operation_id = $7 AND terminal_record_id IS NULL`,
		c.Status, r.RecordID, string(c.Type), c.ReasonCode, c.ResultDigest, c.DurationUS, c.OperationID)
	return err
}

// ProjectionCursor implements executor.ProjectionStore.
func (s *State) ProjectionCursor(ctx context.Context, projector string) (string, error) {
	var c string
	err := s.db.QueryRow(ctx, "SELECT cursor FROM polc_projection_cursors WHERE projector = $1", projector).Scan(&c)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return c, err
}

// Operation returns the projected operation; ok is false when no
// operation_started for it has been projected.
func (s *State) Operation(ctx context.Context, operationID string) (op statestore.Operation, ok bool, err error) {
	err = s.db.QueryRow(ctx, `SELECT operation_id, chain_id, run_id, attempt_id, tool_id, request_digest, status,
		started_record_id, terminal_record_id, terminal_type, reason_code, result_digest, duration_us
		FROM polc_operations WHERE operation_id = $1`, operationID).Scan(
		&op.OperationID, &op.ChainID, &op.RunID, &op.AttemptID, &op.ToolID, &op.RequestDigest, &op.Status,
		&op.StartedRecordID, &op.TerminalRecordID, &op.TerminalType, &op.ReasonCode, &op.ResultDigest, &op.DurationUS)
	if errors.Is(err, pgx.ErrNoRows) {
		return statestore.Operation{}, false, nil
	}
	if err != nil {
		return statestore.Operation{}, false, err
	}
	return op, true, nil
}

// UseApprovalNonce implements executor.ApprovalLedger: the nonce is
// recorded once, whichever process records it first; a second use is
// executor.ErrApprovalReplayed.
func (s *State) UseApprovalNonce(ctx context.Context, nonce, approvalID string, at time.Time) error {
	used := false
	err := s.tx(ctx, func(tx *qtx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO polc_approval_nonces(nonce, approval_id, used_at_us) VALUES ($1, $2, $3) ON CONFLICT (nonce) DO NOTHING",
			nonce, approvalID, at.UnixMicro())
		used = err == nil && tag.RowsAffected() == 0
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: recording approval nonce: %w", err)
	}
	if used {
		return executor.ErrApprovalReplayed
	}
	return nil
}

// The budget ledger: statestore.SQLite's rows (one per window recorded
// in, and the account's past as window 0) in polc_budget_usage, judged by
// statestore.BudgetLedger. Each change locks the key's row in
// polc_budget_accounts first, so reservations of many processes on one
// key each see a count of their own.

// pgBudget is the database as statestore.BudgetLedger's BudgetStore.
type pgBudget struct{ s *State }

// WriteBudget implements statestore.BudgetStore: f runs under the lock of
// the key's account row.
func (b pgBudget) WriteBudget(ctx context.Context, key executor.BudgetKey, f func(statestore.BudgetRows) error) error {
	return b.s.tx(ctx, func(tx *qtx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO polc_budget_accounts(tenant, principal, policy_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			key.Tenant, key.Principal, key.PolicyID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM polc_budget_accounts WHERE tenant = $1 AND principal = $2 AND policy_id = $3 FOR UPDATE`,
			key.Tenant, key.Principal, key.PolicyID); err != nil {
			return err
		}
		return f(pgBudgetRows{tx})
	})
}

// ReadBudget implements statestore.BudgetStore: one statement reads an
// account, so it needs no transaction.
func (b pgBudget) ReadBudget(ctx context.Context, f func(statestore.BudgetRows) error) error {
	return f(pgBudgetRows{b.s.db})
}

// pgBudgetRows is polc_budget_usage through q: a transaction, or the pool
// for a read.
type pgBudgetRows struct {
	q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}
}

// LoadBudget implements statestore.BudgetRows.
func (r pgBudgetRows) LoadBudget(ctx context.Context, key executor.BudgetKey, only *executor.BudgetReservation) (*executor.BudgetAccount, error) {
	query := `SELECT window_us, window_start_us, end_us, calls, tokens, cost_microunits, wall_microseconds FROM polc_budget_usage
		WHERE tenant = $1 AND principal = $2 AND policy_id = $3`
	args := []any{key.Tenant, key.Principal, key.PolicyID}
	if only != nil {
		query += ` AND (window_us = 0 OR (window_us = $4 AND window_start_us = $5))`
		args = append(args, only.WindowMicroseconds, only.WindowStart)
	}
	rows, err := r.q.Query(ctx, query+` ORDER BY window_us, window_start_us`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return statestore.ScanBudgetAccount(rows)
}

// PutBudget implements statestore.BudgetRows.
func (r pgBudgetRows) PutBudget(ctx context.Context, key executor.BudgetKey, b executor.BudgetBucket, end *int64) error {
	_, err := r.q.Exec(ctx, `INSERT INTO polc_budget_usage(tenant, principal, policy_id, window_us, window_start_us, end_us, calls, tokens, cost_microunits, wall_microseconds)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (tenant, principal, policy_id, window_us, window_start_us) DO UPDATE SET end_us = excluded.end_us,
			calls = excluded.calls, tokens = excluded.tokens, cost_microunits = excluded.cost_microunits, wall_microseconds = excluded.wall_microseconds`,
		key.Tenant, key.Principal, key.PolicyID, b.Window, b.Start, end, b.Usage.Calls, b.Usage.Tokens, b.Usage.CostMicrounits, b.Usage.WallMicroseconds)
	return err
}

// DeleteBudget implements statestore.BudgetRows.
func (r pgBudgetRows) DeleteBudget(ctx context.Context, key executor.BudgetKey, window, start int64) error {
	_, err := r.q.Exec(ctx, `DELETE FROM polc_budget_usage WHERE tenant = $1 AND principal = $2 AND policy_id = $3 AND window_us = $4 AND window_start_us = $5`,
		key.Tenant, key.Principal, key.PolicyID, window, start)
	return err
}
