package statestore

import (
	"context"
	"database/sql"

	"polc.dev/polc/executor"
)

// The budget ledger on SQLite (BudgetLedger judges it): the rows are in
// budget_usage, and every change is one write transaction (BEGIN
// IMMEDIATE: the account is read and written under SQLite's one write
// lock), so reservations of several goroutines or processes sharing the
// file never see the same count.

// sqliteBudget is the SQLite store as BudgetLedger's BudgetStore.
type sqliteBudget struct{ s *SQLite }

// WriteBudget implements BudgetStore: the write lock holds every account.
func (b sqliteBudget) WriteBudget(ctx context.Context, _ executor.BudgetKey, f func(BudgetRows) error) error {
	return b.s.writeTx(ctx, func(tx *sql.Tx) error { return f(sqliteBudgetRows{tx}) })
}

// ReadBudget implements BudgetStore.
func (b sqliteBudget) ReadBudget(ctx context.Context, f func(BudgetRows) error) error {
	return b.s.readTx(ctx, func(tx *sql.Tx) error { return f(sqliteBudgetRows{tx}) })
}

// sqliteBudgetRows is budget_usage inside one transaction.
type sqliteBudgetRows struct{ tx *sql.Tx }

// LoadBudget implements BudgetRows.
func (r sqliteBudgetRows) LoadBudget(ctx context.Context, key executor.BudgetKey, only *executor.BudgetReservation) (*executor.BudgetAccount, error) {
	query := `SELECT window_us, window_start_us, end_us, calls, tokens, cost_microunits, wall_microseconds FROM budget_usage
		WHERE tenant = ? AND principal = ? AND policy_id = ?`
	args := []any{key.Tenant, key.Principal, key.PolicyID}
	if only != nil {
		query += ` AND (window_us = 0 OR (window_us = ? AND window_start_us = ?))`
		args = append(args, only.WindowMicroseconds, only.WindowStart)
	}
	rows, err := r.tx.QueryContext(ctx, query+` ORDER BY window_us, window_start_us`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return ScanBudgetAccount(rows)
}

// PutBudget implements BudgetRows.
func (r sqliteBudgetRows) PutBudget(ctx context.Context, key executor.BudgetKey, b executor.BudgetBucket, end *int64) error {
	_, err := r.tx.ExecContext(ctx, `INSERT INTO budget_usage(tenant, principal, policy_id, window_us, window_start_us, end_us, calls, tokens, cost_microunits, wall_microseconds)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, principal, policy_id, window_us, window_start_us) DO UPDATE SET end_us = excluded.end_us,
			calls = excluded.calls, tokens = excluded.tokens, cost_microunits = excluded.cost_microunits, wall_microseconds = excluded.wall_microseconds`,
		key.Tenant, key.Principal, key.PolicyID, b.Window, b.Start, end, b.Usage.Calls, b.Usage.Tokens, b.Usage.CostMicrounits, b.Usage.WallMicroseconds)
	return err
}

// DeleteBudget implements BudgetRows.
func (r sqliteBudgetRows) DeleteBudget(ctx context.Context, key executor.BudgetKey, window, start int64) error {
	_, err := r.tx.ExecContext(ctx, `DELETE FROM budget_usage WHERE tenant = ? AND principal = ? AND policy_id = ? AND window_us = ? AND window_start_us = ?`,
		key.Tenant, key.Principal, key.PolicyID, window, start)
	return err
}
