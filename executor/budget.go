package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"polc.dev/polc/internal/satint"
	"polc.dev/polc/normalize"
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
// (Config.Budgets). Usage is recorded per key in fixed windows of the
// length the policy had when it was recorded: the windows of a length w
// are [k·w, (k+1)·w) in microseconds since the Unix epoch (w 0: the
// policy's lifetime). The usage judged for the window [S, S+W) that now
// falls in is every usage of the key recorded in a window that overlaps
// it, whatever that window's length, so that a new version of a policy
// with another window goes on with the account; BudgetAccount gives the
// rules, and both ledgers of this module keep one per key. A window never
// moves back: when now falls before the latest window a key recorded in
// (a clock stepped back), the key's clock stays there. Implementations
// are safe for concurrent use, and Reserve is atomic: two reservations
// never see the same count.
type BudgetLedger interface {
	// Reserve counts one call for key and returns the usage before it:
	// the calls include reservations not yet settled or released.
	Reserve(ctx context.Context, key BudgetKey, window int64, now time.Time) (BudgetReservation, normalize.Usage, error)
	// Settle ends a reservation whose call ran, adding u (what the call
	// consumed beyond the reserved call: the executor passes Calls 0) to
	// the reservation's window, or to the key's past when that window
	// has been folded into it since (BudgetAccount.Adjust).
	Settle(ctx context.Context, r BudgetReservation, u normalize.Usage) error
	// Release ends a reservation whose call did not run: its call is no
	// longer counted, in its window or in the past it was folded into.
	Release(ctx context.Context, r BudgetReservation) error
	// Charge adds u to key's current window outside any call
	// (Executor.Charge).
	Charge(ctx context.Context, key BudgetKey, window int64, now time.Time, u normalize.Usage) error
	// Usage returns the usage judged for key in the window of length
	// window that now falls in.
	Usage(ctx context.Context, key BudgetKey, window int64, now time.Time) (normalize.Usage, error)
	// Persistent reports whether the usage survives a restart of the
	// process. The durable, governed and certifiable profiles refuse to
	// judge budgets on a ledger that does not (profile_unavailable).
	Persistent() bool
}

// BudgetBucket is the usage a key recorded in one fixed window,
// [Start, Start+Window) in microseconds since the Unix epoch.
type BudgetBucket struct {
	Window int64 // > 0
	Start  int64
	Usage  normalize.Usage
}

// end is the bucket's window's end (exclusive).
func (b BudgetBucket) end() int64 { return satint.Add(b.Start, b.Window) }

// BudgetAccount is what a ledger keeps for one BudgetKey, and the rules it
// judges by; MemoryLedger and statestore.SQLite both use it, so that they
// judge alike.
//
// The account is not keyed by the window's length: a policy's new version
// with another window judges the usage recorded under the old one. The
// usage judged for the window [S, S+W) is the sum of
//   - every bucket whose window overlaps [S, S+W), whatever its length. A
//     bucket that overlaps in part counts whole, since when in its window
//     its usage fell is not kept: a version that lengthens or shortens
//     the window may be judged on more than ran in its window, never on
//     less (it fails closed);
//   - Past, when its usage may have been recorded at or after S
//     (PastEnd > S, or PastEnd not known).
//
// For the lifetime (W 0) every bucket and Past count.
//
// No later window of length W overlaps a bucket whose window ended at or
// before S (the account's clock never moves back), but a later version
// with a longer window (or none) may. So ended buckets are kept, the
// BudgetEndedWindowsKept latest of them, and recording folds the older
// ones into Past rather than dropping them: Past, dated by the latest end
// folded into it, keeps them counted for any window that starts before
// that end. A version whose window spans up to BudgetEndedWindowsKept of
// the old windows is judged on them one by one; a longer one counts Past
// whole in its first window (all the history before the kept windows:
// it fails closed), and from its second window on no longer sees it.
// An account so holds at most Past, BudgetEndedWindowsKept ended buckets
// and those not ended: one for a policy whose window has not changed, and
// under a new window W at most ⌈W/w⌉+1 of each older length w, until
// they end.
type BudgetAccount struct {
	// Buckets are the windows recorded in that have not been folded,
	// sorted by window length, then start.
	Buckets []BudgetBucket
	// Past is the usage recorded over the policy's lifetime (a policy
	// without a window) and that of the buckets folded into it.
	Past normalize.Usage
	// PastEnd (with PastEndKnown) bounds when Past's usage was recorded:
	// before it, in microseconds since the Unix epoch. A Past whose end is
	// not known (a lifetime count migrated from a ledger that did not keep
	// one) overlaps every window, and is dated to the key's clock when the
	// account next records.
	PastEnd      int64
	PastEndKnown bool
}

// clock is now moved forward to the latest time the account has
// recorded at (the latest window start, or the end of Past), so that no
// window moves back.
func (a *BudgetAccount) clock(now time.Time) int64 {
	c := now.UnixMicro()
	for _, b := range a.Buckets {
		c = max(c, b.Start)
	}
	if a.PastEndKnown {
		c = max(c, satint.Add(a.PastEnd, -1))
	}
	return c
}

// usageIn is the usage judged for [start, start+window) (window 0: the
// lifetime).
func (a *BudgetAccount) usageIn(window, start int64) normalize.Usage {
	var u normalize.Usage
	if window == 0 || !a.PastEndKnown || a.PastEnd > start {
		u = a.Past
	}
	end := satint.Add(start, window)
	for _, b := range a.Buckets {
		if window == 0 || (b.Start < end && b.end() > start) {
			u = u.Plus(b.Usage)
		}
	}
	return u
}

// UsageAt returns the start of the window of length window (0: the
// lifetime, start 0) now falls in by the account's clock, and the usage
// judged for it. It changes nothing.
func (a *BudgetAccount) UsageAt(window int64, now time.Time) (start int64, u normalize.Usage) {
	start = windowStart(a.clock(now), window)
	return start, a.usageIn(window, start)
}

// Record adds u to the window of length window now falls in by the
// account's clock (window 0: to Past), folding first the buckets that
// ended before that window, and returns the window's start and the usage
// judged for it before u.
func (a *BudgetAccount) Record(window int64, now time.Time, u normalize.Usage) (start int64, before normalize.Usage) {
	c := a.clock(now)
	if !a.PastEndKnown && a.Past != (normalize.Usage{}) {
		// The usage was recorded before now: from here on it is dated.
		a.PastEnd, a.PastEndKnown = satint.Add(c, 1), true
	}
	start = windowStart(c, window)
	if window > 0 {
		a.fold(start)
	}
	before = a.usageIn(window, start)
	if window == 0 {
		a.Past = a.Past.Plus(u)
		if end := satint.Add(c, 1); !a.PastEndKnown || end > a.PastEnd {
			a.PastEnd, a.PastEndKnown = end, true
		}
		return start, before
	}
	i, found := slices.BinarySearchFunc(a.Buckets, BudgetBucket{Window: window, Start: start}, compareBuckets)
	if !found {
		a.Buckets = slices.Insert(a.Buckets, i, BudgetBucket{Window: window, Start: start})
	}
	a.Buckets[i].Usage = a.Buckets[i].Usage.Plus(u)
	return start, before
}

// BudgetEndedWindowsKept is how many ended windows a BudgetAccount keeps
// apart before folding the older ones into its past: enough for a
// policy's new version to lengthen its window up to 64 times (a minute to
// an hour, an hour to a day) and be judged on the old windows it spans
// rather than on the whole past.
const BudgetEndedWindowsKept = 64

// fold folds into Past the buckets ended at or before start, but for the
// BudgetEndedWindowsKept latest of them.
func (a *BudgetAccount) fold(start int64) {
	var ended []int
	for i, b := range a.Buckets {
		if b.end() <= start {
			ended = append(ended, i)
		}
	}
	if len(ended) <= BudgetEndedWindowsKept {
		return
	}
	// Latest end first; among equal ends, the shorter window first.
	slices.SortFunc(ended, func(i, j int) int {
		if c := cmpInt(a.Buckets[j].end(), a.Buckets[i].end()); c != 0 {
			return c
		}
		return cmpInt(a.Buckets[i].Window, a.Buckets[j].Window)
	})
	folded := make([]bool, len(a.Buckets))
	for _, i := range ended[BudgetEndedWindowsKept:] {
		b := a.Buckets[i]
		folded[i] = true
		a.Past = a.Past.Plus(b.Usage)
		if !a.PastEndKnown || b.end() > a.PastEnd {
			a.PastEnd, a.PastEndKnown = b.end(), true
		}
	}
	kept := a.Buckets[:0]
	for i, b := range a.Buckets {
		if !folded[i] {
			kept = append(kept, b)
		}
	}
	a.Buckets = kept
}

// Adjust applies f to the usage a reservation recorded in the window of
// length window from start: its bucket, or Past when the window has been
// folded into it (or window is 0). It reports false when neither holds
// it (a window the ledger no longer has: nothing to adjust).
func (a *BudgetAccount) Adjust(window, start int64, f func(*normalize.Usage)) bool {
	if window == 0 {
		f(&a.Past)
		return true
	}
	if i, found := slices.BinarySearchFunc(a.Buckets, BudgetBucket{Window: window, Start: start}, compareBuckets); found {
		f(&a.Buckets[i].Usage)
		return true
	}
	if a.PastEndKnown && (BudgetBucket{Window: window, Start: start}).end() <= a.PastEnd {
		f(&a.Past)
		return true
	}
	return false
}

// compareBuckets orders buckets by window length, then start.
func compareBuckets(x, y BudgetBucket) int {
	if c := cmpInt(x.Window, y.Window); c != 0 {
		return c
	}
	return cmpInt(x.Start, y.Start)
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// BudgetWindowStart is the start, in microseconds since the Unix epoch, of
// the fixed window of length window (microseconds; 0: the policy's
// lifetime, which starts at 0) that now falls in.
func BudgetWindowStart(now time.Time, window int64) int64 {
	return windowStart(now.UnixMicro(), window)
}

// windowStart is BudgetWindowStart of us microseconds since the epoch.
func windowStart(us, window int64) int64 {
	if window <= 0 {
		return 0
	}
	start := us - us%window
	if us%window < 0 { // before the epoch: round down, not toward zero
		start -= window
	}
	return start
}

// CheckUsage refuses a charge that no ledger may add: a negative member.
func CheckUsage(u normalize.Usage) error {
	for _, k := range snapshot.BudgetKinds {
		if u.Of(k) < 0 {
			return fmt.Errorf("usage: %s is negative (%d)", k, u.Of(k))
		}
	}
	return nil
}

// MemoryLedger is the default BudgetLedger: usage in the process's memory,
// lost when it exits (so only the minimal profile judges budgets on it).
// It keeps one BudgetAccount per key.
type MemoryLedger struct {
	mu       sync.Mutex
	accounts map[BudgetKey]*BudgetAccount
}

var _ BudgetLedger = (*MemoryLedger)(nil)

// NewMemoryLedger returns an empty in-memory ledger.
func NewMemoryLedger() *MemoryLedger {
	return &MemoryLedger{accounts: map[BudgetKey]*BudgetAccount{}}
}

// account returns key's account, creating it. Precondition: m.mu is held.
func (m *MemoryLedger) account(key BudgetKey) *BudgetAccount {
	a := m.accounts[key]
	if a == nil {
		a = &BudgetAccount{}
		m.accounts[key] = a
	}
	return a
}

// Reserve implements BudgetLedger.
func (m *MemoryLedger) Reserve(_ context.Context, key BudgetKey, window int64, now time.Time) (BudgetReservation, normalize.Usage, error) {
	if window < 0 {
		return BudgetReservation{}, normalize.Usage{}, fmt.Errorf("budget window %d: negative", window)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	start, before := m.account(key).Record(window, now, normalize.Usage{Calls: 1})
	return BudgetReservation{Key: key, WindowMicroseconds: window, WindowStart: start}, before, nil
}

// Settle implements BudgetLedger.
func (m *MemoryLedger) Settle(_ context.Context, res BudgetReservation, u normalize.Usage) error {
	if err := CheckUsage(u); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.accounts[res.Key]; a != nil {
		a.Adjust(res.WindowMicroseconds, res.WindowStart, func(r *normalize.Usage) { *r = r.Plus(u) })
	}
	return nil
}

// Release implements BudgetLedger.
func (m *MemoryLedger) Release(_ context.Context, res BudgetReservation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.accounts[res.Key]; a != nil {
		a.Adjust(res.WindowMicroseconds, res.WindowStart, releaseCall)
	}
	return nil
}

// releaseCall takes back one reserved call.
func releaseCall(u *normalize.Usage) {
	if u.Calls > 0 {
		u.Calls--
	}
}

// Charge implements BudgetLedger.
func (m *MemoryLedger) Charge(_ context.Context, key BudgetKey, window int64, now time.Time, u normalize.Usage) error {
	if err := CheckUsage(u); err != nil {
		return err
	}
	if window < 0 {
		return fmt.Errorf("budget window %d: negative", window)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.account(key).Record(window, now, u)
	return nil
}

// Usage implements BudgetLedger.
func (m *MemoryLedger) Usage(_ context.Context, key BudgetKey, window int64, now time.Time) (normalize.Usage, error) {
	if window < 0 {
		return normalize.Usage{}, fmt.Errorf("budget window %d: negative", window)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.accounts[key]
	if a == nil {
		return normalize.Usage{}, nil
	}
	_, u := a.UsageAt(window, now)
	return u, nil
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
func (b *policyBudget) detail(u normalize.Usage, start int64) string {
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
	u      normalize.Usage
	closed bool
}

// Add reports tokens and cost the call consumed (Calls and
// WallMicroseconds must be 0: the executor counts and measures the call).
// It fails for a negative member and once the callable has returned (a
// goroutine it left behind reports to a call that is settled).
func (m *UsageMeter) Add(u normalize.Usage) error {
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
func (m *UsageMeter) take() normalize.Usage {
	if m == nil {
		return normalize.Usage{}
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
func (e *Executor) Charge(ctx context.Context, ec ExecutionContext, u normalize.Usage) error {
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
		return a.deny(3, normalize.ReasonInvalidRequest, "the context's %v", err)
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
