package statestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// The budget ledger: one executor.BudgetAccount per key (tenant, principal,
// policy id), judged by its rules, stored as one budget_usage row per
// window recorded in (window_us > 0: its length and start) and one for the
// account's past (window_us 0: the lifetime's usage and the folded
// windows'). The window's length is not part of the account: a policy's
// new version with another window goes on with it. Every change is one
// write transaction (BEGIN IMMEDIATE: the account is read and written under
// SQLite's one write lock), so reservations of several goroutines or
// processes sharing the file never see the same count. Reserve counts the
// call before its outcome is known; a process that dies before settling or
// releasing leaves it counted, since whether its call ran cannot be told.

// loadAccount reads key's account (empty when it has no row). With only
// set, it reads only the past and that window's row: enough to adjust a
// reservation (BudgetAccount.Adjust), which folds nothing.
func loadAccount(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, key executor.BudgetKey, only *executor.BudgetReservation) (*executor.BudgetAccount, error) {
	query := `SELECT window_us, window_start_us, end_us, calls, tokens, cost_microunits, wall_microseconds FROM budget_usage
		WHERE tenant = ? AND principal = ? AND policy_id = ?`
	args := []any{key.Tenant, key.Principal, key.PolicyID}
	if only != nil {
		query += ` AND (window_us = 0 OR (window_us = ? AND window_start_us = ?))`
		args = append(args, only.WindowMicroseconds, only.WindowStart)
	}
	rows, err := q.QueryContext(ctx, query+` ORDER BY window_us, window_start_us`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	a := &executor.BudgetAccount{}
	for rows.Next() {
		var b executor.BudgetBucket
		var end sql.NullInt64
		if err := rows.Scan(&b.Window, &b.Start, &end, &b.Usage.Calls, &b.Usage.Tokens, &b.Usage.CostMicrounits, &b.Usage.WallMicroseconds); err != nil {
			return nil, err
		}
		if b.Window == 0 {
			a.Past, a.PastEnd, a.PastEndKnown = b.Usage, end.Int64, end.Valid
		} else {
			a.Buckets = append(a.Buckets, b)
		}
	}
	return a, rows.Err()
}

// saveAccount writes what changed from before to after: a folded window's
// row is deleted, a new or changed one written, and so is the past's.
func saveAccount(ctx context.Context, tx *sql.Tx, key executor.BudgetKey, before, after *executor.BudgetAccount) error {
	type wk struct{ window, start int64 }
	was := make(map[wk]normalize.Usage, len(before.Buckets))
	for _, b := range before.Buckets {
		was[wk{b.Window, b.Start}] = b.Usage
	}
	for _, b := range after.Buckets {
		k := wk{b.Window, b.Start}
		u, ok := was[k]
		delete(was, k)
		if ok && u == b.Usage {
			continue
		}
		if err := writeRow(ctx, tx, key, b, sql.NullInt64{}); err != nil {
			return err
		}
	}
	for k := range was {
		if _, err := tx.ExecContext(ctx, `DELETE FROM budget_usage WHERE tenant = ? AND principal = ? AND policy_id = ? AND window_us = ? AND window_start_us = ?`,
			key.Tenant, key.Principal, key.PolicyID, k.window, k.start); err != nil {
			return err
		}
	}
	if after.Past == before.Past && after.PastEndKnown == before.PastEndKnown && after.PastEnd == before.PastEnd ||
		after.Past == (normalize.Usage{}) && !after.PastEndKnown {
		return nil
	}
	return writeRow(ctx, tx, key, executor.BudgetBucket{Usage: after.Past}, sql.NullInt64{Int64: after.PastEnd, Valid: after.PastEndKnown})
}

// writeRow creates or replaces key's row for b's window (window 0: the
// past, ending at end).
func writeRow(ctx context.Context, tx *sql.Tx, key executor.BudgetKey, b executor.BudgetBucket, end sql.NullInt64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO budget_usage(tenant, principal, policy_id, window_us, window_start_us, end_us, calls, tokens, cost_microunits, wall_microseconds)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, principal, policy_id, window_us, window_start_us) DO UPDATE SET end_us = excluded.end_us,
			calls = excluded.calls, tokens = excluded.tokens, cost_microunits = excluded.cost_microunits, wall_microseconds = excluded.wall_microseconds`,
		key.Tenant, key.Principal, key.PolicyID, b.Window, b.Start, end, b.Usage.Calls, b.Usage.Tokens, b.Usage.CostMicrounits, b.Usage.WallMicroseconds)
	return err
}

// checkBudgetKey refuses a key or window no ledger row can stand for.
func checkBudgetKey(key executor.BudgetKey, window int64) error {
	switch {
	case key.Principal == "" || key.PolicyID == "":
		return &InputError{What: "budget key", Reason: "principal and policy id must be set"}
	case window < 0:
		return &InputError{What: "budget window", Reason: fmt.Sprintf("%d is negative", window)}
	}
	return nil
}

// modify applies f to key's account (only: the part loadAccount reads) in
// one write transaction and writes what it changed.
func (s *SQLite) modify(ctx context.Context, key executor.BudgetKey, only *executor.BudgetReservation, f func(*executor.BudgetAccount)) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		a, err := loadAccount(ctx, tx, key, only)
		if err != nil {
			return err
		}
		before := *a
		before.Buckets = slices.Clone(a.Buckets)
		f(a)
		return saveAccount(ctx, tx, key, &before, a)
	})
}

// Reserve implements executor.BudgetLedger: it counts one call in the
// window now falls in and returns the usage before it, in one write
// transaction.
func (s *SQLite) Reserve(ctx context.Context, key executor.BudgetKey, window int64, now time.Time) (executor.BudgetReservation, normalize.Usage, error) {
	if err := checkBudgetKey(key, window); err != nil {
		return executor.BudgetReservation{}, normalize.Usage{}, err
	}
	var res executor.BudgetReservation
	var before normalize.Usage
	err := s.modify(ctx, key, nil, func(a *executor.BudgetAccount) {
		var start int64
		start, before = a.Record(window, now, normalize.Usage{Calls: 1})
		res = executor.BudgetReservation{Key: key, WindowMicroseconds: window, WindowStart: start}
	})
	if err != nil {
		return executor.BudgetReservation{}, normalize.Usage{}, fmt.Errorf("statestore: budget reserve: %w", err)
	}
	return res, before, nil
}

// update applies f to the usage the reservation recorded: in its window's
// row, or in the past's when that window has been folded into it.
func (s *SQLite) update(ctx context.Context, op string, res executor.BudgetReservation, f func(*normalize.Usage)) error {
	if err := checkBudgetKey(res.Key, res.WindowMicroseconds); err != nil {
		return err
	}
	err := s.modify(ctx, res.Key, &res, func(a *executor.BudgetAccount) { a.Adjust(res.WindowMicroseconds, res.WindowStart, f) })
	if err != nil {
		return fmt.Errorf("statestore: budget %s: %w", op, err)
	}
	return nil
}

// Settle implements executor.BudgetLedger.
func (s *SQLite) Settle(ctx context.Context, res executor.BudgetReservation, u normalize.Usage) error {
	if err := executor.CheckUsage(u); err != nil {
		return &InputError{What: "budget settlement", Reason: err.Error()}
	}
	return s.update(ctx, "settle", res, func(r *normalize.Usage) { *r = r.Plus(u) })
}

// Release implements executor.BudgetLedger.
func (s *SQLite) Release(ctx context.Context, res executor.BudgetReservation) error {
	return s.update(ctx, "release", res, func(r *normalize.Usage) {
		if r.Calls > 0 {
			r.Calls--
		}
	})
}

// Charge implements executor.BudgetLedger.
func (s *SQLite) Charge(ctx context.Context, key executor.BudgetKey, window int64, now time.Time, u normalize.Usage) error {
	if err := checkBudgetKey(key, window); err != nil {
		return err
	}
	if err := executor.CheckUsage(u); err != nil {
		return &InputError{What: "budget charge", Reason: err.Error()}
	}
	if err := s.modify(ctx, key, nil, func(a *executor.BudgetAccount) { a.Record(window, now, u) }); err != nil {
		return fmt.Errorf("statestore: budget charge: %w", err)
	}
	return nil
}

// Usage implements executor.BudgetLedger.
func (s *SQLite) Usage(ctx context.Context, key executor.BudgetKey, window int64, now time.Time) (normalize.Usage, error) {
	if err := checkBudgetKey(key, window); err != nil {
		return normalize.Usage{}, err
	}
	var u normalize.Usage
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		a, err := loadAccount(ctx, tx, key, nil)
		if err == nil {
			_, u = a.UsageAt(window, now)
		}
		return err
	})
	return u, err
}

// Persistent implements executor.BudgetLedger: the usage is in the file.
func (s *SQLite) Persistent() bool { return true }
