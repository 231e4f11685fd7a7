package executor_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// budgetLedgers are the ledgers every window-change test runs on: the
// in-memory one and SQLite. open returns a handle on one shared ledger;
// for SQLite each call is a new handle on the same file, as another
// process would have.
func budgetLedgers(t *testing.T) []struct {
	name string
	open func() executor.BudgetLedger
} {
	mem := executor.NewMemoryLedger()
	path := filepath.Join(t.TempDir(), "state.db")
	return []struct {
		name string
		open func() executor.BudgetLedger
	}{
		{"memory", func() executor.BudgetLedger { return mem }},
		{"sqlite", func() executor.BudgetLedger { return openState(t, path) }},
	}
}

var (
	hourUS = int64(time.Hour / time.Microsecond)
	ledKey = executor.BudgetKey{Tenant: "acme", Principal: "agent:a", PolicyID: "p"}
)

// runAt runs n calls of "work" under snap at the given time on ledger,
// and returns how many ran.
func runAt(t *testing.T, snap *snapshot.Snapshot, ledger executor.BudgetLedger, at time.Time, n int) int {
	t.Helper()
	r := newBudgetRig(t, snap, nil, func(c *executor.Config) { c.Budgets = ledger })
	r.clock.set(at)
	ec := r.ctx(executor.ProfileMinimal)
	for range n {
		out := r.run(ec, "work")
		if out.Kind() != executor.KindSucceeded && !budgetDenied(out) {
			t.Fatalf("%s at %s: %s %s (%s)", snap.Version, at.Format(time.TimeOnly), out.Kind(), out.Base().ReasonCode, lastDetail(out))
		}
	}
	return int(r.calls.Load())
}

// TestBudgetNewVersionWindowKeepsAccount: a new version of a policy that
// changes only its budget window goes on with the old version's account,
// on both ledgers. v1 {calls: 2, window: "1h"} uses both calls at 12:10;
// v2 {calls: 2, window: "2h"}, live at 12:20, is judged on them: its
// window [12:00, 14:00) holds v1's hour, so nothing more runs before
// 14:00. The reverse (2h, then 1h) counts the old 2h window in each of
// the new hours it overlaps, 12:00 and 13:00 (whole: failing closed),
// and not from 14:00. The ledger used to key usage by window length, so
// v2 started from zero and four calls ran within one 2h window.
func TestBudgetNewVersionWindowKeepsAccount(t *testing.T) {
	w1h := compilePolicy(t, budgetPolicy(`{calls: 2, window: "1h"}`))
	w2h := compilePolicy(t, budgetPolicy(`{calls: 2, window: "2h"}`))
	if w1h.PolicyID != w2h.PolicyID {
		t.Fatal("test setup: same policy id expected")
	}
	for _, order := range []struct {
		name      string
		old, next *snapshot.Snapshot
	}{{"1h-2h", w1h, w2h}, {"2h-1h", w2h, w1h}} {
		for _, l := range budgetLedgers(t) {
			t.Run(order.name+"/"+l.name, func(t *testing.T) {
				ledger := l.open()
				old, next := order.old, order.next
				if ran := runAt(t, old, ledger, budgetT0.Add(10*time.Minute), 2); ran != 2 {
					t.Fatalf("the old version ran %d calls, want 2", ran)
				}
				for _, at := range []time.Duration{20 * time.Minute, 70 * time.Minute, 2*time.Hour - time.Microsecond} {
					if ran := runAt(t, next, l.open(), budgetT0.Add(at), 1); ran != 0 {
						t.Errorf("the new version ran a call at %s, within a window overlapping the old one's used budget", budgetT0.Add(at).Format(time.TimeOnly))
					}
				}
				if ran := runAt(t, next, l.open(), budgetT0.Add(2*time.Hour), 3); ran != 2 {
					t.Errorf("the new version ran %d calls from 14:00, want 2", ran)
				}
			})
		}
	}
}

// TestBudgetLongerWindowCountsEndedWindows: a window that has ended is
// kept (TestBudgetLedgerFolds: or folded into the account's past), not
// dropped, because a later version with a longer window (or none) may
// still overlap it. v1 (1h) runs 2 calls at 11:10 and 1 at 12:05; v2
// {calls: 3, window: "24h"} at 12:10 is judged on all 3, and so is v3
// {calls: 3} (the lifetime). The next day v2 starts again; v3 never does.
func TestBudgetLongerWindowCountsEndedWindows(t *testing.T) {
	v1 := compilePolicy(t, budgetPolicy(`{calls: 3, window: "1h"}`))
	day := compilePolicy(t, budgetPolicy(`{calls: 3, window: "24h"}`))
	life := compilePolicy(t, budgetPolicy(`{calls: 3}`))
	for _, l := range budgetLedgers(t) {
		t.Run(l.name, func(t *testing.T) {
			ledger := l.open()
			ran := runAt(t, v1, ledger, budgetT0.Add(-50*time.Minute), 2) + runAt(t, v1, ledger, budgetT0.Add(5*time.Minute), 1)
			if ran != 3 {
				t.Fatalf("v1 ran %d, want 3", ran)
			}
			if ran := runAt(t, day, ledger, budgetT0.Add(10*time.Minute), 1); ran != 0 {
				t.Error("the 24h version ran a fourth call within the day")
			}
			if ran := runAt(t, life, ledger, budgetT0.Add(10*time.Minute), 1); ran != 0 {
				t.Error("the lifetime version ran a fourth call")
			}
			tomorrow := budgetT0.Add(12 * time.Hour)
			if ran := runAt(t, day, ledger, tomorrow, 4); ran != 3 {
				t.Errorf("the 24h version ran %d calls the next day, want 3", ran)
			}
			if ran := runAt(t, life, ledger, tomorrow.Add(time.Hour), 1); ran != 0 {
				t.Error("the lifetime version ran a call after 6 were used")
			}
		})
	}
}

// TestBudgetLifetimeToWindow: a version that gives a lifetime budget a
// window is judged on the lifetime's usage in the window where it was
// last recorded, and starts again in the next.
func TestBudgetLifetimeToWindow(t *testing.T) {
	life := compilePolicy(t, budgetPolicy(`{calls: 2}`))
	hourly := compilePolicy(t, budgetPolicy(`{calls: 2, window: "1h"}`))
	for _, l := range budgetLedgers(t) {
		t.Run(l.name, func(t *testing.T) {
			ledger := l.open()
			if ran := runAt(t, life, ledger, budgetT0.Add(10*time.Minute), 2); ran != 2 {
				t.Fatalf("lifetime ran %d, want 2", ran)
			}
			if ran := runAt(t, hourly, ledger, budgetT0.Add(20*time.Minute), 1); ran != 0 {
				t.Error("the hourly version ran a third call in the hour the lifetime's two ran in")
			}
			if ran := runAt(t, hourly, ledger, budgetT0.Add(time.Hour), 3); ran != 2 {
				t.Errorf("the hourly version ran %d calls in the next hour, want 2", ran)
			}
		})
	}
}

// TestBudgetAccountFolds: an account keeps apart the windows not ended
// and the BudgetEndedWindowsKept latest ended ones, and folds older ones
// into its past, so a policy running hour after hour holds a bounded
// number of entries, not one per hour, and a lifetime version still
// counts every call. A new version whose window spans kept hours (2h at
// an odd hour, 24h) is judged on exactly those; one whose window reaches
// the past (a week) counts it whole in its first window, failing closed.
// A reservation settled or released after its window was folded is
// settled or released in the past, and a clock stepped back under a new
// window length stays at the latest window recorded in.
func TestBudgetAccountFolds(t *testing.T) {
	const kept = executor.BudgetEndedWindowsKept
	var a executor.BudgetAccount
	at := func(h int) time.Time { return budgetT0.Add(time.Duration(h) * time.Hour) }
	const hours = kept + 38
	for h := range hours {
		if _, before := a.Record(hourUS, at(h), normalize.Usage{Calls: 1}); before.Calls != 0 {
			t.Fatalf("hour %d: usage before %+v, want a new window", h, before)
		}
	}
	folded := hours - 1 - kept // the hours before the kept ones
	if len(a.Buckets) != kept+1 || a.Past.Calls != int64(folded) || !a.PastEndKnown || a.PastEnd != at(folded).UnixMicro() {
		t.Fatalf("after %d hours: %d windows, past %+v ending at %d; want %d windows and %d calls in the past, ending at %d",
			hours, len(a.Buckets), a.Past, a.PastEnd, kept+1, folded, at(folded).UnixMicro())
	}
	last := at(hours - 1) // 12:00 + 101h: 17:00, an odd hour
	for _, c := range []struct {
		name   string
		window time.Duration
		now    time.Time
		calls  int64
	}{
		{"lifetime", 0, last, hours},
		{"2h from 16:00", 2 * time.Hour, last, 2},
		{"2h from 18:00", 2 * time.Hour, last.Add(time.Hour), 0},
		{"24h", 24 * time.Hour, last, int64(last.Hour() + 1)},
		{"a century, reaching the past", 100 * 365 * 24 * time.Hour, last, hours},
	} {
		if _, u := a.UsageAt(c.window.Microseconds(), c.now); u.Calls != c.calls {
			t.Errorf("%s: usage %+v, want %d calls", c.name, u, c.calls)
		}
	}
	// A reservation of the first kept hour, settled and released after
	// the next hour folded it.
	first := at(folded).UnixMicro()
	a.Record(hourUS, at(hours), normalize.Usage{Calls: 5})
	if !a.Adjust(hourUS, first, func(u *normalize.Usage) { u.Tokens += 7 }) || a.Past.Tokens != 7 {
		t.Errorf("settling a folded window: past %+v, want its tokens", a.Past)
	}
	if !a.Adjust(hourUS, first, func(u *normalize.Usage) { u.Calls-- }) || a.Past.Calls != int64(folded) {
		t.Errorf("releasing a folded window: past %+v, want %d calls", a.Past, folded)
	}
	if a.Adjust(hourUS, at(hours+10).UnixMicro(), func(*normalize.Usage) {}) {
		t.Error("adjusted a window never recorded in")
	}
	// A 2h version with the clock stepped back two hours (to 16:00,
	// whose 2h window holds 2 calls): its window is the one holding the
	// latest hour recorded in, 18:00, with its 5 calls.
	start, before := a.Record(2*hourUS, at(hours-2), normalize.Usage{Calls: 1})
	if want := last.Add(time.Hour); start != want.UnixMicro() || before.Calls != 5 {
		t.Errorf("2h window with the clock stepped back: from %s with %+v, want from %s with 5 calls", time.UnixMicro(start).UTC(), before, want)
	}
}

// TestBudgetLedgerFolds: both ledgers, one call an hour under a 1h window
// for BudgetEndedWindowsKept+10 hours (so the first 9 are folded into the
// past), one of them settled after its window was folded: the lifetime
// (a later version without a window) counts every call and the settled
// tokens, the 24h window the day's calls, and the current hour its own.
func TestBudgetLedgerFolds(t *testing.T) {
	ctx := context.Background()
	const hours = executor.BudgetEndedWindowsKept + 10
	for _, l := range budgetLedgers(t) {
		t.Run(l.name, func(t *testing.T) {
			ledger := l.open()
			var first executor.BudgetReservation
			for h := range hours {
				r, before, err := ledger.Reserve(ctx, ledKey, hourUS, budgetT0.Add(time.Duration(h)*time.Hour))
				if err != nil || before.Calls != 0 {
					t.Fatalf("hour %d: %v, usage before %+v", h, err, before)
				}
				if h == 0 {
					first = r
				} else if err := ledger.Settle(ctx, r, normalize.Usage{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := ledger.Settle(ctx, first, normalize.Usage{Tokens: 7}); err != nil {
				t.Fatal(err)
			}
			last := budgetT0.Add((hours - 1) * time.Hour)
			for _, c := range []struct {
				window time.Duration
				want   normalize.Usage
			}{
				{0, normalize.Usage{Calls: hours, Tokens: 7}},
				{24 * time.Hour, normalize.Usage{Calls: int64(last.Hour() + 1)}},
				{time.Hour, normalize.Usage{Calls: 1}},
			} {
				if u, err := ledger.Usage(ctx, ledKey, c.window.Microseconds(), last); err != nil || u != c.want {
					t.Errorf("window %s: usage %+v (%v), want %+v", c.window, u, err, c.want)
				}
			}
		})
	}
}

// TestConcurrentBudgetWindowChange: two executors, one on v1 (calls: 5
// per 1h) and one on v2 (calls: 5 per 2h), share a ledger while the
// version changes, as two processes of a rollout would: 32 concurrent
// attempts between them run exactly 5, on both ledgers (SQLite: two
// handles on the file). The callables block until the 27 denials are in,
// so every denial is decided on reservations, not on settled calls.
func TestConcurrentBudgetWindowChange(t *testing.T) {
	v1 := compilePolicy(t, budgetPolicy(`{calls: 5, window: "1h"}`))
	v2 := compilePolicy(t, budgetPolicy(`{calls: 5, window: "2h"}`))
	for _, l := range budgetLedgers(t) {
		t.Run(l.name, func(t *testing.T) {
			const n, limit = 32, 5
			var denied, ran atomic.Int64
			allDenied := make(chan struct{})
			block := func(context.Context, map[string]any) (any, error) {
				ran.Add(1)
				select {
				case <-allDenied:
				case <-time.After(10 * time.Second): // more calls ran than the budget allows
				}
				return "done", nil
			}
			var rigs [2]*budgetRig
			for i, snap := range []*snapshot.Snapshot{v1, v2} {
				ledger := l.open()
				rigs[i] = newBudgetRig(t, snap, block, func(c *executor.Config) { c.Budgets = ledger })
				rigs[i].clock.set(budgetT0.Add(10 * time.Minute))
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					r := rigs[i%2]
					<-start
					out := r.run(r.ctx(executor.ProfileMinimal), "work")
					switch {
					case budgetDenied(out):
						if denied.Add(1) == n-limit {
							close(allDenied)
						}
					case out.Kind() != executor.KindSucceeded:
						t.Errorf("attempt %d: %s %s (%s)", i, out.Kind(), out.Base().ReasonCode, lastDetail(out))
					}
				})
			}
			close(start)
			wg.Wait()
			if ran.Load() != limit || denied.Load() != n-limit {
				t.Fatalf("%d calls ran and %d were denied across the window change; want %d and %d", ran.Load(), denied.Load(), limit, n-limit)
			}
			u, err := l.open().Usage(context.Background(), executor.BudgetKey{Tenant: "acme", Principal: "agent:a", PolicyID: v1.PolicyID}, 2*hourUS, budgetT0)
			if err != nil || u.Calls != limit {
				t.Errorf("usage in the 2h window %+v (%v), want %d calls", u, err, limit)
			}
		})
	}
}

// TestBudgetWindowChangeSurvivesRestart: on SQLite the account outlives
// the process and the version: v1 (1h) uses its 2 calls, the store is
// closed, and v2 (2h) on the reopened file is denied within the 2h
// window that holds them.
func TestBudgetWindowChangeSurvivesRestart(t *testing.T) {
	v1 := compilePolicy(t, budgetPolicy(`{calls: 2, window: "1h"}`))
	v2 := compilePolicy(t, budgetPolicy(`{calls: 2, window: "2h"}`))
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := statestore.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	if ran := runAt(t, v1, st, budgetT0.Add(10*time.Minute), 2); ran != 2 {
		t.Fatalf("v1 ran %d, want 2", ran)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openState(t, path)
	if ran := runAt(t, v2, st, budgetT0.Add(90*time.Minute), 1); ran != 0 {
		t.Error("v2 ran a third call after a restart, within the 2h window of v1's two")
	}
	if ran := runAt(t, v2, st, budgetT0.Add(2*time.Hour), 1); ran != 1 {
		t.Error("v2 did not start again in the next 2h window")
	}
}
