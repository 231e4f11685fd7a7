// Package pgstore keeps polc's evidence chains (a chain.Store) and its
// durable state (executor.StateStore, ProjectionStore, BudgetLedger and
// ApprovalLedger) in PostgreSQL, so that many executors in many processes
// and hosts can write to one store that auditors export from
// (docs/scale.md "PostgreSQL stores").
//
// Both stores are selected by a DSN (postgres://… or postgresql://…, the
// libpq URL form; parameters the driver does not know, such as search_path
// or statement_timeout, are session settings). They share one versioned
// schema, created or migrated when either opens, in the first schema of the
// connection's search_path that exists, whose name qualifies every table
// a store names afterwards: a database newer than this package is refused
// (*SchemaVersionError), and so is a search_path that reaches polc's tables
// in another schema.
//
// The driver is github.com/jackc/pgx/v5. This package is never imported by
// certverify: verifying a chain needs only its exported JSONL.
package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the version of the schema this package creates and
// reads. A database of a newer version is refused; one of an older version
// is migrated when a store opens.
const SchemaVersion = 1

// IsDSN reports whether s names a PostgreSQL database rather than a file
// or directory: the flags --evidence and --state take either.
func IsDSN(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Redact returns dsn for messages, with every secret it carries replaced
// by "xxxxx": the userinfo's password and the value of every query
// parameter whose name (percent-decoded, as the driver decodes it) is a
// secret the driver takes (password, sslpassword) or contains "password".
// It reads the DSN as the driver does, not as net/url does: the userinfo
// ends at the first '@' before any '/', and parameters are separated by
// '&' only, so a value holding ';' or '#' is redacted whole. A string
// with an '@' outside the userinfo (what precedes it may be a password
// holding a '/'), or one the driver would refuse to parse (a pair with no
// or two '=', a bad percent escape), prints none of itself, and neither
// does a keyword/value connection string ("host=… password=…"), which
// IsDSN does not accept.
func Redact(dsn string) string {
	rest, ok := strings.CutPrefix(dsn, "postgresql://")
	scheme := "postgresql://"
	if !ok {
		rest, ok = strings.CutPrefix(dsn, "postgres://")
		scheme = "postgres://"
	}
	if !ok {
		if strings.ContainsAny(dsn, "= \t\n'") {
			return "(a connection string that is not a postgres:// URL, not shown)"
		}
		return dsn
	}
	const unparsable = "postgres://(unparsable DSN)"
	var b strings.Builder
	b.WriteString(scheme)
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, _, hasPassword := strings.Cut(rest[:i], ":")
		if strings.ContainsAny(user, "?&=;#") {
			// Not a user name a person writes: perhaps a query the
			// '@' of a password cut short.
			user = "xxxxx"
		}
		b.WriteString(user)
		if hasPassword {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
		rest = rest[i+1:]
	}
	if strings.Contains(rest, "@") {
		// An '@' the driver's rule left out of the userinfo (it follows
		// a '/', as in a password holding an unescaped '/'): what
		// precedes it may be a password, so none of the DSN is shown
		// (the driver refuses most such DSNs; an '@' in a parameter's
		// value is shown as unparsable too, on the safe side).
		return unparsable
	}
	base, query, hasQuery := strings.Cut(rest, "?")
	b.WriteString(base)
	if !hasQuery {
		return b.String()
	}
	b.WriteByte('?')
	for i, pair := range strings.Split(query, "&") {
		key, _, found := strings.Cut(pair, "=")
		name, err := url.PathUnescape(key)
		if !found || strings.Count(pair, "=") != 1 || err != nil {
			return unparsable
		}
		if i > 0 {
			b.WriteByte('&')
		}
		if secretParam(name) {
			b.WriteString(key + "=xxxxx")
		} else {
			b.WriteString(pair)
		}
	}
	return b.String()
}

// secretParam reports whether a DSN parameter's value is a secret: the
// ones the driver takes (password, sslpassword), and any other whose
// name says it is one (a server setting the DSN passes through).
func secretParam(name string) bool {
	name = strings.ToLower(strings.TrimSpace(name))
	return name == "password" || name == "sslpassword" || strings.Contains(name, "password") || strings.Contains(name, "secret")
}

// SchemaVersionError refuses a database this package cannot use safely:
// one whose polc schema is newer than SchemaVersion (written by a newer
// polc), whose version table is damaged, or whose tables the search_path
// makes ambiguous.
type SchemaVersionError struct {
	DSN       string // redacted
	Found     int
	Supported int
	Problem   string
}

func (e *SchemaVersionError) Error() string {
	if e.Problem != "" {
		return fmt.Sprintf("pgstore: %s: %s", e.DSN, e.Problem)
	}
	return fmt.Sprintf("pgstore: %s has polc schema version %d; this polc supports up to %d (upgrade polc, never downgrade a database)", e.DSN, e.Found, e.Supported)
}

// DurabilityError refuses a server or session whose settings would let a
// commit return before its records are on disk: the stores acknowledge an
// append or an attempt only after its commit, and that promise needs
// fsync on and synchronous_commit not off.
type DurabilityError struct {
	Setting, Value string
}

func (e *DurabilityError) Error() string {
	return fmt.Sprintf("pgstore: the server's %s is %q: a commit could return before it is durable; polc refuses to acknowledge evidence or state on it", e.Setting, e.Value)
}

// migrations are the statements each schema version adds to the one before
// it (migrations[v-1] takes a database from version v-1 to v). They are
// frozen once released: a change is a new version.
var migrations = []string{
	// Version 1: evidence records and the durable state.
	`
CREATE TABLE polc_records (
	chain_id    uuid     NOT NULL,
	sequence    bigint   NOT NULL CHECK (sequence >= 0),
	record_id   uuid     NOT NULL,
	chain_hash  bytea    NOT NULL CHECK (length(chain_hash) = 32),
	record_type text     NOT NULL,
	line        bytea    NOT NULL,
	pos         bigint   GENERATED ALWAYS AS IDENTITY UNIQUE,
	PRIMARY KEY (chain_id, sequence),
	UNIQUE (chain_id, record_id)
);

CREATE TABLE polc_runs (
	run_id     text PRIMARY KEY,
	created_at text NOT NULL
);

CREATE TABLE polc_attempts (
	attempt_id       text PRIMARY KEY,
	seq              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
	run_id           text NOT NULL REFERENCES polc_runs(run_id),
	owner_attempt_id text,
	request_id       text NOT NULL,
	operation_id     text,
	action_id        text NOT NULL,
	request_digest   text NOT NULL,
	outcome          text NOT NULL,
	reason_code      text NOT NULL,
	result_digest    text,
	call_executed    boolean NOT NULL,
	profile          text NOT NULL,
	started_at       text NOT NULL,
	finished_at      text NOT NULL
);
CREATE INDEX polc_attempts_by_run ON polc_attempts (run_id, seq);

CREATE TABLE polc_outbox (
	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id   text NOT NULL UNIQUE,
	run_id       text NOT NULL REFERENCES polc_runs(run_id),
	attempt_id   text NOT NULL REFERENCES polc_attempts(attempt_id),
	position     integer NOT NULL,
	topic        text NOT NULL,
	payload_json text NOT NULL,
	UNIQUE (attempt_id, position)
);
CREATE INDEX polc_outbox_by_run ON polc_outbox (run_id, seq);

CREATE TABLE polc_projected_records (
	chain_id           text NOT NULL,
	record_id          text NOT NULL,
	projection_version integer NOT NULL,
	sequence           bigint NOT NULL,
	record_type        text NOT NULL,
	operation_id       text,
	chain_hash         text NOT NULL,
	PRIMARY KEY (chain_id, record_id, projection_version)
);

CREATE TABLE polc_operations (
	operation_id       text PRIMARY KEY,
	chain_id           text NOT NULL,
	run_id             text,
	attempt_id         text NOT NULL,
	tool_id            text NOT NULL,
	request_digest     text NOT NULL,
	status             text NOT NULL CHECK (status IN ('running', 'succeeded', 'denied', 'escalated', 'failed', 'cancelled', 'timed_out', 'ambiguous')),
	started_record_id  text NOT NULL,
	terminal_record_id text,
	terminal_type      text,
	reason_code        text,
	result_digest      text,
	duration_us        bigint,
	CHECK ((status = 'running') = (terminal_record_id IS NULL))
);
CREATE INDEX polc_operations_by_run ON polc_operations (run_id);

CREATE TABLE polc_projection_cursors (
	projector text PRIMARY KEY,
	cursor    text NOT NULL,
	version   integer NOT NULL
);

CREATE TABLE polc_budget_accounts (
	tenant    text NOT NULL,
	principal text NOT NULL,
	policy_id text NOT NULL,
	PRIMARY KEY (tenant, principal, policy_id)
);

CREATE TABLE polc_budget_usage (
	tenant            text NOT NULL,
	principal         text NOT NULL,
	policy_id         text NOT NULL,
	window_us         bigint NOT NULL CHECK (window_us >= 0),
	window_start_us   bigint NOT NULL CHECK (window_us > 0 OR window_start_us = 0),
	end_us            bigint CHECK (end_us IS NULL OR window_us = 0),
	calls             bigint NOT NULL CHECK (calls >= 0),
	tokens            bigint NOT NULL CHECK (tokens >= 0),
	cost_microunits   bigint NOT NULL CHECK (cost_microunits >= 0),
	wall_microseconds bigint NOT NULL CHECK (wall_microseconds >= 0),
	PRIMARY KEY (tenant, principal, policy_id, window_us, window_start_us)
);

CREATE TABLE polc_approval_nonces (
	nonce       text NOT NULL PRIMARY KEY CHECK (length(nonce) = 64),
	approval_id text NOT NULL,
	used_at_us  bigint NOT NULL
);
`,
}

// Advisory locks take two keys: one of these, and the hash of the schema's
// name (so that stores in different schemas of one database do not
// contend).
const (
	// migrationLock serializes migrations: two processes opening an
	// empty database at once must not both create the tables.
	migrationLock = 0x706f6c63 // "polc"
	// appendLock is held shared by every group commit of records, from
	// its first insert to its commit, and exclusively by Scan for an
	// instant: while Scan holds it no insert is in flight, so every
	// record position below the largest committed one is settled (see
	// Evidence.Scan).
	appendLock = 0x706f6c64
)

// durableBegin begins every transaction that writes what a store
// acknowledges, in the one round trip of its BEGIN (pgx sends a BEGIN
// query of its own with the simple protocol, several statements at once).
// The server's fsync and synchronous_commit are reloadable: a connection
// checked when it was made may meet them changed since. So each such
// transaction checks them again, as checkDurable does at connect, and
// refuses to begin when fsync is off or synchronous_commit is off (the
// cast fails with the refusal's text, the transaction is aborted and
// nothing in it can commit). It then sets synchronous_commit for itself
// to the value it checked (as SET LOCAL does): a setting made in the
// transaction outranks the configuration file, and a commit waits as the
// setting in effect when it commits says, so a reload between this check
// and the COMMIT cannot turn it off.
const durableBegin = "BEGIN ISOLATION LEVEL READ COMMITTED;\n" + durableCheck

// durableCheck is durableBegin's check.
const durableCheck = `SELECT (CASE
	WHEN pg_catalog.current_setting('fsync') <> 'on' THEN '` + durabilityMark + `fsync'
	WHEN pg_catalog.current_setting('synchronous_commit') = 'off' THEN '` + durabilityMark + `synchronous_commit'
	ELSE (pg_catalog.set_config('synchronous_commit', pg_catalog.current_setting('synchronous_commit'), true) IS NOT NULL)::text
	END)::boolean`

// durableBeginStmt and durableCheckStmt are durableBegin's statements one
// by one, for a pipeline (Evidence.tryGroup) that sends the transaction's
// statements and its COMMIT at once.
const (
	durableBeginStmt = "BEGIN ISOLATION LEVEL READ COMMITTED"
	durableCheckStmt = durableCheck
)

// durabilityMark begins the text of durableBegin's refusal, followed by
// the setting that is off.
const durabilityMark = "polc refuses to commit: off: "

// durableTx are the options of a transaction that writes: see durableBegin.
var durableTx = pgx.TxOptions{IsoLevel: pgx.ReadCommitted, BeginQuery: durableBegin}

// durabilityErr returns a *DurabilityError for a transaction durableBegin
// refused, else err.
func durabilityErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "22P02" {
		if _, setting, ok := strings.Cut(pe.Message, durabilityMark); ok {
			return &DurabilityError{Setting: strings.TrimRight(setting, `"`), Value: "off"}
		}
	}
	return err
}

// opened is what connect returns: the pool, whose statements name the
// tables of the schema the store opened in; the store's generation (a
// random id made when the schema was created, which projection cursors
// carry); and the schema's advisory lock key.
type opened struct {
	db  *db
	gen string
	key int32
}

// connect opens a pool on dsn whose connections are checked for durable
// commits, and creates or migrates the schema.
func connect(ctx context.Context, dsn string, maxConns int32) (opened, error) {
	if !IsDSN(dsn) {
		return opened{}, fmt.Errorf("pgstore: %q is not a postgres:// DSN", Redact(dsn))
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message can quote the DSN, password included.
		return opened{}, fmt.Errorf("pgstore: %s: invalid DSN", Redact(dsn))
	}
	if maxConns > 0 && !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = maxConns
	}
	cfg.AfterConnect = checkDurable
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return opened{}, fmt.Errorf("pgstore: %s: %w", Redact(dsn), err)
	}
	o, err := migrate(ctx, pool, Redact(dsn))
	if err != nil {
		pool.Close()
		return opened{}, err
	}
	return o, nil
}

// checkDurable refuses a connection on which a commit could return before
// it is durable.
func checkDurable(ctx context.Context, c *pgx.Conn) error {
	var fsync, sync string
	if err := c.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &sync); err != nil {
		return err
	}
	if fsync != "on" {
		return &DurabilityError{Setting: "fsync", Value: fsync}
	}
	if sync == "off" {
		return &DurabilityError{Setting: "synchronous_commit", Value: sync}
	}
	return nil
}

// migrate creates the schema in a database that has none, migrates an
// older one and refuses a newer one, in one transaction under an advisory
// lock (per schema). The schema is the connection's current_schema() (the
// first schema of its search_path that exists); every statement the store
// runs afterwards names its tables in that schema. A search_path through
// which a polc table name resolves to another schema (a store kept further
// down the path, behind a schema added ahead of it) is refused: which
// store was meant is not known, and two stores reaching one set of tables
// under two schemas' lock keys would not exclude each other.
func migrate(ctx context.Context, pool *pgxpool.Pool, name string) (o opened, err error) {
	var schema string
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var cur *string
		if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&cur); err != nil {
			return err
		}
		if cur == nil {
			return &SchemaVersionError{DSN: name, Problem: "no schema to create the tables in (the search_path names none that exists)"}
		}
		schema = *cur
		var table, other string
		switch err := tx.QueryRow(ctx, `SELECT t, n.nspname FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i)
			JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident(t))
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname <> $2 ORDER BY i LIMIT 1`, tableNames, schema).Scan(&table, &other); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			return &SchemaVersionError{DSN: name, Problem: fmt.Sprintf("the search_path's first schema is %s, but its %s resolves to the table of schema %s: name one schema (search_path=%[3]s) to use that store, or take %[3]s out of the search_path",
				pgx.Identifier{schema}.Sanitize(), table, pgx.Identifier{other}.Sanitize())}
		}
		// The tables are created and looked for in that schema only.
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('search_path', $1, true)", pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT hashtext($1)", schema).Scan(&o.key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", int32(migrationLock), o.key); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, "polc_schema"}.Sanitize()).Scan(&exists); err != nil {
			return err
		}
		version := 0
		if exists {
			rows, err := tx.Query(ctx, "SELECT version, generation FROM polc_schema")
			if err != nil {
				return err
			}
			var versions []int
			for rows.Next() {
				var v int
				if err := rows.Scan(&v, &o.gen); err != nil {
					rows.Close()
					return err
				}
				versions = append(versions, v)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if len(versions) != 1 || versions[0] < 1 || len(o.gen) != 32 {
				return &SchemaVersionError{DSN: name, Supported: SchemaVersion, Problem: fmt.Sprintf("polc_schema must hold exactly one row with a version >= 1 and a generation (found %d rows)", len(versions))}
			}
			version = versions[0]
			if version > SchemaVersion {
				return &SchemaVersionError{DSN: name, Found: version, Supported: SchemaVersion}
			}
		} else {
			if _, err := tx.Exec(ctx, `CREATE TABLE polc_schema (
				one        boolean PRIMARY KEY DEFAULT true CHECK (one),
				version    integer NOT NULL,
				generation text NOT NULL)`); err != nil {
				return err
			}
			var b [16]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			o.gen = hex.EncodeToString(b[:])
			if _, err := tx.Exec(ctx, "INSERT INTO polc_schema(version, generation) VALUES (0, $1)", o.gen); err != nil {
				return err
			}
		}
		if version == SchemaVersion {
			return nil
		}
		for _, stmt := range migrations[version:] {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, "UPDATE polc_schema SET version = $1", SchemaVersion)
		return err
	})
	if err != nil {
		var se *SchemaVersionError
		if errors.As(err, &se) {
			return opened{}, err
		}
		return opened{}, fmt.Errorf("pgstore: %s: schema: %w", name, err)
	}
	o.db = &db{pool: pool, q: newQualifier(schema)}
	return o, nil
}

// retryable reports whether err lost the connection or met a server that
// is shutting down or starting (a restart), rather than a statement the
// server refused or a result (no rows): the work may be tried again on a
// new connection.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 57P01-57P03: admin shutdown, crash
		// shutdown, cannot connect now.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
