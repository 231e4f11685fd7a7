package statestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"polc.dev/polc/executor"
)

// The budget ledger: one row per key (tenant, principal, policy id) and
// window length, holding the usage of the last window counted in. Every
// change is one write transaction (BEGIN IMMEDIATE: the row is read and
// written under SQLite's one write lock), so reservations of several
// goroutines or processes sharing the file never see the same count.
// Reserve counts the call before its outcome is known; a process that dies
// before settling or releasing leaves it counted, since whether its call
// ran cannot be told.

// budgetRow is a row of budget_usage.
type budgetRow struct {
	start int64
	u     executor.Usage
}

// readBudget reads key's row for window; ok is false when there is none.
func readBudget(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, key executor.BudgetKey, window int64) (r budgetRow, ok bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT window_start_us, calls, tokens, cost_microunits, wall_microseconds FROM budget_usage
		WHERE tenant = ? AND principal = ? AND policy_id = ? AND window_us = ?`, key.Tenant, key.Principal, key.PolicyID, window).
		Scan(&r.start, &r.u.Calls, &r.u.Tokens, &r.u.CostMicrounits, &r.u.WallMicroseconds)
	if errors.Is(err, sql.ErrNoRows) {
		return budgetRow{}, false, nil
	}
	return r, err == nil, err
}

// writeBudget creates or replaces key's row for window.
func writeBudget(ctx context.Context, tx *sql.Tx, key executor.BudgetKey, window int64, r budgetRow) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO budget_usage(tenant, principal, policy_id, window_us, window_start_us, calls, tokens, cost_microunits, wall_microseconds)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, principal, policy_id, window_us) DO UPDATE SET window_start_us = excluded.window_start_us,
			calls = excluded.calls, tokens = excluded.tokens, cost_microunits = excluded.cost_microunits, wall_microseconds = excluded.wall_microseconds`,
		key.Tenant, key.Principal, key.PolicyID, window, r.start, r.u.Calls, r.u.Tokens, r.u.CostMicrounits, r.u.WallMicroseconds)
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

// current reads key's row for the window now falls in: the stored row,
// or a fresh one when there is none or its window has ended (a stored
// window later than now's is kept: windows never move back).
func current(ctx context.Context, tx *sql.Tx, key executor.BudgetKey, window int64, now time.Time) (budgetRow, error) {
	start := executor.BudgetWindowStart(now, window)
	r, ok, err := readBudget(ctx, tx, key, window)
	if err != nil {
		return budgetRow{}, err
	}
	if !ok || r.start < start {
		return budgetRow{start: start}, nil
	}
	return r, nil
}

// Reserve implements executor.BudgetLedger: it counts one call in the
// window now falls in and returns the usage before it, in one write
// transaction.
func (s *SQLite) Reserve(ctx context.Context, key executor.BudgetKey, window int64, now time.Time) (executor.BudgetReservation, executor.Usage, error) {
	if err := checkBudgetKey(key, window); err != nil {
		return executor.BudgetReservation{}, executor.Usage{}, err
	}
	var res executor.BudgetReservation
	var before executor.Usage
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		r, err := current(ctx, tx, key, window, now)
		if err != nil {
			return err
		}
		before = r.u
		r.u = r.u.Plus(executor.Usage{Calls: 1})
		res = executor.BudgetReservation{Key: key, WindowMicroseconds: window, WindowStart: r.start}
		return writeBudget(ctx, tx, key, window, r)
	})
	if err != nil {
		return executor.BudgetReservation{}, executor.Usage{}, fmt.Errorf("statestore: budget reserve: %w", err)
	}
	return res, before, nil
}

// update applies f to the reservation's row when it is still in the
// reservation's window; an ended window is left as it is.
func (s *SQLite) update(ctx context.Context, op string, res executor.BudgetReservation, f func(*executor.Usage)) error {
	if err := checkBudgetKey(res.Key, res.WindowMicroseconds); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		r, ok, err := readBudget(ctx, tx, res.Key, res.WindowMicroseconds)
		if err != nil || !ok || r.start != res.WindowStart {
			return err
		}
		f(&r.u)
		return writeBudget(ctx, tx, res.Key, res.WindowMicroseconds, r)
	})
	if err != nil {
		return fmt.Errorf("statestore: budget %s: %w", op, err)
	}
	return nil
}

// Settle implements executor.BudgetLedger.
func (s *SQLite) Settle(ctx context.Context, res executor.BudgetReservation, u executor.Usage) error {
	if err := executor.CheckUsage(u); err != nil {
		return &InputError{What: "budget settlement", Reason: err.Error()}
	}
	return s.update(ctx, "settle", res, func(r *executor.Usage) { *r = r.Plus(u) })
}

// Release implements executor.BudgetLedger.
func (s *SQLite) Release(ctx context.Context, res executor.BudgetReservation) error {
	return s.update(ctx, "release", res, func(r *executor.Usage) {
		if r.Calls > 0 {
			r.Calls--
		}
	})
}

// Charge implements executor.BudgetLedger.
func (s *SQLite) Charge(ctx context.Context, key executor.BudgetKey, window int64, now time.Time, u executor.Usage) error {
	if err := checkBudgetKey(key, window); err != nil {
		return err
	}
	if err := executor.CheckUsage(u); err != nil {
		return &InputError{What: "budget charge", Reason: err.Error()}
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		r, err := current(ctx, tx, key, window, now)
		if err != nil {
			return err
		}
		r.u = r.u.Plus(u)
		return writeBudget(ctx, tx, key, window, r)
	})
	if err != nil {
		return fmt.Errorf("statestore: budget charge: %w", err)
	}
	return nil
}

// Usage implements executor.BudgetLedger.
func (s *SQLite) Usage(ctx context.Context, key executor.BudgetKey, window int64, now time.Time) (executor.Usage, error) {
	if err := checkBudgetKey(key, window); err != nil {
		return executor.Usage{}, err
	}
	var u executor.Usage
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		r, ok, err := readBudget(ctx, tx, key, window)
		if err == nil && ok && r.start >= executor.BudgetWindowStart(now, window) {
			u = r.u
		}
		return err
	})
	return u, err
}

// Persistent implements executor.BudgetLedger: the usage is in the file.
func (s *SQLite) Persistent() bool { return true }
