package executor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"polc.dev/polc/snapshot"
)

// BudgetKey is whose usage a policy's budgets count: one principal of one
// tenant under one policy. The policy counts by id, not by version or
// digest, so that a new version of a policy (a lowered limit, say) goes
// on judging what was consumed under the old one.
type BudgetKey struct {
	Tenant string
	// Principal is the authenticated principal as Principal.String
	// writes it ("kind:id").
	Principal string
	PolicyID  string
}

// BudgetReservation is one call a BudgetLedger counted at admission, to
// be settled (the call ran) or released (it did not).
type BudgetReservation struct {
	Key BudgetKey
	// WindowMicroseconds is the window's length; 0 is the policy's
	// lifetime (no window).
	WindowMicroseconds int64
	// WindowStart is the start of the window the call was counted in, in
	// microseconds since the Unix epoch (0 for the lifetime).
	WindowStart int64
}

// BudgetLedger accounts the usage a policy's budgets are judged on
// (Config.Budgets). Usage is kept per key and fixed window: the windows of
// a length w are [k·w, (k+1)·w) in microseconds since the Unix epoch, and
// a key's usage is that of the window now falls in (window 0: every
// charge, ever). A window never moves back: when now falls before the
// window a key last counted in (a clock stepped back), that later window
// is the one counted in. Implementations are safe for concurrent use, and
// Reserve is atomic: two reservations never see the same count.
type BudgetLedger interface {
	// Reserve counts one call for key and returns the usage before it:
	// the calls include reservations not yet settled or released.
	Reserve(ctx context.Context, key BudgetKey, window int64, now time.Time) (BudgetReservation, Usage, error)
	// Settle ends a reservation whose call ran, adding u (what the call
	// consumed beyond the reserved call: the executor passes Calls 0) to
	// the reservation's window. A window that has ended since is left
	// as it is: nothing judges it any more.
	Settle(ctx context.Context, r BudgetReservation, u Usage) error
	// Release ends a reservation whose call did not run: its call is no
	// longer counted (unless its window has ended since).
	Release(ctx context.Context, r BudgetReservation) error
	// Charge adds u to key's current window outside any call
	// (Executor.Charge).
	Charge(ctx context.Context, key BudgetKey, window int64, now time.Time, u Usage) error
	// Usage returns key's usage in the window now falls in.
	Usage(ctx context.Context, key BudgetKey, window int64, now time.Time) (Usage, error)
	// Persistent reports whether the usage survives a restart of the
	// process. The durable, governed and certifiable profiles refuse to
	// judge budgets on a ledger that does not (profile_unavailable).
	Persistent() bool
}

// BudgetWindowStart is the start, in microseconds since the Unix epoch, of
// the fixed window of length window (microseconds; 0: the policy's
// lifetime, which starts at 0) that now falls in.
func BudgetWindowStart(now time.Time, window int64) int64 {
	if window <= 0 {
		return 0
	}
	us := now.UnixMicro()
	start := us - us%window
	if us%window < 0 { // before the epoch: round down, not toward zero
		start -= window
	}
	return start
}

// CheckUsage refuses a charge that no ledger may add: a negative member.
func CheckUsage(u Usage) error {
	for _, k := range snapshot.BudgetKinds {
		if u.Of(k) < 0 {
			return fmt.Errorf("usage: %s is negative (%d)", k, u.Of(k))
		}
	}
	return nil
}

// Plus is u + v member by member, saturating at the largest int64 rather
// than wrapping: a sum past any limit stays past it.
func (u Usage) Plus(v Usage) Usage {
	return Usage{Calls: satAdd(u.Calls, v.Calls), Tokens: satAdd(u.Tokens, v.Tokens),
		CostMicrounits: satAdd(u.CostMicrounits, v.CostMicrounits), WallMicroseconds: satAdd(u.WallMicroseconds, v.WallMicroseconds)}
}

// satAdd adds two int64 values, saturating at either end.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// MemoryLedger is the default BudgetLedger: usage in the process's memory,
// lost when it exits (so only the minimal profile judges budgets on it).
// It keeps one window's usage per key and window length.
type MemoryLedger struct {
	mu   sync.Mutex
	rows map[memoryRowKey]*memoryRow
}

type memoryRowKey struct {
	key    BudgetKey
	window int64
}

type memoryRow struct {
	start int64
	u     Usage
}

var _ BudgetLedger = (*MemoryLedger)(nil)

// NewMemoryLedger returns an empty in-memory ledger.
func NewMemoryLedger() *MemoryLedger { return &MemoryLedger{rows: map[memoryRowKey]*memoryRow{}} }

// row returns key's row for the window now falls in, starting it afresh
// when the row's window has ended. Precondition: m.mu is held.
func (m *MemoryLedger) row(key BudgetKey, window int64, now time.Time) *memoryRow {
	start := BudgetWindowStart(now, window)
	k := memoryRowKey{key, window}
	r := m.rows[k]
	if r == nil {
		r = &memoryRow{start: start}
		m.rows[k] = r
	} else if r.start < start {
		*r = memoryRow{start: start}
	}
	return r
}

// Reserve implements BudgetLedger.
func (m *MemoryLedger) Reserve(_ context.Context, key BudgetKey, window int64, now time.Time) (BudgetReservation, Usage, error) {
	if window < 0 {
		return BudgetReservation{}, Usage{}, fmt.Errorf("budget window %d: negative", window)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.row(key, window, now)
	before := r.u
	r.u.Calls = satAdd(r.u.Calls, 1)
	return BudgetReservation{Key: key, WindowMicroseconds: window, WindowStart: r.start}, before, nil
}

// Settle implements BudgetLedger.
func (m *MemoryLedger) Settle(_ context.Context, res BudgetReservation, u Usage) error {
	if err := CheckUsage(u); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.rows[memoryRowKey{res.Key, res.WindowMicroseconds}]; r != nil && r.start == res.WindowStart {
		r.u = r.u.Plus(u)
	}
	return nil
}

// Release implements BudgetLedger.
func (m *MemoryLedger) Release(_ context.Context, res BudgetReservation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.rows[memoryRowKey{res.Key, res.WindowMicroseconds}]; r != nil && r.start == res.WindowStart && r.u.Calls > 0 {
		r.u.Calls--
	}
	return nil
}

// Charge implements BudgetLedger.
func (m *MemoryLedger) Charge(_ context.Context, key BudgetKey, window int64, now time.Time, u Usage) error {
	if err := CheckUsage(u); err != nil {
		return err
	}
	if window < 0 {
		return fmt.Errorf("budget window %d: negative", window)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.row(key, window, now)
	r.u = r.u.Plus(u)
	return nil
}

// Usage implements BudgetLedger.
func (m *MemoryLedger) Usage(_ context.Context, key BudgetKey, window int64, now time.Time) (Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rows[memoryRowKey{key, window}]
	if r == nil || r.start < BudgetWindowStart(now, window) {
		return Usage{}, nil
	}
	return r.u, nil
}

// Persistent implements BudgetLedger: memory does not survive a restart.
func (m *MemoryLedger) Persistent() bool { return false }

// Budget reason codes (stage 3 and 7).
const (
	// ReasonBudgetUnaccounted: the policy limits a budget kind this
	// executor does not account (tokens or cost_microunits not listed in
	// Config.ReportedUsage), so its limit could never bind.
	ReasonBudgetUnaccounted = "budget_unaccounted"
	// ReasonBudgetUnavailable: the ledger failed to count the call.
	ReasonBudgetUnavailable = "budget_unavailable"
)

// accountedKinds are the budget kinds the executor charges itself: a call
// per call that ran, and the call's measured duration.
var accountedKinds = []string{"calls", "wall_microseconds"}

// policyBudget is what the executor needs to account a policy's budgets.
type policyBudget struct {
	window int64 // microseconds; 0: the policy's lifetime
	limits []budgetLimit
	// unaccounted are the limited kinds this executor does not account.
	unaccounted []string
}

type budgetLimit struct {
	kind  string
	limit int64
}

// budgetOf returns the policy's budget (nil when it has none), refusing a
// snapshot whose budget rules differ in window: usage is counted in one
// window per policy. reported are Config.ReportedUsage.
func budgetOf(s *snapshot.Snapshot, reported []string) (*policyBudget, error) {
	var b *policyBudget
	for _, r := range s.CompiledRules {
		br, ok := r.(*snapshot.BudgetRule)
		if !ok {
			continue
		}
		var w int64
		if br.WindowMicroseconds != nil {
			w = *br.WindowMicroseconds
		}
		if b == nil {
			b = &policyBudget{window: w}
		} else if w != b.window {
			return nil, fmt.Errorf("budget rules with different windows (%d and %d µs): usage is counted in one window per policy", b.window, w)
		}
		b.limits = append(b.limits, budgetLimit{br.BudgetKind, br.Limit})
		if !slices.Contains(accountedKinds, br.BudgetKind) && !slices.Contains(reported, br.BudgetKind) && !slices.Contains(b.unaccounted, br.BudgetKind) {
			b.unaccounted = append(b.unaccounted, br.BudgetKind)
		}
	}
	if b != nil {
		order := func(k string) int { return slices.Index(snapshot.BudgetKinds, k) }
		slices.SortStableFunc(b.limits, func(x, y budgetLimit) int { return order(x.kind) - order(y.kind) })
		slices.SortFunc(b.unaccounted, func(x, y string) int { return order(x) - order(y) })
	}
	return b, nil
}

// checkReported validates Config.ReportedUsage.
func checkReported(kinds []string) error {
	for _, k := range kinds {
		if !slices.Contains(snapshot.BudgetKinds, k) {
			return fmt.Errorf("executor: ReportedUsage %q: want one of %s", k, strings.Join(snapshot.BudgetKinds, ", "))
		}
	}
	return nil
}

// detail is the trail's account of usage u against the limits: "used in
// the window from T (1h0m0s): calls 2 of 2".
func (b *policyBudget) detail(u Usage, start int64) string {
	var sb strings.Builder
	if b.window == 0 {
		sb.WriteString("used over the policy's lifetime: ")
	} else {
		sb.WriteString("used in the window from ")
		sb.WriteString(time.UnixMicro(start).UTC().Format(time.RFC3339Nano))
		sb.WriteString(" (")
		sb.WriteString((time.Duration(b.window) * time.Microsecond).String())
		sb.WriteString("): ")
	}
	for i, l := range b.limits {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(l.kind)
		sb.WriteByte(' ')
		sb.WriteString(strconv.FormatInt(u.Of(l.kind), 10))
		sb.WriteString(" of ")
		sb.WriteString(strconv.FormatInt(l.limit, 10))
	}
	return sb.String()
}

// UsageMeter takes what a call consumed of the budget kinds the executor
// cannot see (tokens, cost_microunits): the callable reports them with Add
// while it runs, and the executor charges them when the call ends. Its
// calls and wall time the executor counts itself.
type UsageMeter struct {
	mu     sync.Mutex
	u      Usage
	closed bool
}

// Add reports tokens and cost the call consumed (Calls and
// WallMicroseconds must be 0: the executor counts and measures the call).
// It fails for a negative member and once the callable has returned (a
// goroutine it left behind reports to a call that is settled).
func (m *UsageMeter) Add(u Usage) error {
	if err := CheckUsage(u); err != nil {
		return err
	}
	if u.Calls != 0 || u.WallMicroseconds != 0 {
		return errors.New("usage: calls and wall_microseconds are counted by the executor, not reported")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("usage: the callable has returned; its call is settled")
	}
	m.u = m.u.Plus(u)
	return nil
}

// take closes the meter and returns what was reported (nothing for a nil
// meter).
func (m *UsageMeter) take() Usage {
	if m == nil {
		return Usage{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return m.u
}

type usageMeterKey struct{}

// UsageMeterFromContext returns the UsageMeter of the call whose callable
// ctx was given to, and false when the call's policy has no budgets
// (nothing would be judged on a report).
func UsageMeterFromContext(ctx context.Context) (*UsageMeter, bool) {
	m, ok := ctx.Value(usageMeterKey{}).(*UsageMeter)
	return m, ok
}

// Charge adds usage consumed outside any action — the tokens and cost of
// the model the runtime drives, say — to the budgets of ec's principal,
// tenant and policy, in the window the executor's clock is in. It fails
// for a negative member, a context whose policy is not one of
// Config.Policies, or a ledger error; a policy without budgets is
// charged nothing.
func (e *Executor) Charge(ctx context.Context, ec ExecutionContext, u Usage) error {
	if err := CheckUsage(u); err != nil {
		return err
	}
	p, err := e.policy(ec.Policy)
	if err != nil {
		return err
	}
	if p.budget == nil {
		return nil
	}
	key := BudgetKey{Tenant: ec.Tenant, Principal: ec.Principal.String(), PolicyID: p.snap.PolicyID}
	return e.cfg.Budgets.Charge(ctx, key, p.budget.window, e.now(), u)
}

// checkBudget is stage 3's part for budgets: a negative context usage, a
// limit the executor cannot account, or usage a restart would reset under
// a profile that promises persistence, refuses the attempt before
// anything runs.
func (a *attempt) checkBudget() Outcome {
	b := a.pol.budget
	if err := CheckUsage(a.ec.Usage); err != nil {
		// Added to the ledger's, a negative usage would hand back
		// budget that was used.
		return a.deny(3, ReasonInvalidRequest, "the context's %v", err)
	}
	switch {
	case b == nil:
	case len(b.unaccounted) > 0:
		return a.deny(3, ReasonBudgetUnaccounted, "the policy limits %s, which this executor does not account: it counts calls and wall_microseconds itself, and tokens and cost_microunits only when they are reported (Config.ReportedUsage; a polc run or serve session's reported_usage)", strings.Join(b.unaccounted, " and "))
	case a.ec.Profile != ProfileMinimal && !a.e.cfg.Budgets.Persistent():
		return a.deny(3, "profile_unavailable", "profile %s: the policy has budgets and Config.Budgets keeps their usage in memory, which a restart would reset", a.ec.Profile)
	}
	return nil
}

// reserveBudget counts this call in the ledger before the policy judges
// it, and gives the policy the usage before it (plus the context's own):
// concurrent attempts each see the calls admitted before them, so no two
// are judged on the same count.
func (a *attempt) reserveBudget() Outcome {
	b := a.pol.budget
	key := BudgetKey{Tenant: a.ec.Tenant, Principal: a.principal, PolicyID: a.pol.snap.PolicyID}
	r, u, err := a.e.cfg.Budgets.Reserve(a.ctx, key, b.window, a.startedAt)
	if err != nil {
		if a.ctx.Err() != nil {
			return a.cancelled(7)
		}
		return a.deny(7, ReasonBudgetUnavailable, "budget ledger: %v", err)
	}
	a.resv, a.reserved = r, true
	a.usage = a.ec.Usage.Plus(u)
	a.normv.Usage = a.usage
	return nil
}

// settleBudget ends the attempt's reservation: settled with the measured
// wall time and the reported usage when the call ran, released when it
// did not. A ledger error is the outcome's StateError (out is nil only
// while a panic of the executor unwinds).
func (a *attempt) settleBudget(out Outcome) {
	ctx := context.WithoutCancel(a.ctx)
	var err error
	if a.base.CallExecuted {
		u := a.meter.take()
		u.WallMicroseconds = a.callDur
		err = a.e.cfg.Budgets.Settle(ctx, a.resv, u)
	} else {
		err = a.e.cfg.Budgets.Release(ctx, a.resv)
	}
	if err == nil || out == nil {
		return
	}
	b := out.Base()
	b.Trail = append(b.Trail, TrailEntry{Stage: 14, Result: TrailPersistFailed, Detail: "budget usage not recorded: " + err.Error()})
	if b.StateError == nil {
		b.StateError = err
	}
}
