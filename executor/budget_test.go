package executor_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/chain"
	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// budgetPolicy is a policy allowing "work" (and "other", which its
// approval escalates) under budgets.
func budgetPolicy(budgets string) string {
	return `package p
policies: b: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: {
		allow: ["work", "other"]
		approve: [{pattern: "other", approver: "lead", expires_after: "1h"}]
	}
	budgets: ` + budgets + `
}
`
}

// budgetClock is a clock the test sets; the callable may advance it (its
// call then lasts that long).
type budgetClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *budgetClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *budgetClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *budgetClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// budgetRig is an executor whose "work" action runs fn.
type budgetRig struct {
	exec  *executor.Executor
	snap  *snapshot.Snapshot
	clock *budgetClock
	calls atomic.Int64
}

// budgetIDs numbers the ids of every budget rig: a restarted one must not
// reuse its predecessor's attempt or chain ids.
var budgetIDs atomic.Int64

var budgetT0 = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)

func newBudgetRig(t testing.TB, snap *snapshot.Snapshot, fn executor.Callable, mutate func(*executor.Config)) *budgetRig {
	t.Helper()
	r := &budgetRig{snap: snap, clock: &budgetClock{t: budgetT0}}
	reg := executor.NewRegistry()
	for _, id := range []string{"work", "other"} {
		if err := reg.Register(normalize.ActionDescriptor{ID: id, Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(`{"type":"object"}`)}, func(ctx context.Context, args map[string]any) (any, error) {
			r.calls.Add(1)
			if fn == nil {
				return "done", nil
			}
			return fn(ctx, args)
		}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}, Now: r.clock.now,
		IDs: func() string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", budgetIDs.Add(1)) }}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := executor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.exec = e
	return r
}

func (r *budgetRig) ctx(profile executor.Profile) executor.ExecutionContext {
	var scope executor.ExecutionScope = executor.EphemeralScope{ID: "s"}
	if profile == executor.ProfileDurable {
		scope = executor.DurableRunScope{RunID: "run"}
	}
	return executor.ExecutionContext{ContextID: "c", Scope: scope, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "acme", Workspace: "/ws", Policy: executor.SnapshotRefOf(r.snap), Backend: executor.InProcessBackendName, Profile: profile}
}

func (r *budgetRig) run(ec executor.ExecutionContext, action string) executor.Outcome {
	id := fmt.Sprintf("req-%d", budgetIDs.Add(1))
	return r.exec.Execute(context.Background(), executor.ExecutionRequest{RequestID: id, Action: action, Scope: ec.Scope}, ec)
}

// budgetDenied reports whether out is a denial by the budget facet.
func budgetDenied(out executor.Outcome) bool {
	return out.Kind() == executor.KindDenied && out.Base().ReasonCode == "not_allowed:budget"
}

// lastDetail is the detail of out's last trail entry before stage 14
// (persistence): the one that decided.
func lastDetail(out executor.Outcome) string {
	tr := out.Base().Trail
	for i := len(tr) - 1; i >= 0; i-- {
		if tr[i].Stage < 14 {
			return tr[i].Detail
		}
	}
	return ""
}

// TestConcurrentBudgetCalls: 32 concurrent attempts against calls: 5 —
// exactly 5 calls run and the other 27 are denied by the budget, on the
// in-memory ledger and on the SQLite one. The 5 callables block until the
// 27 denials are in, so the denials are decided while no call has
// settled: the calls are counted when admitted, not when they end.
// Before the ledger, every attempt was judged on usage 0 and all 32 ran.
func TestConcurrentBudgetCalls(t *testing.T) {
	snap := compilePolicy(t, budgetPolicy(`{calls: 5, window: "1h"}`))
	for _, tc := range []struct {
		name    string
		profile executor.Profile
		ledger  func(t *testing.T) (executor.BudgetLedger, executor.StateStore)
	}{
		{"memory", executor.ProfileMinimal, func(*testing.T) (executor.BudgetLedger, executor.StateStore) {
			return executor.NewMemoryLedger(), nil
		}},
		{"sqlite", executor.ProfileDurable, func(t *testing.T) (executor.BudgetLedger, executor.StateStore) {
			st := openState(t, filepath.Join(t.TempDir(), "state.db"))
			return st, st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n, limit = 32, 5
			var denied atomic.Int64
			allDenied := make(chan struct{})
			ledger, state := tc.ledger(t)
			r := newBudgetRig(t, snap, func(ctx context.Context, _ map[string]any) (any, error) {
				select {
				case <-allDenied:
				case <-time.After(10 * time.Second): // more calls ran than the budget allows
				}
				return "done", nil
			}, func(c *executor.Config) { c.Budgets, c.State = ledger, state })
			ec := r.ctx(tc.profile)
			start := make(chan struct{})
			outs := make([]executor.Outcome, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					outs[i] = r.run(ec, "work")
					if budgetDenied(outs[i]) && denied.Add(1) == n-limit {
						close(allDenied)
					}
				})
			}
			close(start)
			wg.Wait()
			succeeded := 0
			for i, out := range outs {
				switch {
				case out.Kind() == executor.KindSucceeded:
					succeeded++
				case !budgetDenied(out):
					t.Errorf("attempt %d: %s %s (%s), want succeeded or denied by the budget", i, out.Kind(), out.Base().ReasonCode, lastDetail(out))
				case !strings.Contains(lastDetail(out), " of 5"):
					t.Errorf("attempt %d: detail %q does not give the usage", i, lastDetail(out))
				}
				if out.Base().StateError != nil {
					t.Errorf("attempt %d: state error %v", i, out.Base().StateError)
				}
			}
			if succeeded != limit || r.calls.Load() != limit || denied.Load() != n-limit {
				t.Fatalf("%d succeeded, %d calls ran, %d denied by the budget; want %d, %d, %d", succeeded, r.calls.Load(), denied.Load(), limit, limit, n-limit)
			}
			u, err := ledger.Usage(context.Background(), executor.BudgetKey{Tenant: "acme", Principal: "agent:a", PolicyID: snap.PolicyID},
				int64(time.Hour/time.Microsecond), budgetT0)
			if err != nil || u.Calls != limit {
				t.Fatalf("ledger usage %+v (%v), want %d calls: the denied attempts' reservations are released", u, err, limit)
			}
		})
	}
}

// TestBudgetWindowExpires: calls: 2 per hour on a pinned clock — the third
// call is denied until the clock reaches the next window (fixed windows
// from the epoch: 12:00 to 13:00), then allowed.
func TestBudgetWindowExpires(t *testing.T) {
	r := newBudgetRig(t, compilePolicy(t, budgetPolicy(`{calls: 2, window: "1h"}`)), nil, nil)
	ec := r.ctx(executor.ProfileMinimal)
	r.clock.set(budgetT0.Add(10 * time.Minute))
	for i := range 2 {
		if out := r.run(ec, "work"); out.Kind() != executor.KindSucceeded {
			t.Fatalf("call %d: %s %s", i, out.Kind(), out.Base().ReasonCode)
		}
	}
	out := r.run(ec, "work")
	if !budgetDenied(out) {
		t.Fatalf("third call: %s %s, want denied by the budget", out.Kind(), out.Base().ReasonCode)
	}
	want := "gate polc.default: not_allowed:budget; used in the window from 2026-03-15T12:00:00Z (1h0m0s): calls 2 of 2"
	if d := lastDetail(out); d != want {
		t.Errorf("detail %q, want %q", d, want)
	}
	r.clock.set(budgetT0.Add(time.Hour - time.Microsecond))
	if out := r.run(ec, "work"); !budgetDenied(out) {
		t.Fatalf("a microsecond before the window ends: %s %s, want denied", out.Kind(), out.Base().ReasonCode)
	}
	r.clock.set(budgetT0.Add(time.Hour))
	out = r.run(ec, "work")
	if out.Kind() != executor.KindSucceeded {
		t.Fatalf("in the next window: %s %s (%s), want succeeded", out.Kind(), out.Base().ReasonCode, lastDetail(out))
	}
	if r.calls.Load() != 3 {
		t.Errorf("%d calls ran, want 3", r.calls.Load())
	}
}

// TestBudgetSurvivesRestart: the durable and governed profiles account on
// the SQLite ledger, so a new executor (a restarted process) on the same
// file judges the calls the old one made: the third call over calls: 2 is
// denied. The in-memory ledger of the minimal profile starts again.
func TestBudgetSurvivesRestart(t *testing.T) {
	snap := compilePolicy(t, budgetPolicy(`{calls: 2}`))
	for _, profile := range []executor.Profile{executor.ProfileDurable, executor.ProfileGoverned, executor.ProfileMinimal} {
		t.Run(string(profile), func(t *testing.T) {
			dir := t.TempDir()
			session := func() (*budgetRig, executor.ExecutionContext, func()) {
				var closers []func()
				mutate := func(c *executor.Config) {}
				if profile != executor.ProfileMinimal {
					st, err := statestore.OpenSQLite(filepath.Join(dir, "state.db"))
					if err != nil {
						t.Fatal(err)
					}
					closers = append(closers, func() { st.Close() })
					mutate = func(c *executor.Config) {
						c.Budgets = st
						if profile == executor.ProfileDurable {
							c.State = st
						}
					}
				}
				if profile == executor.ProfileGoverned {
					fs, err := chain.OpenFileStore(filepath.Join(dir, "evidence"))
					if err != nil {
						t.Fatal(err)
					}
					closers = append(closers, func() { fs.Close() })
					prev := mutate
					mutate = func(c *executor.Config) { prev(c); c.Evidence = fs }
				}
				r := newBudgetRig(t, snap, nil, mutate)
				ec := r.ctx(profile)
				if profile == executor.ProfileGoverned {
					b, err := r.exec.OpenBoundary(ec.Policy, false)
					if err != nil {
						t.Fatal(err)
					}
					ec.Boundary = b
					closers = append([]func(){func() {
						if _, err := r.exec.CloseBoundary(context.Background(), b); err != nil {
							t.Error(err)
						}
					}}, closers...)
				}
				return r, ec, func() {
					for _, c := range closers {
						c()
					}
				}
			}
			r, ec, stop := session()
			for i := range 2 {
				if out := r.run(ec, "work"); out.Kind() != executor.KindSucceeded {
					t.Fatalf("call %d: %s %s (%s)", i, out.Kind(), out.Base().ReasonCode, lastDetail(out))
				}
			}
			stop()
			r, ec, stop = session()
			defer stop()
			out := r.run(ec, "work")
			if profile == executor.ProfileMinimal {
				if out.Kind() != executor.KindSucceeded {
					t.Fatalf("minimal, after a restart: %s %s; the in-memory ledger starts again", out.Kind(), out.Base().ReasonCode)
				}
				return
			}
			if !budgetDenied(out) || r.calls.Load() != 0 {
				t.Fatalf("after a restart: %s %s (%s), %d calls; want denied by the budget", out.Kind(), out.Base().ReasonCode, lastDetail(out), r.calls.Load())
			}
			if d := lastDetail(out); !strings.Contains(d, "used over the policy's lifetime: calls 2 of 2") {
				t.Errorf("detail %q", d)
			}
		})
	}
}

// TestBudgetCountsOnlyCallsThatRan: attempts refused before their call
// (escalated, denied by another rule, cancelled) give their reservation
// back; a call that ran and failed is counted.
func TestBudgetCountsOnlyCallsThatRan(t *testing.T) {
	fail := false
	r := newBudgetRig(t, compilePolicy(t, budgetPolicy(`{calls: 2}`)), func(context.Context, map[string]any) (any, error) {
		if fail {
			return nil, fmt.Errorf("boom")
		}
		return "done", nil
	}, nil)
	ec := r.ctx(executor.ProfileMinimal)
	for i := range 3 {
		if out := r.run(ec, "other"); out.Kind() != executor.KindEscalated {
			t.Fatalf("other %d: %s, want escalated", i, out.Kind())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out := r.exec.Execute(ctx, executor.ExecutionRequest{RequestID: "c", Action: "work", Scope: ec.Scope}, ec); out.Kind() != executor.KindCancelled {
		t.Fatalf("cancelled attempt: %s", out.Kind())
	}
	fail = true
	if out := r.run(ec, "work"); out.Kind() != executor.KindFailed {
		t.Fatalf("failing call: %s, want failed", out.Kind())
	}
	fail = false
	if out := r.run(ec, "work"); out.Kind() != executor.KindSucceeded {
		t.Fatalf("second call: %s %s (%s), want succeeded", out.Kind(), out.Base().ReasonCode, lastDetail(out))
	}
	if out := r.run(ec, "work"); !budgetDenied(out) {
		t.Fatalf("third call: %s %s, want denied by the budget (a failed call and a success ran)", out.Kind(), out.Base().ReasonCode)
	}
}

// TestBudgetWallAndReportedUsage: wall_microseconds is charged with the
// call's measured duration, tokens with what the callable reports on its
// UsageMeter (and cost with Executor.Charge); the next call is judged on
// them.
func TestBudgetWallAndReportedUsage(t *testing.T) {
	snap := compilePolicy(t, budgetPolicy(`{wall_microseconds: 1000, tokens: 100, cost_microunits: 50}`))
	var r *budgetRig
	var late *executor.UsageMeter
	r = newBudgetRig(t, snap, func(ctx context.Context, _ map[string]any) (any, error) {
		m, ok := executor.UsageMeterFromContext(ctx)
		if !ok {
			return nil, fmt.Errorf("no usage meter")
		}
		if err := m.Add(normalize.Usage{Calls: 1}); err == nil {
			return nil, fmt.Errorf("a callable reported calls")
		}
		if err := m.Add(normalize.Usage{Tokens: -1}); err == nil {
			return nil, fmt.Errorf("a callable reported negative tokens")
		}
		r.clock.advance(600 * time.Microsecond)
		late = m
		return "done", m.Add(normalize.Usage{Tokens: 30})
	}, func(c *executor.Config) { c.ReportedUsage = []string{"tokens", "cost_microunits"} })
	ec := r.ctx(executor.ProfileMinimal)
	out := r.run(ec, "work")
	if out.Kind() != executor.KindSucceeded {
		t.Fatalf("first call: %s %s (%s)", out.Kind(), out.Base().ReasonCode, lastDetail(out))
	}
	if err := late.Add(normalize.Usage{Tokens: 1000}); err == nil {
		t.Fatal("a report after the callable returned was taken")
	}
	out = r.run(ec, "work")
	if out.Kind() != executor.KindSucceeded {
		t.Fatalf("second call: %s %s (%s)", out.Kind(), out.Base().ReasonCode, lastDetail(out))
	}
	// 1200 µs of wall time used: the third call is denied.
	out = r.run(ec, "work")
	if !budgetDenied(out) || !strings.Contains(lastDetail(out), "cost_microunits 0 of 50, tokens 60 of 100, wall_microseconds 1200 of 1000") {
		t.Fatalf("third call: %s %s (%s), want denied on wall time", out.Kind(), out.Base().ReasonCode, lastDetail(out))
	}
	// Cost charged outside any action counts as well.
	if err := r.exec.Charge(context.Background(), ec, normalize.Usage{CostMicrounits: 50}); err != nil {
		t.Fatal(err)
	}
	if err := r.exec.Charge(context.Background(), ec, normalize.Usage{Tokens: -5}); err == nil {
		t.Error("a negative charge was taken")
	}
	out = r.run(ec, "work")
	if !strings.Contains(lastDetail(out), "cost_microunits 50 of 50") {
		t.Errorf("after Charge: detail %q", lastDetail(out))
	}
}

// TestBudgetUnaccountedKindRefused: a policy limiting tokens on an
// executor that does not say it reports them could never bind its limit:
// every attempt is refused at stage 3, before its call.
func TestBudgetUnaccountedKindRefused(t *testing.T) {
	r := newBudgetRig(t, compilePolicy(t, budgetPolicy(`{calls: 10, tokens: 100}`)), nil, nil)
	out := r.run(r.ctx(executor.ProfileMinimal), "work")
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != executor.ReasonBudgetUnaccounted || r.calls.Load() != 0 {
		t.Fatalf("%s %s, %d calls; want denied budget_unaccounted before the call", out.Kind(), out.Base().ReasonCode, r.calls.Load())
	}
	if d := lastDetail(out); !strings.Contains(d, "limits tokens") {
		t.Errorf("detail %q does not name tokens", d)
	}
	if _, err := executor.New(executor.Config{Registry: executor.NewRegistry(), ReportedUsage: []string{"token"}}); err == nil {
		t.Error("New took ReportedUsage \"token\"")
	}
}

// TestBudgetPersistentProfilesNeedPersistentLedger: the durable and
// governed profiles promise that what they account survives a restart;
// on the in-memory ledger a policy with budgets is refused.
func TestBudgetPersistentProfilesNeedPersistentLedger(t *testing.T) {
	snap := compilePolicy(t, budgetPolicy(`{calls: 10}`))
	st := openState(t, filepath.Join(t.TempDir(), "state.db"))
	r := newBudgetRig(t, snap, nil, func(c *executor.Config) { c.State = st })
	out := r.run(r.ctx(executor.ProfileDurable), "work")
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "profile_unavailable" || r.calls.Load() != 0 {
		t.Fatalf("%s %s (%s); want profile_unavailable", out.Kind(), out.Base().ReasonCode, lastDetail(out))
	}
}

func TestBudgetWindowStart(t *testing.T) {
	hour := int64(time.Hour / time.Microsecond)
	for _, c := range []struct {
		t    time.Time
		want time.Time
	}{
		{budgetT0.Add(59 * time.Minute), budgetT0},
		{budgetT0, budgetT0},
		{time.Date(1969, 12, 31, 23, 30, 0, 0, time.UTC), time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC)},
	} {
		if got := executor.BudgetWindowStart(c.t, hour); got != c.want.UnixMicro() {
			t.Errorf("window of %s starts at %s, want %s", c.t, time.UnixMicro(got).UTC(), c.want)
		}
	}
	if got := executor.BudgetWindowStart(budgetT0, 0); got != 0 {
		t.Errorf("the lifetime starts at %d", got)
	}
}

// TestBudgetEnginesAgree: the usage the executor accounts reaches the
// decision as the normalized request's usage, which the Rego bundle judges
// as the native evaluator does: both agree on every kind below, at and
// over its limit, under a hard and under a soft budget gate.
func TestBudgetEnginesAgree(t *testing.T) {
	ctx := context.Background()
	for _, gates := range []string{"", `gates: [{id: "spend", level: "soft", rules: ["budget.*"]}]`} {
		snap := compilePolicy(t, strings.Replace(budgetPolicy(`{calls: 3, tokens: 100, cost_microunits: 50, wall_microseconds: 1000, window: "1h"}`),
			"\tbudgets:", "\t"+gates+"\n\tbudgets:", 1))
		bb, err := compiler.WriteBundle([]*snapshot.Snapshot{snap}, nil)
		if err != nil {
			t.Fatal(err)
		}
		eng, err := regoeval.New(ctx, bb)
		if err != nil {
			t.Fatal(err)
		}
		pol, err := decision.Compile(snap)
		if err != nil {
			t.Fatal(err)
		}
		limits := normalize.Usage{Calls: 3, Tokens: 100, CostMicrounits: 50, WallMicroseconds: 1000}
		denied := 0
		for _, kind := range snapshot.BudgetKinds {
			for _, delta := range []int64{-1, 0, 1} {
				u := normalize.Usage{}
				switch kind {
				case "calls":
					u.Calls = limits.Calls + delta
				case "tokens":
					u.Tokens = limits.Tokens + delta
				case "cost_microunits":
					u.CostMicrounits = limits.CostMicrounits + delta
				case "wall_microseconds":
					u.WallMicroseconds = limits.WallMicroseconds + delta
				}
				req := &normalize.Normalized{Principal: "agent:a", Tenant: "acme", Action: "work", Workspace: "/ws",
					Time: "2026-03-15T12:00:00.000000Z", Paths: []normalize.PathAccess{}, Commands: [][]string{}, Hosts: []string{},
					Env: []string{}, Secrets: []string{}, Usage: u}
				nat, _ := pol.Evaluate(req)
				opa, err := eng.Evaluate(ctx, snap.Name, req)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(nat, opa, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s %+v: engines disagree (-native +opa):\n%s", gates, u, diff)
				}
				if want := delta >= 0; (nat.Disposition == decision.Deny) != want {
					t.Errorf("%s %+v: native %s", gates, u, nat.Disposition)
				}
				if nat.Disposition == decision.Deny {
					denied++
				}
			}
		}
		if denied != 8 {
			t.Errorf("%s: %d denials, want 8 (each kind at and over its limit)", gates, denied)
		}
	}
}

// TestBudgetNegativeContextUsageRefused: the context's usage is added to
// the ledger's; a negative member would hand back used budget.
func TestBudgetNegativeContextUsageRefused(t *testing.T) {
	r := newBudgetRig(t, compilePolicy(t, budgetPolicy(`{calls: 1}`)), nil, nil)
	ec := r.ctx(executor.ProfileMinimal)
	if out := r.run(ec, "work"); out.Kind() != executor.KindSucceeded {
		t.Fatalf("first call: %s", out.Kind())
	}
	ec.Usage = normalize.Usage{Calls: -1}
	out := r.run(ec, "work")
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidRequest || r.calls.Load() != 1 {
		t.Fatalf("%s %s (%s), %d calls; want invalid_request before the call", out.Kind(), out.Base().ReasonCode, lastDetail(out), r.calls.Load())
	}
}

// failingLedger is a MemoryLedger whose Reserve or Settle fails.
type failingLedger struct {
	*executor.MemoryLedger
	reserve, settle bool
}

func (l *failingLedger) Reserve(ctx context.Context, key executor.BudgetKey, window int64, now time.Time) (executor.BudgetReservation, normalize.Usage, error) {
	if l.reserve {
		return executor.BudgetReservation{}, normalize.Usage{}, fmt.Errorf("disk I/O error")
	}
	return l.MemoryLedger.Reserve(ctx, key, window, now)
}

func (l *failingLedger) Settle(ctx context.Context, r executor.BudgetReservation, u normalize.Usage) error {
	if l.settle {
		return fmt.Errorf("disk I/O error")
	}
	return l.MemoryLedger.Settle(ctx, r, u)
}

// TestBudgetLedgerFailures: a ledger that cannot count the call denies it
// (budget_unavailable) before the call; one that cannot settle it after
// the call leaves the outcome and says so in its StateError and trail.
func TestBudgetLedgerFailures(t *testing.T) {
	l := &failingLedger{MemoryLedger: executor.NewMemoryLedger(), reserve: true}
	r := newBudgetRig(t, compilePolicy(t, budgetPolicy(`{calls: 5}`)), nil, func(c *executor.Config) { c.Budgets = l })
	ec := r.ctx(executor.ProfileMinimal)
	out := r.run(ec, "work")
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != executor.ReasonBudgetUnavailable || r.calls.Load() != 0 {
		t.Fatalf("reserve fails: %s %s, %d calls; want budget_unavailable before the call", out.Kind(), out.Base().ReasonCode, r.calls.Load())
	}
	l.reserve, l.settle = false, true
	out = r.run(ec, "work")
	tr := out.Base().Trail
	if out.Kind() != executor.KindSucceeded || out.Base().StateError == nil || tr[len(tr)-1].Result != executor.TrailPersistFailed ||
		!strings.Contains(tr[len(tr)-1].Detail, "budget usage not recorded") {
		t.Fatalf("settle fails: %s, state error %v, last trail %+v", out.Kind(), out.Base().StateError, tr[len(tr)-1])
	}
}
