// Package statestore holds polc's embedded durable state: a SQLite database
// that implements executor.StateStore (runs, attempts, outcomes and outbox
// messages, committed together), executor.ProjectionStore (evidence
// records projected by an executor.EvidenceProjector, with the projector's
// cursor, and the operation state derived from them) and
// executor.BudgetLedger (the usage policies' budgets are judged on).
//
// The schema, its keys and what is atomic or idempotent are documented in
// docs/statestore.md. The driver is modernc.org/sqlite (pure Go, no cgo).
package statestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"polc.dev/polc/executor"
)

// SchemaVersion is the schema version this package creates and reads. A
// database with a newer version is refused rather than misread; one of an
// older version is migrated at open.
const SchemaVersion = 4

// busyTimeoutMS bounds how long a statement waits for a lock held by another
// process (inside this process the writer pool already serializes writes).
const busyTimeoutMS = 10000

// readConns is the size of the reader pool. WAL lets readers run beside the
// one writer; a few are enough for polc's read paths.
const readConns = 4

// SQLite is a StateStore and ProjectionStore backed by one SQLite database
// file. It is safe for concurrent use by many goroutines: writes queue on a
// single connection (SQLite admits one writer at a time, and queuing in Go
// is fairer than spinning on SQLITE_BUSY) while reads use a separate pool.
type SQLite struct {
	// BudgetLedger is the budget ledger on this file (budget.go).
	BudgetLedger

	path string
	w    *sql.DB // exactly one connection; every write transaction is BEGIN IMMEDIATE
	r    *sql.DB // read-only connections

	// Statements of the hot write path, prepared once on the writer
	// (compiling them on every commit was a fifth of its CPU time).
	insRun, insAttempt, insOutbox *sql.Stmt

	closeOnce sync.Once
	closeErr  error

	// hook, when set (tests only), is called after each named step inside
	// the transactions of CommitAttempt and ApplyProjection; an error from
	// it aborts the transaction as any failing statement would.
	hook func(step string) error
}

var (
	_ executor.StateStore      = (*SQLite)(nil)
	_ executor.ProjectionStore = (*SQLite)(nil)
	_ executor.BudgetLedger    = (*SQLite)(nil)
)

// OpenSQLite opens the state store at path, creating the file and the schema
// if needed. path must name a file (":memory:" and URIs are refused: the
// store uses two connection pools, which must see the same database) and
// must not contain '?'. A database whose schema_version is newer than
// SchemaVersion, or that has tables but no schema_version, is refused with
// *SchemaVersionError. The caller must Close the store.
func OpenSQLite(path string) (*SQLite, error) {
	if path == "" || strings.HasPrefix(path, ":") || strings.HasPrefix(path, "file:") || strings.ContainsRune(path, '?') {
		return nil, &InputError{What: "path", Reason: fmt.Sprintf("%q is not a plain file path", path)}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// Connection settings every connection gets through the DSN, so that a
	// connection database/sql opens later is configured like the first.
	// synchronous=FULL: in WAL mode NORMAL may lose the last commits on power
	// loss, and the durable profile promises that a returned commit stays.
	// journal_mode is not among them: it is persistent in the file and is
	// set by migrate once the file is known to be a state store, so that a
	// refused database is left as it was.
	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busyTimeoutMS)
	w, err := sql.Open("sqlite", abs+"?"+common+"&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &SQLite{path: abs, w: w}
	s.BudgetLedger = NewBudgetLedger("statestore", sqliteBudget{s})
	if err := s.migrate(context.Background()); err != nil {
		w.Close()
		return nil, err
	}
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{{&s.insRun, insertRun}, {&s.insAttempt, insertAttempt}, {&s.insOutbox, insertOutbox}} {
		if *p.dst, err = w.Prepare(p.query); err != nil {
			w.Close() // closes the statements prepared so far
			return nil, err
		}
	}
	r, err := sql.Open("sqlite", abs+"?"+common+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s.r = r
	return s, nil
}

// Close closes both connection pools. It is safe to call more than once; the
// store must not be used afterwards.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for _, st := range []*sql.Stmt{s.insRun, s.insAttempt, s.insOutbox} {
			if st != nil {
				errs = append(errs, st.Close())
			}
		}
		if s.r != nil {
			errs = append(errs, s.r.Close())
		}
		errs = append(errs, s.w.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Path returns the absolute path of the database file.
func (s *SQLite) Path() string { return s.path }

// schemaV1 is the whole schema of version 1. STRICT tables make SQLite
// enforce the declared column types instead of coercing values.
const schemaV1 = `
CREATE TABLE schema_version (
	version INTEGER NOT NULL
) STRICT;

CREATE TABLE runs (
	run_id     TEXT PRIMARY KEY,
	created_at TEXT NOT NULL
) STRICT;

CREATE TABLE attempts (
	attempt_id       TEXT PRIMARY KEY,
	run_id           TEXT NOT NULL REFERENCES runs(run_id),
	owner_attempt_id TEXT,
	request_id       TEXT NOT NULL,
	operation_id     TEXT,
	action_id        TEXT NOT NULL,
	request_digest   TEXT NOT NULL,
	outcome          TEXT NOT NULL,
	reason_code      TEXT NOT NULL,
	result_digest    TEXT,
	call_executed    INTEGER NOT NULL CHECK (call_executed IN (0, 1)),
	profile          TEXT NOT NULL,
	started_at       TEXT NOT NULL,
	finished_at      TEXT NOT NULL
) STRICT;
CREATE INDEX attempts_by_run ON attempts(run_id);

CREATE TABLE outbox (
	seq          INTEGER PRIMARY KEY AUTOINCREMENT,
	message_id   TEXT NOT NULL UNIQUE,
	run_id       TEXT NOT NULL REFERENCES runs(run_id),
	attempt_id   TEXT NOT NULL REFERENCES attempts(attempt_id),
	position     INTEGER NOT NULL,
	topic        TEXT NOT NULL,
	payload_json TEXT NOT NULL CHECK (json_valid(payload_json)),
	UNIQUE (attempt_id, position)
) STRICT;
CREATE INDEX outbox_by_run ON outbox(run_id, seq);

CREATE TABLE projected_records (
	chain_id           TEXT NOT NULL,
	record_id          TEXT NOT NULL,
	projection_version INTEGER NOT NULL,
	sequence           INTEGER NOT NULL,
	record_type        TEXT NOT NULL,
	operation_id       TEXT,
	chain_hash         TEXT NOT NULL,
	PRIMARY KEY (chain_id, record_id, projection_version)
) STRICT, WITHOUT ROWID;

CREATE TABLE operations (
	operation_id       TEXT PRIMARY KEY,
	chain_id           TEXT NOT NULL,
	run_id             TEXT,
	attempt_id         TEXT NOT NULL,
	tool_id            TEXT NOT NULL,
	request_digest     TEXT NOT NULL,
	status             TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'denied', 'escalated', 'failed', 'cancelled', 'timed_out', 'ambiguous')),
	started_record_id  TEXT NOT NULL,
	terminal_record_id TEXT,
	terminal_type      TEXT,
	reason_code        TEXT,
	result_digest      TEXT,
	duration_us        INTEGER,
	CHECK ((status = 'running') = (terminal_record_id IS NULL))
) STRICT;
CREATE INDEX operations_by_run ON operations(run_id);

CREATE TABLE projection_cursors (
	projector TEXT PRIMARY KEY,
	cursor    TEXT NOT NULL,
	version   INTEGER NOT NULL
) STRICT;
`

// schemaV2 is what version 2 adds to version 1: the budget ledger. Like
// schemaV1 it is frozen.
const schemaV2 = `
CREATE TABLE budget_usage (
	tenant            TEXT NOT NULL,
	principal         TEXT NOT NULL,
	policy_id         TEXT NOT NULL,
	window_us         INTEGER NOT NULL CHECK (window_us >= 0),
	window_start_us   INTEGER NOT NULL,
	calls             INTEGER NOT NULL CHECK (calls >= 0),
	tokens            INTEGER NOT NULL CHECK (tokens >= 0),
	cost_microunits   INTEGER NOT NULL CHECK (cost_microunits >= 0),
	wall_microseconds INTEGER NOT NULL CHECK (wall_microseconds >= 0),
	PRIMARY KEY (tenant, principal, policy_id, window_us)
) STRICT, WITHOUT ROWID;
`

// schemaV3 is what version 3 changes in version 2: the budget ledger keeps
// an account per key (tenant, principal, policy id) rather than per key
// and window length, with a row per window recorded in (its length and
// start), and the lifetime row (window_us 0) is the account's past, with
// the end of the time its usage was recorded in (end_us; NULL when not
// known, as for every row migrated from version 2's lifetime rows). A
// version 2 row becomes the same window's row. Like schemaV1 it is frozen.
const schemaV3 = `
CREATE TABLE budget_usage_v3 (
	tenant            TEXT NOT NULL,
	principal         TEXT NOT NULL,
	policy_id         TEXT NOT NULL,
	window_us         INTEGER NOT NULL CHECK (window_us >= 0),
	window_start_us   INTEGER NOT NULL CHECK (window_us > 0 OR window_start_us = 0),
	end_us            INTEGER CHECK (end_us IS NULL OR window_us = 0),
	calls             INTEGER NOT NULL CHECK (calls >= 0),
	tokens            INTEGER NOT NULL CHECK (tokens >= 0),
	cost_microunits   INTEGER NOT NULL CHECK (cost_microunits >= 0),
	wall_microseconds INTEGER NOT NULL CHECK (wall_microseconds >= 0),
	PRIMARY KEY (tenant, principal, policy_id, window_us, window_start_us)
) STRICT, WITHOUT ROWID;
INSERT INTO budget_usage_v3(tenant, principal, policy_id, window_us, window_start_us, end_us, calls, tokens, cost_microunits, wall_microseconds)
	SELECT tenant, principal, policy_id, window_us, CASE WHEN window_us = 0 THEN 0 ELSE window_start_us END, NULL,
		calls, tokens, cost_microunits, wall_microseconds FROM budget_usage;
DROP TABLE budget_usage;
ALTER TABLE budget_usage_v3 RENAME TO budget_usage;
`

// schemaV4 is what version 4 adds: the nonces of the approvals the
// executor accepted (docs/approvals.md), so that an approval stays spent
// across restarts. Like schemaV1 it is frozen.
const schemaV4 = `
CREATE TABLE approval_nonces (
	nonce       TEXT NOT NULL PRIMARY KEY CHECK (length(nonce) = 64),
	approval_id TEXT NOT NULL,
	used_at_us  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
`

// schemas are the statements each version adds to the one before it
// (schemas[v-1] creates what version v adds, or changes).
var schemas = []string{schemaV1, schemaV2, schemaV3, schemaV4}

// migrate creates the schema in an empty database, migrates one of an
// older version and checks the version of an existing one. It first checks
// without writing, so that a database it refuses is left untouched
// (switching to WAL rewrites the file header), then switches the file to
// WAL and creates or completes the schema, inside one write transaction so
// that two processes opening the file at once cannot both do it.
func (s *SQLite) migrate(ctx context.Context) error {
	wrap := func(err error) error {
		var ve *SchemaVersionError
		if err == nil || errors.As(err, &ve) {
			return err
		}
		return fmt.Errorf("statestore: open %s: %w", s.path, err)
	}
	if err := s.writeTx(ctx, func(tx *sql.Tx) error {
		_, _, err := s.checkSchema(ctx, tx)
		return err
	}); err != nil {
		return wrap(err)
	}
	// Switching a new file to WAL takes an exclusive lock. A connection that
	// must upgrade its own lock for it gets SQLITE_BUSY at once rather than
	// waiting (SQLite skips the busy handler where waiting could deadlock),
	// so a second process opening the same new file retries for as long as
	// any other lock is waited for.
	var mode string
	for deadline := time.Now().Add(busyTimeoutMS * time.Millisecond); ; {
		err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		if err == nil {
			break
		}
		var coded interface{ Code() int }
		if !errors.As(err, &coded) || coded.Code()&0xff != 5 || !time.Now().Before(deadline) { // 5: SQLITE_BUSY
			return fmt.Errorf("statestore: open %s: set journal_mode: %w", s.path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("statestore: open %s: set journal_mode: %w", s.path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !strings.EqualFold(mode, "wal") {
		// Readers beside the writer and the durability argument in
		// docs/statestore.md both assume WAL.
		return fmt.Errorf("statestore: %s: journal_mode is %q, want wal", s.path, mode)
	}
	return wrap(s.writeTx(ctx, func(tx *sql.Tx) error {
		empty, version, err := s.checkSchema(ctx, tx)
		if err != nil || version == SchemaVersion {
			return err
		}
		// An empty database is version 0: every version's statements.
		for _, stmt := range schemas[version:] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		if empty {
			_, err = tx.ExecContext(ctx, "INSERT INTO schema_version(version) VALUES (?)", SchemaVersion)
		} else {
			_, err = tx.ExecContext(ctx, "UPDATE schema_version SET version = ?", SchemaVersion)
		}
		return err
	}))
}

// checkSchema reports whether the database is empty and, if not, its
// schema version, and refuses one that is not a state store of a version
// up to SchemaVersion, with that version's tables and indexes, with
// *SchemaVersionError. It only reads.
func (s *SQLite) checkSchema(ctx context.Context, tx *sql.Tx) (empty bool, version int, err error) {
	var tables int
	var hasVersion bool
	rows, err := tx.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
	if err != nil {
		return false, 0, err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return false, 0, err
		}
		tables++
		hasVersion = hasVersion || name == "schema_version"
	}
	if err := rows.Close(); err != nil {
		return false, 0, err
	}
	if tables == 0 {
		return true, 0, nil
	}
	if !hasVersion {
		return false, 0, &SchemaVersionError{Path: s.path, Found: 0, Supported: SchemaVersion}
	}
	var versions []int
	vrows, err := tx.QueryContext(ctx, "SELECT version FROM schema_version")
	if err != nil {
		return false, 0, err
	}
	for vrows.Next() {
		var v int
		if err := vrows.Scan(&v); err != nil {
			vrows.Close()
			return false, 0, err
		}
		versions = append(versions, v)
	}
	if err := vrows.Close(); err != nil {
		return false, 0, err
	}
	if len(versions) != 1 || versions[0] < 1 {
		return false, 0, &SchemaVersionError{Path: s.path, Found: 0, Supported: SchemaVersion}
	}
	version = versions[0]
	if version > SchemaVersion {
		return false, 0, &SchemaVersionError{Path: s.path, Found: version, Supported: SchemaVersion}
	}
	// The version row alone does not make the schema: a table or index
	// dropped or altered would open and then fail (or, for operations,
	// silently derive nothing). Objects the schema lacks are allowed. An
	// older version is checked against its own schema before it is
	// migrated.
	want, err := schemaObjects(version)
	if err != nil {
		return false, 0, err
	}
	have, err := readObjects(ctx, tx)
	if err != nil {
		return false, 0, err
	}
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		switch got, ok := have[k]; {
		case !ok:
			problems = append(problems, "no "+k)
		case got != want[k]:
			problems = append(problems, k+" differs")
		}
	}
	if len(problems) > 0 {
		return false, 0, &SchemaVersionError{Path: s.path, Found: version, Supported: SchemaVersion, Problem: strings.Join(problems, ", ")}
	}
	return false, version, nil
}

// schemaObjects returns the tables and indexes of schema version v (see
// readObjects), read once per version from an in-memory database given
// that version's statements. Those are frozen: any change to them is a new
// schema version.
func schemaObjects(v int) (map[string]string, error) { return schemaObjectsOf[v-1]() }

var schemaObjectsOf = func() (f []func() (map[string]string, error)) {
	for v := range schemas {
		f = append(f, sync.OnceValues(func() (map[string]string, error) {
			db, err := sql.Open("sqlite", ":memory:")
			if err != nil {
				return nil, err
			}
			defer db.Close()
			db.SetMaxOpenConns(1) // one in-memory database
			ctx := context.Background()
			for _, stmt := range schemas[:v+1] {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					return nil, err
				}
			}
			return readObjects(ctx, db)
		}))
	}
	return f
}()

// readObjects returns the database's own tables and indexes, keyed
// "table name" or "index name", with their CREATE statement (whitespace
// collapsed).
func readObjects(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT type, name, sql FROM sqlite_schema WHERE type IN ('table', 'index') AND sql IS NOT NULL AND name NOT LIKE 'sqlite_%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]string)
	for rows.Next() {
		var typ, name, text string
		if err := rows.Scan(&typ, &name, &text); err != nil {
			return nil, err
		}
		out[typ+" "+name] = strings.Join(strings.Fields(text), " ")
	}
	return out, rows.Err()
}

// writeTx runs fn in a write transaction (BEGIN IMMEDIATE, so the write lock
// is taken up front and a commit never fails on a lock upgrade) and commits
// it when fn returns nil.
func (s *SQLite) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// readTx runs fn in a read-only transaction, which sees one consistent
// snapshot of the database.
func (s *SQLite) readTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}

// step calls the test hook, if any.
func (s *SQLite) step(name string) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(name)
}

// constraintCode returns the extended SQLite result code of a constraint
// violation, or 0 when err is not one.
func constraintCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return se.Code()
	}
	return 0
}

// isUniqueViolation reports whether err is a PRIMARY KEY or UNIQUE violation.
func isUniqueViolation(err error) bool {
	c := constraintCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}
