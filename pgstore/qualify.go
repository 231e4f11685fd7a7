package pgstore

import (
	"context"
	"regexp"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tableNames are the tables of polc's schema (docs/scale.md "Schema and
// migrations").
var tableNames = []string{
	"polc_schema", "polc_records", "polc_runs", "polc_attempts", "polc_outbox",
	"polc_projected_records", "polc_operations", "polc_projection_cursors",
	"polc_budget_accounts", "polc_budget_usage", "polc_approval_nonces",
}

var tableRef = regexp.MustCompile(`\bpolc_[a-z_]+\b`)

// qualifier rewrites a statement so that each polc table it names is
// qualified with the schema the store opened in: the tables a store uses
// are exactly those of the schema whose advisory lock keys it takes,
// whatever a connection's search_path resolves (a schema created later
// ahead of it in the search_path, a server default changed since) and
// whatever a pooler in between does to session state.
type qualifier struct {
	names map[string]string // table name → "schema"."table"
	cache sync.Map          // statement → qualified statement (statements are constants)
}

func newQualifier(schema string) *qualifier {
	q := &qualifier{names: make(map[string]string, len(tableNames))}
	for _, t := range tableNames {
		q.names[t] = pgx.Identifier{schema, t}.Sanitize()
	}
	return q
}

func (q *qualifier) sql(s string) string {
	if v, ok := q.cache.Load(s); ok {
		return v.(string)
	}
	out := tableRef.ReplaceAllStringFunc(s, func(w string) string {
		if n, ok := q.names[w]; ok {
			return n
		}
		return w
	})
	q.cache.Store(s, out)
	return out
}

// db is the store's pool, every statement of which is qualified.
type db struct {
	pool *pgxpool.Pool
	q    *qualifier
}

func (d *db) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.pool.Exec(ctx, d.q.sql(sql), args...)
}

func (d *db) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.pool.Query(ctx, d.q.sql(sql), args...)
}

func (d *db) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.pool.QueryRow(ctx, d.q.sql(sql), args...)
}

// begin starts a transaction on the pool.
func (d *db) begin(ctx context.Context, opts pgx.TxOptions) (*qtx, error) {
	tx, err := d.pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &qtx{tx: tx, q: d.q}, nil
}

// txFunc runs fn in a transaction, committed when fn returns nil (as
// pgx.BeginTxFunc).
func (d *db) txFunc(ctx context.Context, opts pgx.TxOptions, fn func(*qtx) error) error {
	tx, err := d.begin(ctx, opts)
	if err != nil {
		return err
	}
	defer tx.tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	return tx.tx.Commit(ctx)
}

// qtx is a transaction every statement of which is qualified.
type qtx struct {
	tx pgx.Tx
	q  *qualifier
}

func (t *qtx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.tx.Exec(ctx, t.q.sql(sql), args...)
}

func (t *qtx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.tx.Query(ctx, t.q.sql(sql), args...)
}

func (t *qtx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(ctx, t.q.sql(sql), args...)
}
