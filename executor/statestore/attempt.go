package statestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"polc.dev/polc/executor"
)

// CommitAttempt implements executor.StateStore. In one transaction it
// creates the run row if the run is new, inserts the attempt and outcome row
// and inserts every outbox message in order; either all of it is committed
// or none of it.
//
// Preconditions: RunID, AttemptID, Outcome and Profile are non-empty; every
// outbox message has a non-empty MessageID and Topic and a PayloadJSON that
// is JSON. Violations are *InputError. An AttemptID that is already
// committed, or a MessageID that is already committed (or repeated within
// the attempt), is *executor.StateConflictError and nothing is written.
func (s *SQLite) CommitAttempt(ctx context.Context, a executor.AttemptRecord) error {
	if err := validateAttempt(&a); err != nil {
		return err
	}
	what := "attempt " + a.AttemptID
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		// The run's created_at is the start of the attempt that created it:
		// a fact of the run, not of the commit's wall clock.
		if _, err := tx.StmtContext(ctx, s.insRun).ExecContext(ctx, a.RunID, formatTime(a.StartedAt)); err != nil {
			return err
		}
		if err := s.step("run"); err != nil {
			return err
		}
		_, err := tx.StmtContext(ctx, s.insAttempt).ExecContext(ctx,
			a.AttemptID, a.RunID, a.OwnerAttemptID, a.RequestID, a.OperationID, a.ActionID, a.RequestDigest,
			a.Outcome, a.ReasonCode, a.ResultDigest, a.CallExecuted, string(a.Profile),
			formatTime(a.StartedAt), formatTime(a.FinishedAt))
		if isUniqueViolation(err) {
			return &executor.StateConflictError{Key: "attempt " + a.AttemptID, Reason: "attempt already committed"}
		}
		if err != nil {
			return err
		}
		if err := s.step("attempt"); err != nil {
			return err
		}
		var ob *sql.Stmt
		if len(a.Outbox) > 0 {
			ob = tx.StmtContext(ctx, s.insOutbox)
		}
		for i, m := range a.Outbox {
			_, err := ob.ExecContext(ctx, m.MessageID, a.RunID, a.AttemptID, i, m.Topic, m.PayloadJSON)
			if isUniqueViolation(err) {
				return &executor.StateConflictError{Key: "outbox message " + m.MessageID, Reason: "message id already committed"}
			}
			if constraintCode(err) == sqlite3.SQLITE_CONSTRAINT_CHECK {
				// The only CHECK on outbox is json_valid, which refuses
				// JSON that json.Valid accepts when it nests deeper than
				// SQLite's limit.
				return &InputError{What: what, Reason: fmt.Sprintf("outbox[%d] (message %s): PayloadJSON is not JSON SQLite accepts (json_valid allows at most 1000 levels of nesting)", i, m.MessageID)}
			}
			if constraintCode(err) != 0 {
				return &InputError{What: "outbox message " + m.MessageID, Reason: err.Error()}
			}
			if err != nil {
				return err
			}
			if err := s.step("outbox[" + strconv.Itoa(i) + "]"); err != nil {
				return err
			}
		}
		return nil
	})
}

const (
	insertRun     = "INSERT INTO runs(run_id, created_at) VALUES (?, ?) ON CONFLICT(run_id) DO NOTHING"
	insertAttempt = `INSERT INTO attempts(
		attempt_id, run_id, owner_attempt_id, request_id, operation_id, action_id, request_digest,
		outcome, reason_code, result_digest, call_executed, profile, started_at, finished_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insertOutbox = `INSERT INTO outbox(message_id, run_id, attempt_id, position, topic, payload_json)
		VALUES (?, ?, ?, ?, ?, ?)`
)

// CheckAttempt checks CommitAttempt's preconditions, with *InputError:
// what every StateStore on this schema refuses before writing (package
// pgstore's too).
func CheckAttempt(a *executor.AttemptRecord) error { return validateAttempt(a) }

func validateAttempt(a *executor.AttemptRecord) error {
	what := "attempt " + a.AttemptID
	switch {
	case a.AttemptID == "":
		return &InputError{What: "attempt", Reason: "empty AttemptID"}
	case a.RunID == "":
		return &InputError{What: what, Reason: "empty RunID"}
	case a.Outcome == "":
		return &InputError{What: what, Reason: "empty Outcome"}
	case a.Profile == "":
		return &InputError{What: what, Reason: "empty Profile"}
	case !storableTime(a.StartedAt) || !storableTime(a.FinishedAt):
		return &InputError{What: what, Reason: fmt.Sprintf("StartedAt %v or FinishedAt %v is outside years 0-9999", a.StartedAt, a.FinishedAt)}
	}
	for i, m := range a.Outbox {
		switch {
		case m.MessageID == "":
			return &InputError{What: what, Reason: fmt.Sprintf("outbox[%d]: empty MessageID", i)}
		case m.Topic == "":
			return &InputError{What: what, Reason: fmt.Sprintf("outbox[%d]: empty Topic", i)}
		case !json.Valid([]byte(m.PayloadJSON)):
			return &InputError{What: what, Reason: fmt.Sprintf("outbox[%d]: PayloadJSON is not JSON", i)}
		}
	}
	return nil
}

// Attempt returns the committed attempt with its outbox messages in commit
// order; ok is false when no such attempt was committed. Times are returned
// in UTC.
func (s *SQLite) Attempt(ctx context.Context, attemptID string) (a executor.AttemptRecord, ok bool, err error) {
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		var profile, started, finished string
		err := tx.QueryRowContext(ctx, `SELECT run_id, attempt_id, owner_attempt_id, request_id, operation_id, action_id,
			request_digest, outcome, reason_code, result_digest, call_executed, profile, started_at, finished_at
			FROM attempts WHERE attempt_id = ?`, attemptID).Scan(
			&a.RunID, &a.AttemptID, &a.OwnerAttemptID, &a.RequestID, &a.OperationID, &a.ActionID,
			&a.RequestDigest, &a.Outcome, &a.ReasonCode, &a.ResultDigest, &a.CallExecuted, &profile, &started, &finished)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		a.Profile = executor.Profile(profile)
		if a.StartedAt, err = parseTime(started); err != nil {
			return err
		}
		if a.FinishedAt, err = parseTime(finished); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT message_id, topic, payload_json FROM outbox WHERE attempt_id = ? ORDER BY position", attemptID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m executor.OutboxMessage
			if err := rows.Scan(&m.MessageID, &m.Topic, &m.PayloadJSON); err != nil {
				return err
			}
			a.Outbox = append(a.Outbox, m)
		}
		ok = true
		return rows.Err()
	})
	if err != nil || !ok {
		return executor.AttemptRecord{}, false, err
	}
	return a, true, nil
}

// OutboxEntry is one committed outbox message with where it came from.
type OutboxEntry struct {
	// Seq is the message's position in the store's commit order; a relay
	// delivers in ascending Seq.
	Seq       int64
	RunID     string
	AttemptID string
	executor.OutboxMessage
}

// Outbox returns every committed outbox message of the run in commit order
// (empty for an unknown run).
func (s *SQLite) Outbox(ctx context.Context, runID string) ([]OutboxEntry, error) {
	var out []OutboxEntry
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT seq, run_id, attempt_id, message_id, topic, payload_json
			FROM outbox WHERE run_id = ? ORDER BY seq`, runID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e OutboxEntry
			if err := rows.Scan(&e.Seq, &e.RunID, &e.AttemptID, &e.MessageID, &e.Topic, &e.PayloadJSON); err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	return out, err
}

// Run is what the store knows about one run.
type Run struct {
	RunID string
	// CreatedAt is the StartedAt of the attempt whose commit created the
	// run row (UTC); zero when the run is known only from evidence.
	CreatedAt time.Time
	// Attempts are the committed attempt ids of the run in commit order.
	Attempts []string
	// Operations are the ids of projected operations whose
	// operation_started names this run, in operation id order.
	Operations []string
}

// Run returns the run's committed attempts and projected operations; ok is
// false when neither a committed attempt nor a projected operation names
// the run.
func (s *SQLite) Run(ctx context.Context, runID string) (r Run, ok bool, err error) {
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		var created string
		switch err := tx.QueryRowContext(ctx, "SELECT created_at FROM runs WHERE run_id = ?", runID).Scan(&created); {
		case err == sql.ErrNoRows:
		case err != nil:
			return err
		default:
			t, err := parseTime(created)
			if err != nil {
				return err
			}
			r.CreatedAt, ok = t, true
		}
		// rowid order is insertion order: rows are never deleted.
		if r.Attempts, err = queryStrings(ctx, tx, "SELECT attempt_id FROM attempts WHERE run_id = ? ORDER BY rowid", runID); err != nil {
			return err
		}
		if r.Operations, err = queryStrings(ctx, tx, "SELECT operation_id FROM operations WHERE run_id = ? ORDER BY operation_id", runID); err != nil {
			return err
		}
		ok = ok || len(r.Operations) > 0
		return nil
	})
	if err != nil || !ok {
		return Run{}, false, err
	}
	r.RunID = runID
	return r, true, nil
}

// queryStrings runs a query returning one text column.
func queryStrings(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Times are stored as RFC 3339 text in UTC with all nine fraction digits:
// fixed width, so that text order is time order (time.RFC3339Nano drops
// trailing zeros, and "…:05Z" sorted after "…:05.5Z"), readable in the
// sqlite3 shell, and lossless for Go times of years 0-9999 (the others
// have no RFC 3339 form and are refused by validateAttempt).
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// FormatTime is the stored form of an attempt's times (see timeLayout),
// which package pgstore shares.
func FormatTime(t time.Time) string { return formatTime(t) }

// ParseTime parses a time FormatTime stored.
func ParseTime(s string) (time.Time, error) { return parseTime(s) }

// storableTime reports whether t has an RFC 3339 form (a four-digit year).
func storableTime(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("statestore: stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}
