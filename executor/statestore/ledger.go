package statestore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// The budget ledger's judgement, shared by every store (SQLite here,
// PostgreSQL in package pgstore): an account per key (tenant, principal,
// policy id) is judged by executor.BudgetAccount and kept as one row per
// window recorded in (window_us > 0: its length and start) and one for the
// account's past (window_us 0: the lifetime's usage and the folded
// windows'). A store gives BudgetLedger its rows (BudgetRows) in
// transactions that hold an account exclusively (BudgetStore); what is
// read, changed and written, and every check and error, is decided here
// once. Reserve counts the call before its outcome is known; a process
// that dies before settling or releasing leaves it counted, since whether
// its call ran cannot be told.

// Rows is the part of *sql.Rows and pgx.Rows the shared readers use; the
// caller closes the rows.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// BudgetRows is a store's budget rows inside one of its transactions.
type BudgetRows interface {
	// LoadBudget reads key's account with ScanBudgetAccount (empty when it
	// has no row). With only set, it reads only the past's row and that
	// window's: enough to adjust a reservation (BudgetAccount.Adjust),
	// which folds nothing.
	LoadBudget(ctx context.Context, key executor.BudgetKey, only *executor.BudgetReservation) (*executor.BudgetAccount, error)
	// PutBudget creates or replaces key's row for b's window (window 0:
	// the past, ending at *end, or at an unknown end when end is nil).
	PutBudget(ctx context.Context, key executor.BudgetKey, b executor.BudgetBucket, end *int64) error
	// DeleteBudget deletes key's row of the window of that length and
	// start.
	DeleteBudget(ctx context.Context, key executor.BudgetKey, window, start int64) error
}

// BudgetStore is what a store gives BudgetLedger.
type BudgetStore interface {
	// WriteBudget runs f in one transaction that holds key's account
	// exclusively until it ends, and commits it when f returns nil: the
	// reservations of several goroutines or processes on one key never
	// see the same count.
	WriteBudget(ctx context.Context, key executor.BudgetKey, f func(BudgetRows) error) error
	// ReadBudget runs f on the committed rows.
	ReadBudget(ctx context.Context, f func(BudgetRows) error) error
}

// BudgetLedger implements executor.BudgetLedger on a store's rows. Its
// errors are those of package statestore (*InputError for a key, window
// or usage no row can stand for) and the store's, prefixed with the
// store's name.
type BudgetLedger struct {
	name  string
	store BudgetStore
}

// NewBudgetLedger returns the ledger on store's rows; name ("statestore",
// "pgstore") prefixes the store's errors.
func NewBudgetLedger(name string, store BudgetStore) BudgetLedger {
	return BudgetLedger{name: name, store: store}
}

var _ executor.BudgetLedger = BudgetLedger{}

// ScanBudgetAccount reads an account from its rows (window_us,
// window_start_us, end_us, calls, tokens, cost_microunits,
// wall_microseconds; end_us NULL where not known) in the order of
// (window_us, window_start_us).
func ScanBudgetAccount(rows Rows) (*executor.BudgetAccount, error) {
	a := &executor.BudgetAccount{}
	for rows.Next() {
		var b executor.BudgetBucket
		var end *int64
		if err := rows.Scan(&b.Window, &b.Start, &end, &b.Usage.Calls, &b.Usage.Tokens, &b.Usage.CostMicrounits, &b.Usage.WallMicroseconds); err != nil {
			return nil, err
		}
		if b.Window == 0 {
			a.Past, a.PastEndKnown = b.Usage, end != nil
			if end != nil {
				a.PastEnd = *end
			}
		} else {
			a.Buckets = append(a.Buckets, b)
		}
	}
	return a, rows.Err()
}

// saveBudget writes what changed from before to after: a folded window's
// row is deleted, a new or changed one written, and so is the past's.
func saveBudget(ctx context.Context, rows BudgetRows, key executor.BudgetKey, before, after *executor.BudgetAccount) error {
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
		if err := rows.PutBudget(ctx, key, b, nil); err != nil {
			return err
		}
	}
	for k := range was {
		if err := rows.DeleteBudget(ctx, key, k.window, k.start); err != nil {
			return err
		}
	}
	if after.Past == before.Past && after.PastEndKnown == before.PastEndKnown && after.PastEnd == before.PastEnd ||
		after.Past == (normalize.Usage{}) && !after.PastEndKnown {
		return nil
	}
	var end *int64
	if after.PastEndKnown {
		end = &after.PastEnd
	}
	return rows.PutBudget(ctx, key, executor.BudgetBucket{Usage: after.Past}, end)
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

// modify applies f to key's account (only: the part LoadBudget reads) in
// one of the store's write transactions and writes what it changed.
func (l BudgetLedger) modify(ctx context.Context, key executor.BudgetKey, only *executor.BudgetReservation, f func(*executor.BudgetAccount)) error {
	return l.store.WriteBudget(ctx, key, func(rows BudgetRows) error {
		a, err := rows.LoadBudget(ctx, key, only)
		if err != nil {
			return err
		}
		before := *a
		before.Buckets = slices.Clone(a.Buckets)
		f(a)
		return saveBudget(ctx, rows, key, &before, a)
	})
}

// Reserve implements executor.BudgetLedger: it counts one call in the
// window now falls in and returns the usage before it, in one write
// transaction.
func (l BudgetLedger) Reserve(ctx context.Context, key executor.BudgetKey, window int64, now time.Time) (executor.BudgetReservation, normalize.Usage, error) {
	if err := checkBudgetKey(key, window); err != nil {
		return executor.BudgetReservation{}, normalize.Usage{}, err
	}
	var res executor.BudgetReservation
	var before normalize.Usage
	err := l.modify(ctx, key, nil, func(a *executor.BudgetAccount) {
		var start int64
		start, before = a.Record(window, now, normalize.Usage{Calls: 1})
		res = executor.BudgetReservation{Key: key, WindowMicroseconds: window, WindowStart: start}
	})
	if err != nil {
		return executor.BudgetReservation{}, normalize.Usage{}, fmt.Errorf("%s: budget reserve: %w", l.name, err)
	}
	return res, before, nil
}

// update applies f to the usage the reservation recorded: in its window's
// row, or in the past's when that window has been folded into it.
func (l BudgetLedger) update(ctx context.Context, op string, res executor.BudgetReservation, f func(*normalize.Usage)) error {
	if err := checkBudgetKey(res.Key, res.WindowMicroseconds); err != nil {
		return err
	}
	err := l.modify(ctx, res.Key, &res, func(a *executor.BudgetAccount) { a.Adjust(res.WindowMicroseconds, res.WindowStart, f) })
	if err != nil {
		return fmt.Errorf("%s: budget %s: %w", l.name, op, err)
	}
	return nil
}

// Settle implements executor.BudgetLedger.
func (l BudgetLedger) Settle(ctx context.Context, res executor.BudgetReservation, u normalize.Usage) error {
	if err := executor.CheckUsage(u); err != nil {
		return &InputError{What: "budget settlement", Reason: err.Error()}
	}
	return l.update(ctx, "settle", res, func(r *normalize.Usage) { *r = r.Plus(u) })
}

// Release implements executor.BudgetLedger.
func (l BudgetLedger) Release(ctx context.Context, res executor.BudgetReservation) error {
	return l.update(ctx, "release", res, func(r *normalize.Usage) {
		if r.Calls > 0 {
			r.Calls--
		}
	})
}

// Charge implements executor.BudgetLedger.
func (l BudgetLedger) Charge(ctx context.Context, key executor.BudgetKey, window int64, now time.Time, u normalize.Usage) error {
	if err := checkBudgetKey(key, window); err != nil {
		return err
	}
	if err := executor.CheckUsage(u); err != nil {
		return &InputError{What: "budget charge", Reason: err.Error()}
	}
	if err := l.modify(ctx, key, nil, func(a *executor.BudgetAccount) { a.Record(window, now, u) }); err != nil {
		return fmt.Errorf("%s: budget charge: %w", l.name, err)
	}
	return nil
}

// Usage implements executor.BudgetLedger.
func (l BudgetLedger) Usage(ctx context.Context, key executor.BudgetKey, window int64, now time.Time) (normalize.Usage, error) {
	if err := checkBudgetKey(key, window); err != nil {
		return normalize.Usage{}, err
	}
	var u normalize.Usage
	err := l.store.ReadBudget(ctx, func(rows BudgetRows) error {
		a, err := rows.LoadBudget(ctx, key, nil)
		if err == nil {
			_, u = a.UsageAt(window, now)
		}
		return err
	})
	return u, err
}

// Persistent implements executor.BudgetLedger: the usage is in the
// store's database.
func (l BudgetLedger) Persistent() bool { return true }
