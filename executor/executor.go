package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"polc.dev/polc/approval"
	"polc.dev/polc/chain"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/digest"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// Config wires an Executor. The composition root builds it once; every
// action then runs through Execute.
type Config struct {
	// Registry resolves actions and holds their callables.
	Registry *Registry
	// Policies are the snapshots contexts may pin (by id and version).
	Policies []*snapshot.Snapshot
	// Backends are the effect backends contexts may select by ID
	// (ExecutionContext.Backend); IDs must be unique. Empty means
	// InProcessBackend alone, selected as InProcessBackendName.
	Backends []EffectBackend
	// Admission is the capacity port; default: an unbounded Limiter whose
	// lease ids come from IDs.
	Admission Admission
	// Evidence is the chain store of the governed and certifiable
	// profiles, required by them (profile_unavailable without it).
	Evidence chain.Store
	// State is the durable profile's store, required by it
	// (profile_unavailable without it). Only durable attempts are
	// committed to it (stage 14): governed and certifiable attempts
	// write evidence to Evidence and nothing here, whether State is set
	// or not. Their state is derived from that evidence by an
	// EvidenceProjector (Source and Chains: the evidence store; Store:
	// a ProjectionStore, such as statestore's SQLite store), which the
	// composition root runs beside the executor.
	State StateStore
	// Budgets is where the usage a policy's budgets are judged on is
	// accounted: per principal, tenant and policy id, in the policy's
	// window. Default: a MemoryLedger, which a restart resets, so the
	// durable, governed and certifiable profiles refuse a policy with
	// budgets on it (profile_unavailable); give them a persistent one,
	// such as statestore's SQLite store.
	Budgets BudgetLedger
	// ReportedUsage lists the budget kinds beyond calls and
	// wall_microseconds (which the executor counts and measures) that
	// this deployment reports: tokens and cost_microunits, through the
	// callables' UsageMeter, Executor.Charge or ExecutionContext.Usage.
	// A policy that limits a kind neither counted nor listed here is
	// refused at stage 3 (budget_unaccounted): its limit could never
	// bind.
	ReportedUsage []string
	// Transformers rewrite arguments at stage 8, in order. They cannot
	// remove or reorder security stages: every rewrite is normalized and
	// re-checked before the call.
	Transformers []Transformer
	// Guards are intrinsic checks of the action, backend or transport
	// (stage 6); an error denies with reason "guard:<id>".
	Guards []Guard
	// Authorize is the principal/tenant authorization of stage 5 (beyond
	// the policy's scopes, which stage 7 evaluates); an error denies. It
	// gets a copy of the descriptor: what it changes reaches nothing.
	Authorize func(ctx context.Context, ec ExecutionContext, d normalize.ActionDescriptor) error
	// ApprovalTrust holds the approver keys (trust lines
	// approver:<class>) whose signed approvals may lift an escalation,
	// and ApprovalLedger records the nonces of those accepted (single
	// use). Without both, every approval presented is refused
	// (approval_unavailable). docs/approvals.md.
	ApprovalTrust  *chain.Trust
	ApprovalLedger ApprovalLedger
	// Now and IDs make runs deterministic in tests; defaults are the clock
	// and random UUIDs.
	Now func() time.Time
	IDs func() string
}

// Transformer rewrites an action's arguments before the call.
type Transformer struct {
	Name      string
	Transform func(ctx context.Context, action string, args map[string]any) (map[string]any, error)
}

// Guard is an intrinsic check on the normalized request (stage 6). Check
// gets its own shallow copy of the request: it must not modify the slices
// that copy shares with the request the policy judges. A non-nil error
// refuses the attempt (guard:<ID>).
type Guard struct {
	ID    string
	Check func(ctx context.Context, req *normalize.Normalized) error
}

// Executor is the one authority that runs actions (docs/executor.md). It is safe
// for concurrent use.
type Executor struct {
	cfg      Config
	backends map[string]EffectBackend
	policies map[policyKey]*compiledPolicy
	plans    sync.Map // planKey → *plan
	capCache sync.Map // backend id → *cachedCaps

	lastPrincipal atomic.Pointer[principalName]
}

// capabilityDigest returns the report's digest, reusing the last one
// computed for an identical report of the same backend.
func (e *Executor) capabilityDigest(r BackendCapabilityReport) string {
	return e.capabilities(r).digest
}

// capabilities returns the cached digest (and trail details) of a report,
// computing them when the backend's last report was a different one.
func (e *Executor) capabilities(r BackendCapabilityReport) *cachedCaps {
	if c, ok := e.capCache.Load(r.BackendID); ok {
		cc := c.(*cachedCaps)
		same := reflect.ValueOf(cc.report.Containment).UnsafePointer() == reflect.ValueOf(r.Containment).UnsafePointer() &&
			cc.report.Format == r.Format && cc.report.Version == r.Version
		if same || reflect.DeepEqual(cc.report, r) {
			return cc
		}
	}
	cc := &cachedCaps{report: r, digest: r.Digest()}
	e.capCache.Store(r.BackendID, cc)
	return cc
}

type cachedCaps struct {
	report BackendCapabilityReport
	digest string
	// details caches the trail details of stages 3 and 12 for the last
	// backend id that used this report (normally its own).
	details atomic.Pointer[backendDetails]
}

type backendDetails struct {
	backend string // the backend's ID()
	bind    string // "backend <id>, capabilities <digest>"
	invoke  string // "backend <id>"
}

// detailsFor returns the trail details of stages 3 and 12 for a backend
// whose ID() is id and whose report is cc's.
func (cc *cachedCaps) detailsFor(id string) *backendDetails {
	if d := cc.details.Load(); d != nil && d.backend == id {
		return d
	}
	d := &backendDetails{backend: id, bind: "backend " + id + ", capabilities " + cc.digest, invoke: "backend " + id}
	cc.details.Store(d)
	return d
}

// principalName caches Principal.String for the last principal seen.
type principalName struct {
	kind, id, s string
}

// principalString is p.String(), without a new string when p is the
// principal of the previous attempt (the common case: one agent).
func (e *Executor) principalString(p Principal) string {
	if c := e.lastPrincipal.Load(); c != nil && c.kind == p.Kind && c.id == p.ID {
		return c.s
	}
	s := p.String()
	e.lastPrincipal.Store(&principalName{p.Kind, p.ID, s})
	return s
}

type policyKey struct{ id, version string }

type compiledPolicy struct {
	snap *snapshot.Snapshot
	eval *decision.Policy
	// budget is nil when the policy has no budget rules: nothing is
	// accounted for it.
	budget *policyBudget
}

// New validates the configuration and compiles every policy.
func New(cfg Config) (*Executor, error) {
	if cfg.Registry == nil {
		return nil, errors.New("executor: no registry")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IDs == nil {
		cfg.IDs = NewUUID
	}
	if cfg.Admission == nil {
		cfg.Admission = &Limiter{IDs: cfg.IDs}
	}
	if cfg.Budgets == nil {
		cfg.Budgets = NewMemoryLedger()
	}
	if err := checkReported(cfg.ReportedUsage); err != nil {
		return nil, err
	}
	if len(cfg.Backends) == 0 {
		cfg.Backends = []EffectBackend{InProcessBackend{}}
	}
	e := &Executor{cfg: cfg, backends: map[string]EffectBackend{}, policies: map[policyKey]*compiledPolicy{}}
	for i, b := range cfg.Backends {
		if b == nil {
			return nil, fmt.Errorf("executor: backend %d is nil", i)
		}
		if _, dup := e.backends[b.ID()]; dup {
			return nil, fmt.Errorf("executor: duplicate backend %q", b.ID())
		}
		e.backends[b.ID()] = b
	}
	for i, s := range cfg.Policies {
		if s == nil {
			return nil, fmt.Errorf("executor: policy %d is nil", i)
		}
		if _, dup := e.policies[policyKey{s.PolicyID, s.Version}]; dup {
			return nil, fmt.Errorf("executor: policy %s@%s is given twice", s.PolicyID, s.Version)
		}
		computed, err := s.ComputeDigest()
		if err != nil || computed != s.Digest {
			return nil, fmt.Errorf("executor: snapshot %s@%s: digest does not recompute", s.Name, s.Version)
		}
		p, err := decision.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("executor: snapshot %s: %v", s.Name, err)
		}
		b, err := budgetOf(s, cfg.ReportedUsage)
		if err != nil {
			return nil, fmt.Errorf("executor: snapshot %s: %v", s.Name, err)
		}
		e.policies[policyKey{s.PolicyID, s.Version}] = &compiledPolicy{snap: s, eval: p, budget: b}
	}
	for i, t := range cfg.Transformers {
		if t.Name == "" || t.Transform == nil {
			return nil, fmt.Errorf("executor: transformer %d needs a name and a function", i)
		}
	}
	for i, g := range cfg.Guards {
		if g.ID == "" || g.Check == nil {
			return nil, fmt.Errorf("executor: guard %d needs an id and a function", i)
		}
	}
	return e, nil
}

func (e *Executor) now() time.Time { return e.cfg.Now() }

// newID returns the attempt's next id from the configured source.
func (a *attempt) newID() string { return a.e.cfg.IDs() }

// policy returns the compiled snapshot a reference pins, checking the
// exact digest.
func (e *Executor) policy(ref SnapshotRef) (*compiledPolicy, error) {
	p, ok := e.policies[policyKey{ref.PolicyID, ref.Version}]
	if !ok {
		// The usual cause is a context built without its Policy: say so
		// rather than name a policy "@".
		if ref == (SnapshotRef{}) {
			return nil, errors.New("the context pins no policy (ExecutionContext.Policy is the zero SnapshotRef; use SnapshotRefOf)")
		}
		return nil, fmt.Errorf("policy %q version %q is not among Config.Policies", ref.PolicyID, ref.Version)
	}
	if ref.Digest == "" {
		return nil, fmt.Errorf("policy %s@%s: the context pins no digest (the loaded snapshot's is %s)", ref.PolicyID, ref.Version, p.snap.Digest)
	}
	if p.snap.Digest != ref.Digest {
		return nil, fmt.Errorf("policy %s@%s has digest %s, the context pins %s", ref.PolicyID, ref.Version, p.snap.Digest, ref.Digest)
	}
	return p, nil
}

// NewUUID returns a random (version 4) lowercase UUID, the default id
// source (chain.NewUUID).
func NewUUID() string { return chain.NewUUID() }

// Stage names, in the fixed order of docs/executor.md "The fourteen stages".
var StageNames = [15]string{1: "resolve", 2: "normalize", 3: "bind", 4: "governed_start", 5: "authorize",
	6: "guards", 7: "policy", 8: "transform", 9: "renormalize", 10: "recheck", 11: "precall_evidence",
	12: "invoke", 13: "terminal", 14: "persist"}

// plan is the immutable, compiled enforcement order for one action under
// one profile: which descriptor, which stages. Stages cannot be removed or
// reordered; transformers only ever run inside stage 8.
type plan struct {
	entry   *entry
	stages  []int // stage numbers; attempt.run runs one
	exec    *Executor
	profile Profile
}

type planKey struct {
	action  string
	version string
	profile Profile
}

func (e *Executor) planFor(en *entry, profile Profile) *plan {
	// The entry remembers its last plan: the next attempt of the same
	// action under the same executor and profile skips the map.
	if p := en.lastPlan.Load(); p != nil && p.exec == e && p.profile == profile {
		return p
	}
	k := planKey{en.action.ID(), en.action.Digest(), profile}
	if p, ok := e.plans.Load(k); ok {
		en.lastPlan.Store(p.(*plan))
		return p.(*plan)
	}
	p := &plan{entry: en, stages: []int{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, exec: e, profile: profile}
	actual, _ := e.plans.LoadOrStore(k, p)
	en.lastPlan.Store(actual.(*plan))
	return actual.(*plan)
}

// attempt is the mutable state of one Execute call. It lives in
// Execute's frame (nothing keeps a pointer to it): what outlives the call
// or is handed to other code is in out, one allocation.
type attempt struct {
	e    *Executor
	ctx  context.Context
	req  ExecutionRequest
	ec   ExecutionContext
	base OutcomeBase
	en   *entry
	pol  *compiledPolicy
	out  *attemptOut

	args       map[string]any
	argsDigest string
	// argsChecked are the arguments as stage 2 checked them (nil when the
	// request's are), argsOK set once it has: the request digest covers
	// them. Transformers get copies; the callable gets them at stage 12,
	// after every digest taken from them (a minimal report digests its
	// own copy, frozenRequest).
	argsChecked map[string]any
	argsOK      bool
	// normv is stage 2's normalized request, renorm stage 9's when a
	// transformer changed the arguments (normalized returns the current
	// one). normv lives here, on Execute's stack, rather than in
	// attemptOut: nothing that outlives the attempt refers to it (guards
	// get a copy), and 248 bytes less puts attemptOut in the 1,280-byte
	// size class, which the collector's cost follows. No field points to
	// it: a pointer stored into the attempt would move the attempt to the
	// heap.
	normv     normalize.Normalized
	renorm    *normalize.Normalized
	backend   EffectBackend
	lease     Lease
	leased    bool
	boundary  *TaskBoundary
	started   bool // operation_started appended
	changed   bool // a transformer changed the arguments
	startedAt time.Time
	reqDigest string
	principal string          // ec.Principal.String(), computed once
	pending   []pendingRecord // appended, not yet known durable
	details   *backendDetails // trail details of the bound backend
	opIDp     *string         // the operation id its records' drafts point to
	outbox    *Outbox         // the callable's outbox (durable attempts only)
	// grants are the exceptions this attempt recorded (governed): a
	// recheck of the same gate holds them instead of spending others.
	grants []ExceptionGrant
	// approved is the approval this attempt accepted (stage 7).
	approved *acceptedApproval
	// usage is what the policy judges budgets on: the context's, plus
	// the ledger's once stage 7 reserved the call (reserved, resv).
	usage    normalize.Usage
	resv     BudgetReservation
	reserved bool
	meter    *UsageMeter // the callable's, when the call is reserved
	callDur  int64       // the call's measured duration, µs
}

// attemptOut holds what an attempt's outcome refers to (the decision, the
// preflight report, the operation id, the trail) and what other code is
// given (the callable's context and token).
type attemptOut struct {
	opID      string
	decision  decision.Decision
	preflight ActionPreflightReport
	succeeded Succeeded
	callCtx   attemptCtx
	token     invocationToken
	trailBuf  [14]TrailEntry         // stages 1-14 of a call
	gateBuf   [2]decision.GateResult // stage 7's decision lists, when they fit
	strBuf    [6]string
}

// normalized is the request as the policy judges it: stage 9's when a
// transformer changed the arguments, else stage 2's.
func (a *attempt) normalized() *normalize.Normalized {
	if a.renorm != nil {
		return a.renorm
	}
	return &a.normv
}

// run runs one stage of the plan (stage 12 also runs 13).
func (a *attempt) run(stage int) Outcome {
	switch stage {
	case 2:
		return a.normalize()
	case 3:
		return a.bind()
	case 4:
		return a.governedStart()
	case 5:
		return a.authorize()
	case 6:
		return a.guards()
	case 7:
		return a.policyStage()
	case 8:
		return a.transform()
	case 9:
		return a.renormalize()
	case 10:
		return a.recheck()
	case 11:
		return a.precall()
	case 12:
		return a.invoke()
	}
	panic(fmt.Sprintf("executor: no stage %d", stage)) // plans hold only the above
}

// requestDigest is the request's digest, computed once per attempt.
func (a *attempt) requestDigest() string {
	if a.reqDigest == "" {
		f := a.requestForm()
		a.reqDigest = f.digest()
	}
	return a.reqDigest
}

// requestForm is the request's digest form: with the arguments as stage 2
// checked them once it has, the request's own before (a denial at stage 1
// or 2 still has a digest).
func (a *attempt) requestForm() requestDigestForm {
	f := a.req.digestFormValue()
	if a.argsOK {
		f.Arguments = a.argsChecked
	}
	return f
}

// frozenRequest is requestForm with its own copy of everything in it that
// the caller or the callable can still change: the arguments, the
// metadata, the claim and a durable scope's owner. ok is false when the
// metadata has no JSON copy (its digest is then taken at once).
func (a *attempt) frozenRequest() (f requestDigestForm, ok bool) {
	f = a.requestForm()
	var err error
	if len(f.Arguments) > 0 { // a.argsChecked are the callable's
		if f.Arguments, err = cloneJSON(f.Arguments); err != nil {
			return f, false
		}
	} else if f.Arguments != nil {
		f.Arguments = frozenEmpty
	}
	if f.Metadata != nil {
		if f.Metadata, err = cloneJSON(f.Metadata); err != nil {
			return f, false
		}
	}
	if f.PrincipalClaim != nil {
		c := *f.PrincipalClaim
		f.PrincipalClaim = &c
	}
	if s, isRun := f.Scope.(DurableRunScope); isRun && s.OwnerAttemptID != nil {
		o := *s.OwnerAttemptID
		s.OwnerAttemptID = &o
		f.Scope = s
	}
	return f, true
}

// frozenEmpty stands for empty arguments in frozen forms; nothing writes
// to it.
var frozenEmpty = map[string]any{}

// Execute runs one action through the fixed stages (docs/executor.md "The
// fourteen stages") and returns its outcome. It never panics on bad input
// and never calls the callable unless every stage before 12 allowed it
// (and, governed, every pre-call record was appended).
func (e *Executor) Execute(ctx context.Context, req ExecutionRequest, ec ExecutionContext) (out Outcome) {
	a := &attempt{e: e, ctx: ctx, req: req, ec: ec, startedAt: e.now(), out: new(attemptOut), usage: ec.Usage}
	a.principal = e.principalString(ec.Principal)
	a.base = OutcomeBase{Profile: ec.Profile, RequestID: req.RequestID, AttemptID: a.newID(), Trail: a.out.trailBuf[:0]}
	defer func() {
		if a.leased {
			a.lease.Release()
		}
		if a.boundary != nil {
			a.boundary.ops.RUnlock()
		}
		if a.reserved {
			a.settleBudget(out)
		}
		if out != nil { // nil only while a panic of the executor itself unwinds
			out = a.persist(out)
		}
	}()
	// Stage 1: resolve the descriptor.
	ref := req.Action
	if strings.HasPrefix(ref, "mcp:") {
		ref = "mcp"
	}
	a.en = e.cfg.Registry.lookup(ref)
	if a.en == nil {
		return a.deny(1, normalize.ReasonUnknownAction, "no descriptor for action %q", req.Action)
	}
	a.note(1, TrailOK, a.en.action.Ref())
	if a.en.fn == nil {
		return a.deny(1, "no_callable", "action %s has no callable", a.en.action.ID())
	}
	for _, stage := range e.planFor(a.en, ec.Profile).stages {
		if o := a.run(stage); o != nil {
			return o
		}
	}
	panic("executor: the plan ended without an outcome") // invoke always returns one
}

func (a *attempt) trail(stage int, result TrailResult, format string, args ...any) {
	a.note(stage, result, fmt.Sprintf(format, args...))
}

// note appends a trail entry with a ready detail (the hot path). While
// the attempt's buffer has room it writes the entry's fields in place:
// copying a whole TrailEntry into the heap costs a bulk write barrier
// whenever the GC runs.
func (a *attempt) note(stage int, result TrailResult, detail string) {
	n := len(a.base.Trail)
	if n == cap(a.base.Trail) {
		a.base.Trail = append(a.base.Trail, TrailEntry{Stage: uint8(stage), Result: result, Detail: detail})
		return
	}
	a.base.Trail = a.base.Trail[:n+1]
	e := &a.base.Trail[n]
	e.Stage, e.Result, e.Detail = uint8(stage), result, detail
}

// deny ends the attempt with Denied; after operation_started it appends
// the terminal operation_denied first.
func (a *attempt) deny(stage int, reason, format string, args ...any) Outcome {
	a.trail(stage, TrailDeny, format, args...)
	a.base.ReasonCode = reason
	if a.started {
		if rt, err := a.appendTerminal(chain.OperationDeniedPayload{Disposition: "deny", ReasonCode: reason}); err != nil {
			return a.evidenceFailure(stage, rt, err, false)
		}
	}
	return &Denied{OutcomeBase: a.base}
}

// cancelled ends the attempt because ctx is done before the call.
func (a *attempt) cancelled(stage int) Outcome {
	a.trail(stage, TrailCancelled, "%v", a.ctx.Err())
	a.base.ReasonCode = "cancelled"
	if a.started {
		if rt, err := a.appendTerminal(chain.OperationCancelledPayload{DurationUS: 0}); err != nil {
			return a.evidenceFailure(stage, rt, err, false)
		}
	}
	return &Cancelled{OutcomeBase: a.base}
}

// appendFailed ends the attempt after a pre-call append failed. When the
// failure is the caller's context ending, the store refused nothing: the
// attempt is cancelled, and a started operation is closed with
// operation_cancelled (appended without the caller's cancellation), not
// left open as an evidence failure would leave it.
func (a *attempt) appendFailed(stage int, rt chain.Type, err error) Outcome {
	if cerr := a.ctx.Err(); cerr != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return a.cancelled(stage)
	}
	return a.evidenceFailure(stage, rt, err, false)
}

func (a *attempt) evidenceFailure(stage int, rt chain.Type, err error, executed bool) Outcome {
	a.base.EvidenceError = &GovernanceEvidenceError{CallExecuted: executed, RecordType: string(rt), Err: err}
	a.base.ReasonCode = "governance_evidence"
	a.trail(stage, TrailEvidenceFailed, "%s: %v", rt, err)
	return &Failed{OutcomeBase: a.base, Class: "governance_evidence"}
}

// Stage 2: validate the arguments against the descriptor's schema and
// normalize them, with identity from the trusted context only.
func (a *attempt) normalize() Outcome {
	if err := a.ctx.Err(); err != nil {
		return a.cancelled(2)
	}
	args, err := cloneJSON(a.req.Arguments)
	if ne := (*normalize.NormalizeError)(nil); errors.As(err, &ne) {
		return a.deny(2, ne.Reason, "%s", ne.Detail)
	} else if err != nil {
		return a.deny(2, normalize.ReasonInvalidRequest, "arguments are not JSON values: %v", err)
	}
	if a.req.Metadata != nil {
		// The request digest covers the metadata: a value without a
		// canonical form (a cycle, NaN, a func) would leave the request
		// bound to the text of an error.
		if _, err := digest.Checked("", a.req.Metadata); err != nil {
			return a.deny(2, normalize.ReasonInvalidRequest, "metadata has no canonical form: %v", err)
		}
	}
	args, nerr := a.normalizeArgs(args, &a.normv)
	if nerr != nil {
		return a.deny(2, nerr.Reason, "%s", nerr.Detail)
	}
	a.args = args
	if a.req.Arguments != nil || len(args) > 0 {
		a.argsChecked = args
	}
	a.argsOK = true
	detail := emptyArgsDetail // an empty object's canonical form is "{}"
	if len(args) > 0 {
		if detail, err = digest.Checked("arguments ", args); err != nil {
			return a.deny(2, normalize.ReasonInvalidRequest, "arguments have no canonical form: %v", err)
		}
	}
	a.argsDigest = detail[len("arguments "):]
	a.note(2, TrailOK, detail)
	return nil
}

// emptyArgsDetail is stage 2's detail for arguments {} (most actions'
// arguments in the benchmarks, and of any action without any).
var emptyArgsDetail = digest.WithPrefix("arguments ", map[string]any{})

// normalizeArgs normalizes the attempt's private arguments into out for
// the descriptor stage 1 resolved (the one Normalizer.Normalize would
// resolve: the same lookup of the same reference). It returns the
// arguments it judged: args, or for an mcp:<server>/<tool> request a copy
// with the shorthand's server and tool, which the callable must get too
// (it has no other way to know which tool of which server was judged).
func (a *attempt) normalizeArgs(args map[string]any, out *normalize.Normalized) (map[string]any, *normalize.NormalizeError) {
	// The request's time is the attempt's start, for stage 9 too: a
	// transformation changes the arguments, not when they were asked for.
	if err := normalize.StartInto(out, a.req.Action, a.principal, a.ec.Tenant, a.ec.Workspace, nil, a.startedAt); err != nil {
		return nil, err
	}
	out.Usage = a.usage
	if mcpArgs, err := normalize.MCPShorthand(a.req.Action, args); err != nil {
		return nil, err
	} else if mcpArgs != nil {
		args = mcpArgs
	}
	return args, a.en.action.Finish(out, args, true)
}

// Stage 3: bind the trusted context, verify the exact snapshot, probe the
// backend against required containment and take a capacity lease.
func (a *attempt) bind() Outcome {
	ec := &a.ec
	switch {
	case ec.Principal.Kind == "" || ec.Principal.ID == "":
		return a.deny(3, "unauthenticated", "the context has no authenticated principal")
	case a.req.PrincipalClaim != nil && *a.req.PrincipalClaim != a.principal:
		return a.deny(3, "principal_claim_mismatch", "the request claims %q, the context authenticated %q", *a.req.PrincipalClaim, ec.Principal.String())
	case a.req.Scope == nil || ec.Scope == nil || !sameScope(a.req.Scope, ec.Scope):
		return a.deny(3, "scope_mismatch", "the request's scope is not the context's")
	case a.req.RequestID == "":
		return a.deny(3, normalize.ReasonInvalidRequest, "no request id")
	case a.req.Timeout < 0:
		// invoke sets a deadline only for a positive timeout: a negative
		// one (an unchecked subtraction, most likely) would run unbounded.
		return a.deny(3, normalize.ReasonInvalidRequest, "negative timeout %v", a.req.Timeout)
	case !validScope(ec.Scope):
		// Refused before anything runs: a durable commit after the call
		// would fail on it, leaving an executed action with no record.
		return a.deny(3, "scope_invalid", "a durable run scope needs a run id, and an owner attempt id that is not empty when it has one")
	}
	switch ec.Profile {
	case ProfileMinimal:
	case ProfileDurable:
		if a.e.cfg.State == nil {
			return a.deny(3, "profile_unavailable", "durable profile without a state store")
		}
		if _, ok := ec.Scope.(DurableRunScope); !ok {
			return a.deny(3, "scope_not_durable", "the durable profile needs a durable run scope")
		}
	case ProfileGoverned, ProfileCertifiable:
		b := ec.Boundary
		switch {
		case a.e.cfg.Evidence == nil:
			return a.deny(3, "profile_unavailable", "governed profile without an evidence store")
		case b == nil:
			return a.deny(3, "no_task_boundary", "governed profile without a task boundary")
		case b.owner != a.e:
			return a.deny(3, "boundary_foreign", "the task boundary was not opened by this executor")
		case b.policy != ec.Policy:
			return a.deny(3, "boundary_policy_mismatch", "the boundary pins another policy")
		case ec.Profile == ProfileCertifiable && !b.certifiable:
			return a.deny(3, "boundary_not_certifiable", "certifiable profile on a governed boundary")
		}
	default:
		return a.deny(3, "unknown_profile", "unknown profile %q", ec.Profile)
	}
	pol, err := a.e.policy(ec.Policy)
	if err != nil {
		return a.deny(3, "policy_digest_mismatch", "%v", err)
	}
	a.pol = pol
	if o := a.checkBudget(); o != nil {
		return o
	}
	a.backend = a.e.backends[ec.Backend]
	if a.backend == nil {
		if ec.Backend == "" {
			return a.deny(3, "unknown_backend", "no backend named in the ExecutionContext (Backend is empty; the default backend is %q)", InProcessBackendName)
		}
		return a.deny(3, "unknown_backend", "no effect backend %q among Config.Backends", ec.Backend)
	}
	caps, err := a.backend.Probe(a.ctx)
	if err != nil {
		return a.deny(3, "backend_probe_failed", "probing %s failed", ec.Backend)
	}
	cc := a.e.capabilities(caps)
	capDigest := cc.digest
	if missing := missingContainment(a.en.action.Containment(), caps); len(missing) > 0 {
		return a.deny(3, "containment_unsupported", "%s requires %s containment; backend %s does not enforce it", a.en.action.ID(), strings.Join(missing, ", "), ec.Backend)
	}
	// One reading for the lease and the report: admission and verification
	// are one moment of the attempt, on the executor's clock.
	now := a.e.now()
	lease, retryAt, ok := a.e.cfg.Admission.Acquire(a.ctx, now)
	if !ok {
		a.base.ReasonCode = "capacity"
		a.trail(3, TrailDefer, "no capacity until %s", retryAt.UTC().Format(time.RFC3339Nano))
		return &Deferred{OutcomeBase: a.base, RetryAt: retryAt}
	}
	a.lease, a.leased = lease, true
	a.out.preflight = ActionPreflightReport{
		ReportID: a.newID(), RequestID: a.req.RequestID,
		DescriptorDigest: a.en.action.Digest(), Backend: a.backend.ID(), Capabilities: caps, CapabilityDigest: capDigest,
		LeaseID: lease.ID, VerifiedAt: now, ExpiresAt: lease.ExpiresAt,
	}
	a.freezeRequestDigest()
	a.base.Preflight = &a.out.preflight
	a.details = cc.detailsFor(a.out.preflight.Backend)
	a.note(3, TrailOK, a.details.bind)
	return nil
}

// freezeRequestDigest gives the preflight report its request digest. The
// other profiles record the digest (operation_started, the state store),
// so it is taken now; the minimal profile records none, and its report
// keeps a frozen copy of the request to compute it from when read.
func (a *attempt) freezeRequestDigest() {
	if a.ec.Profile == ProfileMinimal {
		if f, ok := a.frozenRequest(); ok {
			a.out.preflight.request = f
			return
		}
	}
	d := a.requestDigest()
	a.out.preflight.requestDigest.Store(&d)
}

// Stage 4 (governed only): pin the policy and open the operation; both
// receipts are required before any gate.
func (a *attempt) governedStart() Outcome {
	a.out.opID = a.newID()
	if a.ec.Profile != ProfileGoverned && a.ec.Profile != ProfileCertifiable {
		a.base.OperationID = &a.out.opID
		a.note(4, TrailSkipped, noEvidence(a.ec.Profile))
		return nil
	}
	if err := a.ctx.Err(); err != nil {
		return a.cancelled(4)
	}
	b := a.ec.Boundary
	a.pending = make([]pendingRecord, 0, 6)
	a.base.Records = make([]string, 0, 8) // a call's records: start pair, gates, terminal
	b.ops.RLock()
	a.boundary = b
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return a.deny(4, "boundary_closed", "task boundary %s is closed", b.id)
	}
	pf := a.base.Preflight
	if now := a.e.now(); !now.Before(pf.ExpiresAt) {
		return a.deny(4, "preflight_expired", "the admission lease expired at %s", pf.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if caps, err := a.backend.Probe(a.ctx); err != nil || a.e.capabilityDigest(caps) != pf.CapabilityDigest {
		return a.deny(4, "preflight_changed", "the backend's capability report changed after preflight")
	}
	if err := a.append(chain.PolicyBoundPayload{
		PolicyDigest: a.pol.snap.Digest, EffectBackendID: a.backend.ID(),
		EffectCapabilityDigest: pf.CapabilityDigest, TaskBoundaryID: b.id,
	}); err != nil {
		return a.appendFailed(4, chain.PolicyBound, err)
	}
	actor := a.principal
	var runID *string
	if s, ok := a.ec.Scope.(DurableRunScope); ok {
		runID = &s.RunID
	}
	if err := a.append(chain.OperationStartedPayload{
		ToolID: a.en.action.ID(), AttemptID: a.base.AttemptID, RequestDigest: a.requestDigest(), Actor: &actor, RunID: runID,
	}); err != nil {
		return a.appendFailed(4, chain.OperationStarted, err)
	}
	// Governed, the outcome names the operation once its operation_started
	// is in the chain (a refusal before it names none).
	a.base.OperationID = &a.out.opID
	// Both receipts are required before any gate.
	if rt, err := a.flush(); err != nil {
		return a.evidenceFailure(4, rt, err, false)
	}
	a.started = true
	b.mu.Lock()
	b.started++
	b.mu.Unlock()
	a.trail(4, TrailOK, "operation %s started", a.out.opID)
	return nil
}

// append seals one record of this operation and hands it to the store in
// chain order without waiting for durability; flush waits. Records that
// must be durable together (the start pair, the gate results) thus share
// one group commit instead of one fsync each.
func (a *attempt) append(p chain.Payload) error {
	if a.opIDp == nil {
		// One copy of the operation id, shared by its records' drafts.
		a.opIDp = new(string)
		*a.opIDp = a.out.opID
	}
	rec, _, wait, err := a.boundary.writer.AppendAsync(a.ctx, chain.Draft{
		RecordID: a.newID(), OperationID: a.opIDp, PolicyID: a.pol.snap.PolicyID, PolicyVersion: a.pol.snap.Version,
		Payload: p, CreatedAt: a.e.now(),
	})
	if err != nil {
		return err
	}
	a.pending = append(a.pending, pendingRecord{p.RecordType(), wait})
	a.base.Records = append(a.base.Records, rec.RecordID)
	return nil
}

type pendingRecord struct {
	rt   chain.Type
	wait func() error
}

// flush waits until every record appended so far is durable (acknowledged)
// and returns the type of the first that failed.
func (a *attempt) flush() (chain.Type, error) {
	defer func() { a.pending = a.pending[:0] }()
	if len(a.pending) == 0 {
		return "", nil
	}
	// Durability is prefix-ordered (chain.AsyncAppender): the last record
	// durable means all are. Only on failure find the first that failed.
	err := a.pending[len(a.pending)-1].wait()
	if err == nil {
		return "", nil
	}
	for _, p := range a.pending {
		if perr := p.wait(); perr != nil {
			return p.rt, perr
		}
	}
	return a.pending[len(a.pending)-1].rt, err
}

// appendTerminal appends the operation's one terminal record and waits for
// it and everything before it, returning the type of the record that
// failed. It uses a context that outlives the
// caller's cancellation: a started operation must be closed.
func (a *attempt) appendTerminal(p chain.Payload) (chain.Type, error) {
	ctx := context.WithoutCancel(a.ctx)
	saved := a.ctx
	a.ctx = ctx
	defer func() { a.ctx = saved }()
	if err := a.append(p); err != nil {
		return p.RecordType(), err
	}
	// The failure may be an earlier record of the same group (a gate
	// result): flush names the first that failed.
	return a.flush()
}

// noEvidence is the trail detail of the evidence stages a profile skips.
func noEvidence(p Profile) string {
	switch p {
	case ProfileMinimal:
		return "profile minimal appends no evidence"
	case ProfileDurable:
		return "profile durable appends no evidence"
	}
	return "profile " + string(p) + " appends no evidence"
}

// Stage 5: principal/tenant authorization of the context.
func (a *attempt) authorize() Outcome {
	if a.e.cfg.Authorize == nil {
		a.note(5, TrailOK, "no authorizer configured; scopes are checked by the policy")
		return nil
	}
	// A copy of its own: the descriptor's slices belong to the registry.
	desc := a.en.action.Descriptor()
	if err := recovered(errUserPanic, func() error { return a.e.cfg.Authorize(a.ctx, a.ec, desc) }); err != nil {
		return a.deny(5, "unauthorized", "authorization refused")
	}
	a.note(5, TrailOK, "authorized")
	return nil
}

// Stage 6: intrinsic guards.
func (a *attempt) guards() Outcome {
	for _, g := range a.e.cfg.Guards {
		// Each guard gets its own copy: the request stays on Execute's
		// stack, and a guard cannot change what the next one or the
		// policy sees (the slices are still shared: guards must not
		// modify them).
		n := new(normalize.Normalized)
		*n = *a.normalized()
		if err := recovered(errUserPanic, func() error { return g.Check(a.ctx, n) }); err != nil {
			return a.deny(6, "guard:"+g.ID, "guard %s refused", g.ID)
		}
	}
	if len(a.e.cfg.Guards) == 0 {
		a.note(6, TrailOK, "no guards")
	} else {
		a.note(6, TrailOK, strconv.Itoa(len(a.e.cfg.Guards))+" guards")
	}
	return nil
}

// Stage 7: the snapshot's gates, reduced as docs/decisions.md "Gates and the reducer" says.
func (a *attempt) policyStage() Outcome {
	if a.pol.budget != nil {
		if o := a.reserveBudget(); o != nil {
			return o
		}
	}
	return a.evaluate(7)
}

func (a *attempt) evaluate(stage int) Outcome {
	if stage == 7 {
		// The first decision lives in the attempt; a recheck's gets its
		// own lists (the first one's may be in evidence not yet written).
		a.pol.eval.EvaluateWith(a.normalized(), &a.out.decision, a.out.gateBuf[:], a.out.strBuf[:])
	} else {
		a.out.decision, _ = a.pol.eval.EvaluatePooled(a.normalized())
	}
	d := a.out.decision
	a.base.Decision = &a.out.decision
	governed := a.started
	var blocking *decision.GateResult
	escalate := false
	// lifts: per gate, the exception that lifts its soft denial (nil:
	// none); fresh: taken now, to be recorded. Only when exceptions let
	// the operation through (no hard denial, a grant for every denying
	// soft gate) is any taken: a grant is single-use and degrades the
	// certificate, and neither may be spent on an operation still denied.
	var lifts []*ExceptionGrant
	var fresh []bool
	if d.Disposition != decision.Allow && a.boundary != nil {
		lifts, fresh = a.exceptions(d.Gates)
	}
	// approvedGate: the soft gate a presented approval lifts, when no
	// exception lifted the denials (docs/approvals.md). Verified and
	// recorded before the gates' results, as an exception is.
	var approvedGate string
	var refusal *approval.Error
	if lifts == nil {
		if gate := approvalGate(&d, len(a.req.Approvals)); gate != "" {
			if h := a.approved; h != nil && h.gate == gate && a.e.now().Before(h.expires) {
				approvedGate = gate
				a.trail(stage, TrailApproved, "approval %s, recorded at stage 7, lifts soft gate %s", h.a.ApprovalID, gate)
			} else if h == nil {
				acc, err := a.takeApproval(gate, &d)
				switch {
				case err != nil && err.Code == "evidence":
					return a.appendFailed(stage, chain.ApprovalGranted, errors.New(err.Msg))
				case err != nil:
					refusal = err
				default:
					a.approved, approvedGate = acc, gate
					a.trail(stage, TrailApproved, "approval %s by %s (%s) lifts soft gate %s", acc.a.ApprovalID, acc.a.KeyID, acc.a.ApproverClass, gate)
				}
			}
		}
	}
	for i := range d.Gates {
		g := &d.Gates[i]
		lifted := (lifts != nil && lifts[i] != nil) || (approvedGate != "" && g.GateID == approvedGate && g.Level == snapshot.LevelSoft)
		if lifted && lifts == nil {
			// lifted by the approval, recorded above
		} else if lifted && fresh[i] {
			grant := lifts[i]
			if err := a.append(chain.ExceptionGrantedPayload{
				GrantID: grant.GrantID, GateID: grant.GateID, Actor: grant.Actor, ReasonCode: grant.ReasonCode,
				IssuedAt: chain.FormatTime(grant.IssuedAt), ExpiresAt: chain.FormatTime(grant.ExpiresAt),
			}); err != nil {
				return a.appendFailed(stage, chain.ExceptionGranted, err)
			}
			a.base.Degraded = true
			a.trail(stage, TrailException, "grant %s lifts soft gate %s", grant.GrantID, g.GateID)
		} else if lifted {
			a.trail(stage, TrailException, "grant %s, recorded at stage 7, lifts soft gate %s", lifts[i].GrantID, g.GateID)
		}
		if governed {
			ids := g.RuleIDs
			if ids == nil {
				ids = []string{}
			}
			if err := a.append(chain.GateEvaluatedPayload{
				ResultID: a.newID(), GateID: g.GateID, Level: g.Level, Decision: g.Decision,
				ReasonCode: g.ReasonCode, RuleIDs: ids, ArgumentsDigest: a.argsDigest,
			}); err != nil {
				return a.appendFailed(stage, chain.GateEvaluated, err)
			}
		}
		if g.Decision != decision.Deny || lifted || g.Level == snapshot.LevelAdvisory {
			continue
		}
		if blocking == nil || (g.Level == snapshot.LevelHard && blocking.Level != snapshot.LevelHard) {
			blocking = g
		}
	}
	var budget string // the usage judged, when the policy has budgets
	if b := a.pol.budget; b != nil {
		budget = "; " + b.detail(a.usage, a.resv.WindowStart)
	}
	if blocking == nil {
		a.note(stage, TrailAllow, strings.Join(d.Reasons, ", ")+budget)
		return nil
	}
	// A soft denial escalates when the evaluator escalated (the only soft
	// denials left are approval requirements with an approver).
	escalate = blocking.Level == snapshot.LevelSoft && d.Disposition == decision.Escalate && d.ApproverClass != nil
	reason := blocking.ReasonCode
	if len(d.Reasons) > 0 && d.Disposition != decision.Allow {
		reason = d.Reasons[0]
	}
	a.base.ReasonCode = reason
	gate := blocking.GateID
	if escalate {
		code := blocking.ReasonCode
		if refusal != nil {
			// The presented approval was refused: the operation still
			// escalates (a new approval may be given), under the
			// refusal's code.
			code = refusal.Code
			a.base.ReasonCode = code
			a.trail(stage, TrailEscalate, "gate %s: approval by %s; the approval presented was refused: %s%s", gate, *d.ApproverClass, refusal.Error(), budget)
		} else {
			a.trail(stage, TrailEscalate, "gate %s: approval by %s%s", gate, *d.ApproverClass, budget)
		}
		if a.started {
			if rt, err := a.appendTerminal(chain.OperationDeniedPayload{GateID: &gate, ReasonCode: code, Disposition: "escalate", ApproverClass: d.ApproverClass}); err != nil {
				return a.evidenceFailure(stage, rt, err, false)
			}
		}
		req := a.approvalRequest(gate, blocking.ReasonCode, &d)
		if refusal != nil {
			req.Refusal = refusal.Code
		}
		return &Escalated{OutcomeBase: a.base, Approval: req}
	}
	a.trail(stage, TrailDeny, "gate %s: %s%s", gate, strings.Join(d.Reasons, ", "), budget)
	if a.started {
		if rt, err := a.appendTerminal(chain.OperationDeniedPayload{GateID: &gate, ReasonCode: blocking.ReasonCode, Disposition: "deny"}); err != nil {
			return a.evidenceFailure(stage, rt, err, false)
		}
	}
	return &Denied{OutcomeBase: a.base}
}

// exceptions returns, per gate, the exception that lifts its soft denial
// when exceptions lift every denial of the decision, and nil when they do
// not (a hard gate denies, or a denying soft gate has no grant): then no
// grant is taken. A grant this attempt already recorded (stage 7) still
// lifts its gate at the stage 10 recheck while unexpired; fresh marks the
// grants taken now, which are recorded.
func (a *attempt) exceptions(gates []decision.GateResult) (lifts []*ExceptionGrant, fresh []bool) {
	var need []string // denying soft gates the attempt holds no grant for
	soft := false
	for i := range gates {
		g := &gates[i]
		if g.Decision != decision.Deny {
			continue
		}
		switch g.Level {
		case snapshot.LevelHard:
			return nil, nil
		case snapshot.LevelSoft:
			soft = true
			need = append(need, g.GateID)
		}
	}
	if !soft {
		return nil, nil
	}
	now := a.e.now()
	held := func(gate string) *ExceptionGrant {
		for i := range a.grants {
			if g := &a.grants[i]; g.GateID == gate && now.Before(g.ExpiresAt) {
				return g
			}
		}
		return nil
	}
	need = slices.DeleteFunc(need, func(gate string) bool { return held(gate) != nil })
	taken := a.boundary.takeGrants(need, a.en.action.ID(), now)
	if taken == nil && len(need) > 0 {
		return nil, nil
	}
	lifts, fresh = make([]*ExceptionGrant, len(gates)), make([]bool, len(gates))
	for i := range gates {
		g := &gates[i]
		if g.Decision != decision.Deny || g.Level != snapshot.LevelSoft {
			continue
		}
		if h := held(g.GateID); h != nil {
			lifts[i] = h
			continue
		}
		for j := range taken {
			if taken[j].GateID == g.GateID {
				lifts[i], fresh[i] = &taken[j], true
			}
		}
	}
	a.grants = append(a.grants, taken...)
	return lifts, fresh
}

// Stage 8: user transformations, in configured order.
func (a *attempt) transform() Outcome {
	if len(a.e.cfg.Transformers) == 0 {
		// Nothing can have changed the arguments: no digest to recompute.
		a.note(8, TrailUnchanged, "no transformers")
		return nil
	}
	for _, t := range a.e.cfg.Transformers {
		in, err := cloneJSON(a.args)
		if err != nil {
			return a.deny(8, "transform_failed:"+t.Name, "arguments are not JSON")
		}
		var out map[string]any
		err = recovered(errUserPanic, func() (err error) {
			out, err = t.Transform(a.ctx, a.en.action.ID(), in)
			return err
		})
		if err != nil {
			return a.deny(8, "transform_failed:"+t.Name, "transformer %s refused", t.Name)
		}
		if out, err = cloneJSON(out); err != nil {
			return a.deny(8, "transform_failed:"+t.Name, "transformer %s returned non-JSON arguments", t.Name)
		}
		a.args = out
	}
	if d := digest.Of(a.args); d != a.argsDigest {
		a.changed = true
		a.argsDigest = d
		a.trail(8, TrailChanged, "arguments %s", d)
	} else {
		a.note(8, TrailUnchanged, strconv.Itoa(len(a.e.cfg.Transformers))+" transformers")
	}
	return nil
}

// Stage 9: re-normalize and re-validate transformed arguments.
func (a *attempt) renormalize() Outcome {
	if !a.changed {
		a.note(9, TrailSkipped, "arguments digest unchanged")
		return nil
	}
	n := new(normalize.Normalized)
	args, nerr := a.normalizeArgs(a.args, n)
	if nerr != nil {
		return a.deny(9, nerr.Reason, "%s", nerr.Detail)
	}
	if len(args) != len(a.args) {
		// A transformer dropped the shorthand's server or tool, which the
		// normalizer put back: the callable gets what was judged.
		a.args, a.argsDigest = args, digest.Of(args)
	}
	a.renorm = n
	a.note(9, TrailOK, "renormalized")
	return nil
}

// Stage 10: re-run every security evaluator whose inputs changed.
func (a *attempt) recheck() Outcome {
	if !a.changed {
		a.note(10, TrailSkipped, "arguments digest unchanged (stage 2): authorization, guards and policy stand")
		return nil
	}
	if o := a.authorize(); o != nil {
		return o
	}
	if o := a.guards(); o != nil {
		return o
	}
	if o := a.evaluate(10); o != nil {
		return o
	}
	a.trail(10, TrailOK, "rechecked arguments %s", a.argsDigest)
	return nil
}

// Stage 11: the pre-call evidence checkpoint.
func (a *attempt) precall() Outcome {
	if err := a.ctx.Err(); err != nil {
		return a.cancelled(11)
	}
	if a.started {
		if rt, err := a.flush(); err != nil {
			return a.evidenceFailure(11, rt, err, false)
		}
		a.trail(11, TrailOK, "%d records durable before the call", len(a.base.Records))
	} else {
		a.note(11, TrailSkipped, noEvidence(a.ec.Profile))
	}
	return nil
}

type attemptKey struct{}

// validScope reports whether a scope names what it claims: a durable run
// scope a run (and an owner attempt, if any). An ephemeral scope's id is
// correlation only and may be empty.
func validScope(s ExecutionScope) bool {
	if r, ok := s.(DurableRunScope); ok {
		return r.RunID != "" && (r.OwnerAttemptID == nil || *r.OwnerAttemptID != "")
	}
	return true
}

// AttemptFromContext returns the attempt id Execute gives the callable's
// context: it identifies this attempt (a retry is a new attempt; the key
// that spans retries is IdempotencyKeyFromContext's), and a test can prove
// the callable was reached through Execute.
func AttemptFromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(attemptKey{}).(string)
	return id, ok
}

type idempotencyKey struct{}

// IdempotencyKeyFromContext returns the request's IdempotencyKey from the
// context Execute gives its callable, and false when the request had none.
// Unlike the attempt id, it stays the same across the retries of one
// logical request (each a new attempt), so a callable passes it to a
// transport that deduplicates (an Idempotency-Key header, say).
func IdempotencyKeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(idempotencyKey{}).(string)
	return k, ok
}

type workspaceKey struct{}

// WorkspaceFromContext returns the trusted context's workspace from the
// context Execute gives the callable of an action with path or command
// hints: the directory the policy resolved its relative paths and
// commands against. A callable resolves them against the same, or
// refuses to run when it was built for another (builtin does).
func WorkspaceFromContext(ctx context.Context) (string, bool) {
	ws, ok := ctx.Value(workspaceKey{}).(string)
	return ws, ok
}

// attemptCtx is the callable's context: its parent with the attempt id
// under attemptKey, like context.WithValue, but stored in the attempt
// instead of a separate allocation.
type attemptCtx struct {
	context.Context
	id string
}

// Value implements context.Context.
func (c *attemptCtx) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return c.id
	}
	return c.Context.Value(key)
}

// String names the context like context.WithValue's do.
func (c *attemptCtx) String() string {
	return fmt.Sprintf("%v.WithValue(attemptKey, %s)", c.Context, c.id)
}

// invocationToken releases the callable exactly once: en holds the
// action's entry until the first call (or the attempt) takes it. One
// pointer rather than a flag and the callable: 8 bytes fewer keep
// attemptOut in the 1,280-byte size class.
type invocationToken struct {
	en   atomic.Pointer[entry]
	args map[string]any
}

func (t *invocationToken) call(ctx context.Context) (res any, err error) {
	en := t.en.Swap(nil)
	if en == nil {
		return nil, errors.New("executor: invocation token already used")
	}
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, errCallablePanic
		}
	}()
	return en.fn(ctx, t.args)
}

// errCallablePanic is a callable's panic as the attempt sees it: a
// failure of class callable_panic (its terminal record is appended like
// any failure's). The panic's value is not kept: failures carry a class,
// never raw text.
var (
	errCallablePanic = classError("callable_panic")
	errBackendPanic  = classError("backend_panic")
	// errBackendSkippedCall: the backend returned without error but never
	// made the call it was given.
	errBackendSkippedCall = classError("backend_skipped_call")
	errUserPanic          = classError("user_code_panic")
)

type classError string

func (e classError) Error() string      { return "executor: " + string(e) }
func (e classError) ErrorClass() string { return string(e) }

// recovered runs code of the composition root (an authorizer, a guard, a
// transformer) and turns a panic into perr: the stage
// then refuses or fails, as it does for an error, instead of the panic
// leaving Execute with its operation unclosed.
func recovered(perr error, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = perr
		}
	}()
	return f()
}

// Stages 12 and 13: invoke once, normalize the result, append the terminal.
func (a *attempt) invoke() Outcome {
	ctx := a.ctx
	cancel := func() {}
	if a.req.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, a.req.Timeout)
	}
	defer cancel()
	a.out.callCtx = attemptCtx{Context: ctx, id: a.base.AttemptID}
	ctx = &a.out.callCtx
	if a.req.IdempotencyKey != "" {
		// A separate value, not a field of attemptCtx: requests without a
		// key (and the hot path) keep attemptOut in its size class.
		ctx = context.WithValue(ctx, idempotencyKey{}, a.req.IdempotencyKey)
	}
	if a.durable() {
		a.outbox = &Outbox{}
		ctx = context.WithValue(ctx, outboxKey{}, a.outbox)
	}
	if a.reserved {
		a.meter = &UsageMeter{}
		ctx = context.WithValue(ctx, usageMeterKey{}, a.meter)
	}
	if h := a.en.action.Hints(); len(h.Paths) > 0 || h.Command != "" {
		// Relative paths and commands were judged against this
		// workspace; the callable must resolve them against the same.
		ctx = context.WithValue(ctx, workspaceKey{}, a.ec.Workspace)
	}
	tok := &a.out.token
	tok.args = a.args
	tok.en.Store(a.en)
	start := a.e.now()
	a.note(12, TrailInvoke, a.details.invoke)
	res, err := a.invokeBackend(ctx, tok)
	// The callable's messages and usage are fixed when it returns: a
	// goroutine it left behind cannot add to a commit it did not wait for.
	a.outbox.take()
	a.meter.take()
	// The token is spent when Invoke returns: a call the backend kept for
	// later fails instead of running outside the attempt, and a backend
	// that reports success without calling has failed.
	a.base.CallExecuted = tok.en.Swap(nil) == nil
	if err == nil && !a.base.CallExecuted {
		err = errBackendSkippedCall
	}
	dur := a.e.now().Sub(start).Microseconds()
	if dur < 0 {
		dur = 0
	}
	a.callDur = dur
	var out Outcome
	switch {
	case err == nil:
		rd := nullDigest
		if res != nil {
			rd = digest.Of(res)
		}
		a.out.succeeded = Succeeded{OutcomeBase: a.base, Result: res, ResultDigest: rd}
		out = &a.out.succeeded
	case errors.Is(err, ErrAmbiguous):
		a.base.ReasonCode = "external_result_ambiguous"
		out = &Ambiguous{OutcomeBase: a.base}
	case a.ctx.Err() != nil:
		a.base.ReasonCode = "cancelled"
		out = &Cancelled{OutcomeBase: a.base}
	case ctx.Err() != nil:
		a.base.ReasonCode = "timed_out"
		out = &TimedOut{OutcomeBase: a.base}
	default:
		class := "callable_error"
		var ec ErrorClass
		if errors.As(err, &ec) && validClass(ec.ErrorClass()) {
			class = ec.ErrorClass()
		}
		a.base.ReasonCode = class
		out = &Failed{OutcomeBase: a.base, Class: class, Result: res}
	}
	detail := durationDetail(dur)
	if k := out.Kind(); k == KindCancelled || k == KindTimedOut {
		// The kind says why the call ended; a class the callable found
		// as it ended (a bash process that escaped its session:
		// background_escaped) is kept in the detail.
		var ec ErrorClass
		if errors.As(err, &ec) && validClass(ec.ErrorClass()) {
			detail += "; the callable reported " + ec.ErrorClass()
		}
	}
	a.note(13, kindResult(out.Kind()), detail)
	if a.started {
		if rt, err := a.appendTerminal(terminalPayload(out, dur)); err != nil {
			ev := &GovernanceEvidenceError{CallExecuted: a.base.CallExecuted, RecordType: string(rt), Err: err}
			a.trail(13, TrailEvidenceFailed, "%s: %v (never retried)", rt, err)
			out.Base().EvidenceError = ev
		}
		// The outcome was built before the terminal: give it the whole
		// lists (the attempt appends nothing after this).
		out.Base().Records = a.base.Records
	}
	out.Base().Trail = a.base.Trail
	return out
}

// invokeBackend hands the token's call to the backend; the backend's own
// panic (outside the call) becomes errBackendPanic.
func (a *attempt) invokeBackend(ctx context.Context, tok *invocationToken) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, errBackendPanic
		}
	}()
	if cb, ok := a.backend.(ContainingBackend); ok {
		inv := &Invocation{ActionID: a.en.action.ID(), Policy: a.pol.snap, Decider: a.pol.eval, Workspace: a.ec.Workspace, Request: a.normalized()}
		return cb.InvokeContained(ctx, inv, tok.call)
	}
	return a.backend.Invoke(ctx, tok.call)
}

// durationDetails are stage 13's details for calls shorter than a
// millisecond, made once.
var durationDetails = func() (d [1000]string) {
	for i := range d {
		d[i] = strconv.Itoa(i) + "µs"
	}
	return
}()

// durationDetail is stage 13's trail detail: the call's duration in µs.
func durationDetail(us int64) string {
	if us >= 0 && us < int64(len(durationDetails)) {
		return durationDetails[us]
	}
	return string(append(strconv.AppendInt(make([]byte, 0, 24), us, 10), "µs"...))
}

// terminalPayload is the terminal record of a call's outcome.
func terminalPayload(out Outcome, dur int64) chain.Payload {
	switch o := out.(type) {
	case *Succeeded:
		return chain.CallableCompletedPayload{ResultDigest: o.ResultDigest, DurationUS: dur}
	case *Ambiguous:
		return chain.ExternalResultAmbiguousPayload{ReasonCode: "external_result_ambiguous", DurationUS: dur}
	case *Cancelled:
		return chain.OperationCancelledPayload{DurationUS: dur}
	case *TimedOut:
		return chain.OperationTimedOutPayload{DurationUS: dur}
	case *Failed:
		return chain.CallableFailedPayload{ErrorClass: o.Class, DurationUS: dur}
	}
	panic(fmt.Sprintf("executor: no terminal record for %T", out)) // invoke builds only the above
}

// nullDigest is the digest of a nil result (canonical "null").
var nullDigest = digest.Of(nil)

func validClass(c string) bool {
	if c == "" || len(c) > 64 {
		return false
	}
	for _, r := range c {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// durable reports whether stage 14 commits this attempt.
func (a *attempt) durable() bool {
	_, ok := a.ec.Scope.(DurableRunScope)
	return ok && a.ec.Profile == ProfileDurable && a.e.cfg.State != nil
}

// persist is stage 14: the durable profile commits the attempt, its outcome,
// the executor's action.outcome message and the messages the callable added
// to its Outbox, in one StateStore transaction.
func (a *attempt) persist(out Outcome) Outcome {
	b := out.Base()
	if !a.durable() {
		return out
	}
	scope := a.ec.Scope.(DurableRunScope)
	var rd *string
	if s, ok := out.(*Succeeded); ok {
		rd = &s.ResultDigest
	}
	payload, _ := json.Marshal(map[string]any{"request_id": b.RequestID, "attempt_id": b.AttemptID, "outcome": out.Kind(), "reason_code": b.ReasonCode})
	rec := AttemptRecord{
		RunID: scope.RunID, AttemptID: b.AttemptID, OwnerAttemptID: scope.OwnerAttemptID, RequestID: b.RequestID,
		OperationID: b.OperationID, ActionID: a.req.Action, RequestDigest: a.requestDigest(), Outcome: string(out.Kind()),
		ReasonCode: b.ReasonCode, ResultDigest: rd, CallExecuted: b.CallExecuted, Profile: ProfileDurable,
		StartedAt: a.startedAt, FinishedAt: a.e.now(),
		Outbox: []OutboxMessage{{MessageID: a.newID(), Topic: "action.outcome", PayloadJSON: string(payload)}},
	}
	for _, m := range a.outbox.take() {
		m.MessageID = a.newID()
		rec.Outbox = append(rec.Outbox, m)
	}
	if a.en != nil {
		rec.ActionID = a.en.action.ID()
	}
	if err := a.e.cfg.State.CommitAttempt(context.WithoutCancel(a.ctx), rec); err != nil {
		b.Trail = append(b.Trail, TrailEntry{Stage: 14, Result: TrailPersistFailed, Detail: err.Error()})
		b.StateError = err
		return out
	}
	b.Trail = append(b.Trail, TrailEntry{Stage: 14, Result: TrailOK, Detail: "attempt committed"})
	return out
}

// cloneJSON deep-copies arguments through JSON, so that later mutation by
// the caller or a transformer cannot reach what was checked. A string that
// is not UTF-8, which the round trip would silently replace, is an
// invalid_encoding *NormalizeError.
func cloneJSON(m map[string]any) (map[string]any, error) {
	if m == nil {
		return map[string]any{}, nil
	}
	if out, ok := cloneDirect(m); ok {
		return out, nil // what the round trip below returns, without it
	}
	if err := normalize.CheckArguments(m); err != nil {
		return nil, err // the round trip would replace the bytes with U+FFFD
	}
	return cloneRoundTrip(m)
}

// cloneRoundTrip is cloneJSON through encoding/json: Marshal, then decode
// with UseNumber.
func cloneRoundTrip(m map[string]any) (map[string]any, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
