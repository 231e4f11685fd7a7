package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"polc.dev/polc/approval"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/digest"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// ExecutionScope names the owner of an operation. It is a closed union:
// EphemeralScope or DurableRunScope.
type ExecutionScope interface {
	// ScopeKind is "ephemeral_operation" or "durable_run".
	ScopeKind() string
	isScope()
}

// EphemeralScope is a one-off SDK call. Its ID is correlation only and can
// never be resolved as a Run.
type EphemeralScope struct {
	ID string `json:"scope_id"`
}

// DurableRunScope binds an operation to a canonical Run; RunID is the only
// Run claim, OwnerAttemptID the already-created enclosing attempt.
type DurableRunScope struct {
	RunID          string  `json:"run_id"`
	OwnerAttemptID *string `json:"owner_attempt_id"`
}

// ScopeKind implements ExecutionScope.
func (EphemeralScope) ScopeKind() string { return "ephemeral_operation" }

// ScopeKind implements ExecutionScope.
func (DurableRunScope) ScopeKind() string { return "durable_run" }
func (EphemeralScope) isScope()           {}
func (DurableRunScope) isScope()          {}

func sameScope(a, b ExecutionScope) bool {
	switch a := a.(type) {
	case EphemeralScope:
		b, ok := b.(EphemeralScope)
		return ok && a == b
	case DurableRunScope:
		b, ok := b.(DurableRunScope)
		return ok && a.RunID == b.RunID && (a.OwnerAttemptID == nil) == (b.OwnerAttemptID == nil) &&
			(a.OwnerAttemptID == nil || *a.OwnerAttemptID == *b.OwnerAttemptID)
	}
	return false
}

// ExecutionRequest is what a caller asks for: untrusted input. Treat it as
// immutable once passed to Execute.
type ExecutionRequest struct {
	// RequestID identifies this request; a retry is a new request.
	RequestID string
	// Action is an action id or alias (or mcp:<server>/<tool>).
	Action string
	// Arguments are the action's arguments (JSON values).
	Arguments map[string]any
	// PrincipalClaim is who the caller says it is: policy input only,
	// refused when it disagrees with the trusted context.
	PrincipalClaim *string
	// Scope must equal the context's scope.
	Scope ExecutionScope
	// Timeout bounds the callable, from stage 12 (the invocation) on: 0
	// means no per-action deadline (the caller's context
	// still applies). It must not be negative: a negative timeout is
	// refused at stage 3 (invalid_request) rather than read as "none",
	// since it is most likely an unchecked subtraction.
	Timeout time.Duration
	// IdempotencyKey is the caller's key for the request, the same across
	// its retries: covered by the request digest (so it is in the
	// evidence), never used to retry within an attempt, and given to the
	// callable (IdempotencyKeyFromContext) for a transport that
	// deduplicates. It is not policy input.
	IdempotencyKey string
	// Metadata is the caller's annotations (JSON values): covered by the
	// request digest, never policy input and never trusted.
	Metadata map[string]any
	// Approvals are signed approvals (package approval) the caller
	// presents for this request, a retry of an escalated one
	// (docs/approvals.md). When a soft gate escalates, the first that
	// verifies (trusted approver key, validity window, class, subject,
	// gate, policy, lifetime, unused nonce) lifts it, is recorded
	// (approval_granted) and is spent; they never lift a hard denial.
	// They are not covered by the request digest: the approval binds
	// the request, not the other way round.
	Approvals [][]byte
}

// Digest is the sha256-v1 digest of the request's canonical JSON: what
// evidence records carry instead of the arguments.
func (r *ExecutionRequest) Digest() string {
	f := r.digestFormValue()
	return f.digest()
}

// digest is the sha256-v1 digest of the form's canonical JSON.
func (f *requestDigestForm) digest() string {
	// f.AppendCanonical called directly, not through jcs.Append's
	// interface: a form on the caller's stack stays there. It is exactly
	// what jcs.Append does with an Appender.
	bp := digest.Buffer()
	b, err := f.AppendCanonical((*bp)[:0])
	return digest.Finish(bp, b, err, "")
}

func (r *ExecutionRequest) digestForm() *requestDigestForm {
	f := r.digestFormValue()
	return &f
}

func (r *ExecutionRequest) digestFormValue() requestDigestForm {
	return requestDigestForm{
		RequestID: r.RequestID, Action: r.Action, Arguments: r.Arguments, PrincipalClaim: r.PrincipalClaim,
		Scope: r.Scope, TimeoutUS: r.Timeout.Microseconds(), IdempotencyKey: r.IdempotencyKey, Metadata: r.Metadata,
	}
}

// requestDigestForm is the canonical object an ExecutionRequest digest
// covers.
type requestDigestForm struct {
	RequestID      string         `json:"request_id"`
	Action         string         `json:"action"`
	Arguments      map[string]any `json:"arguments"`
	PrincipalClaim *string        `json:"principal_claim"`
	Scope          ExecutionScope `json:"-"` // {"kind", and the variant's members}
	TimeoutUS      int64          `json:"timeout_us"`
	IdempotencyKey string         `json:"idempotency_key"`
	Metadata       map[string]any `json:"metadata"`
}

// AppendCanonical implements jcs.Appender: the members in RFC 8785 order,
// written directly because every request is digested on the hot path.
// requestDigestReference in the tests is the naive form it must equal.
func (f *requestDigestForm) AppendCanonical(b []byte) ([]byte, error) {
	var err error
	if b, err = appendStrMember(b, `{"action":`, f.Action); err != nil {
		return nil, err
	}
	b = append(b, `,"arguments":`...)
	if b, err = jcs.Append(b, f.Arguments); err != nil {
		return nil, err
	}
	if b, err = appendStrMember(b, `,"idempotency_key":`, f.IdempotencyKey); err != nil {
		return nil, err
	}
	b = append(b, `,"metadata":`...)
	if b, err = jcs.Append(b, f.Metadata); err != nil {
		return nil, err
	}
	if f.PrincipalClaim == nil {
		b = append(b, `,"principal_claim":null`...)
	} else if b, err = appendStrMember(b, `,"principal_claim":`, *f.PrincipalClaim); err != nil {
		return nil, err
	}
	if b, err = appendStrMember(b, `,"request_id":`, f.RequestID); err != nil {
		return nil, err
	}
	b = append(b, `,"scope":`...)
	if b, err = (scopeForm{f.Scope}).AppendCanonical(b); err != nil {
		return nil, err
	}
	b = append(b, `,"timeout_us":`...)
	b = jcs.AppendInt(b, f.TimeoutUS)
	return append(b, '}'), nil
}

// appendStrMember appends key (the member's separator, name and colon,
// already canonical) and v as a JSON string; v must be valid UTF-8, which
// has no canonical form otherwise.
func appendStrMember(b []byte, key, v string) ([]byte, error) {
	b, err := jcs.AppendValidString(append(b, key...), v)
	if err != nil {
		return nil, fmt.Errorf("jcs: invalid UTF-8 in %s", strings.Trim(key, `{,":`))
	}
	return b, nil
}

// Principal is an authenticated actor.
type Principal struct {
	Kind string // e.g. "agent", "user", "service"
	ID   string
}

// String is the principal as policies see it: "kind:id".
func (p Principal) String() string { return p.Kind + ":" + p.ID }

// SnapshotRef pins an exact policy snapshot: all three members must be
// those of a snapshot in Config.Policies, or stage 3 refuses the attempt
// (policy_digest_mismatch) and OpenBoundary the boundary. Build it with
// SnapshotRefOf rather than member by member.
type SnapshotRef struct {
	PolicyID string
	Version  string
	Digest   string
}

// SnapshotRefOf returns the reference that pins s exactly (its policy id,
// version and digest). s should be a snapshot given to New in
// Config.Policies; a nil s gives the zero SnapshotRef, which pins nothing
// and is refused wherever a pin is checked.
func SnapshotRefOf(s *snapshot.Snapshot) SnapshotRef {
	if s == nil {
		return SnapshotRef{}
	}
	return SnapshotRef{PolicyID: s.PolicyID, Version: s.Version, Digest: s.Digest}
}

// InProcessBackendName is the ID of InProcessBackend, the backend New
// configures when Config.Backends is empty: the name an ExecutionContext
// gives in Backend to run callables in the executor's process.
const InProcessBackendName = "inprocess"

// ExecutionContext is the trusted context, built by the composition root
// (never deserialized from the request it authorizes).
type ExecutionContext struct {
	ContextID string
	Scope     ExecutionScope
	// Principal is the authenticated principal; it must be set.
	Principal Principal
	Tenant    string
	// Workspace is the absolute root paths are resolved against.
	Workspace string
	// Policy is the exact snapshot every request is evaluated against
	// (SnapshotRefOf). A zero or unknown reference is refused at stage 3.
	Policy SnapshotRef
	// Backend is the ID of the effect backend that runs the callable: one
	// of Config.Backends, or InProcessBackendName when those were left
	// empty. It has no default: an empty Backend is refused at stage 3
	// (unknown_backend) like any name the executor does not know, since
	// the backend decides which containment the action's descriptor can
	// rely on, and that choice is the composition root's to make.
	Backend string
	// Profile selects the persistence and evidence guarantees.
	Profile Profile
	// Boundary is the open task boundary (governed and certifiable).
	Boundary *TaskBoundary
	// Usage is budget consumption the executor does not account itself
	// (a runtime's own meter, say), added to what Config.Budgets counted
	// in the policy's window before the policy judges it.
	Usage normalize.Usage
}

// scopeForm is a scope's canonical form inside digests: {"kind", and the
// variant's members}, or null for anything but the two variants.
type scopeForm struct{ s ExecutionScope }

// AppendCanonical implements jcs.Appender.
func (f scopeForm) AppendCanonical(b []byte) ([]byte, error) {
	var err error
	switch s := f.s.(type) {
	case EphemeralScope:
		if b, err = appendStrMember(b, `{"kind":`, s.ScopeKind()); err != nil {
			return nil, err
		}
		if b, err = appendStrMember(b, `,"scope_id":`, s.ID); err != nil {
			return nil, err
		}
	case DurableRunScope:
		if b, err = appendStrMember(b, `{"kind":`, s.ScopeKind()); err != nil {
			return nil, err
		}
		if s.OwnerAttemptID == nil {
			b = append(b, `,"owner_attempt_id":null`...)
		} else if b, err = appendStrMember(b, `,"owner_attempt_id":`, *s.OwnerAttemptID); err != nil {
			return nil, err
		}
		if b, err = appendStrMember(b, `,"run_id":`, s.RunID); err != nil {
			return nil, err
		}
	default:
		return append(b, "null"...), nil
	}
	return append(b, '}'), nil
}

// Digest is the sha256-v1 digest of the context's canonical JSON: what a
// runtime logs or binds to say which trusted context an outcome was
// decided in. The boundary counts by id; Usage by value.
func (ec *ExecutionContext) Digest() string {
	var boundary *string
	if ec.Boundary != nil {
		boundary = &ec.Boundary.id
	}
	return digest.Of(map[string]any{
		"context_id": ec.ContextID, "scope": scopeForm{ec.Scope}, "principal": ec.Principal.String(),
		"tenant": ec.Tenant, "workspace": ec.Workspace,
		"policy":  map[string]any{"policy_id": ec.Policy.PolicyID, "version": ec.Policy.Version, "digest": ec.Policy.Digest},
		"backend": ec.Backend, "profile": string(ec.Profile), "task_boundary_id": boundary, "usage": ec.Usage,
	})
}

// OutcomeKind names an outcome variant.
type OutcomeKind string

// Outcome kinds (polc run --format json prints these).
const (
	KindSucceeded OutcomeKind = "succeeded"
	KindDenied    OutcomeKind = "denied"
	KindDeferred  OutcomeKind = "deferred"
	KindEscalated OutcomeKind = "escalated"
	KindFailed    OutcomeKind = "failed"
	KindCancelled OutcomeKind = "cancelled"
	KindTimedOut  OutcomeKind = "timed_out"
	KindAmbiguous OutcomeKind = "ambiguous"
)

// Outcome is the closed union of execution results. Every variant carries
// an OutcomeBase with the active profile.
type Outcome interface {
	Kind() OutcomeKind
	Base() *OutcomeBase
	isOutcome()
}

// OutcomeBase is what every outcome carries.
type OutcomeBase struct {
	Profile   Profile
	RequestID string
	AttemptID string
	// OperationID is set once operation_started was appended (governed)
	// or the attempt passed preflight (other profiles).
	OperationID *string
	// ReasonCode is the stable reason ("" for success).
	ReasonCode string
	// Decision is the policy decision, when policy was evaluated.
	Decision *decision.Decision
	// Trail is the ordered audit of the attempt's stages.
	Trail []TrailEntry
	// Preflight is the verified preflight report (stage 3).
	Preflight *ActionPreflightReport
	// CallExecuted says whether the callable was reached.
	CallExecuted bool
	// Degraded is set when a recorded exception lifted a soft denial.
	Degraded bool
	// Records are the evidence record ids appended for this attempt.
	Records []string
	// EvidenceError is set when a governed append failed.
	EvidenceError *GovernanceEvidenceError
	// StateError is set when the durable profile's commit failed.
	StateError error
}

// Base implements Outcome.
func (b *OutcomeBase) Base() *OutcomeBase { return b }
func (*OutcomeBase) isOutcome()           {}

// TrailEntry is one stage's verdict in the audit trail. Its JSON form is
// {"stage", "name", "result", "detail"} with detail omitted when empty.
// The name is derived from the stage (Name) and the result is a small
// enum: every attempt writes thirteen or fourteen entries, and an entry
// of 24 bytes instead of 56 is most of what keeps an attempt's memory in
// a smaller size class.
type TrailEntry struct {
	Stage  uint8
	Result TrailResult
	Detail string
}

// TrailResult is a stage's verdict. Its text (String, and the trail's
// JSON) is the constant's name in snake case: "ok", "evidence_failed".
type TrailResult uint8

// Trail results. Stage 13's is the outcome's kind (succeeded, failed,
// cancelled, timed_out, ambiguous).
const (
	TrailOK TrailResult = iota + 1
	TrailSkipped
	TrailAllow
	TrailDeny
	TrailDefer
	TrailEscalate
	TrailException
	TrailChanged
	TrailUnchanged
	TrailInvoke
	TrailSucceeded
	TrailFailed
	TrailCancelled
	TrailTimedOut
	TrailAmbiguous
	TrailEvidenceFailed
	TrailPersistFailed
	TrailApproved
)

var trailResultText = [...]string{
	TrailOK: "ok", TrailSkipped: "skipped", TrailAllow: "allow", TrailDeny: "deny", TrailDefer: "defer",
	TrailEscalate: "escalate", TrailException: "exception", TrailChanged: "changed", TrailUnchanged: "unchanged",
	TrailInvoke: "invoke", TrailSucceeded: "succeeded", TrailFailed: "failed", TrailCancelled: "cancelled",
	TrailTimedOut: "timed_out", TrailAmbiguous: "ambiguous", TrailEvidenceFailed: "evidence_failed",
	TrailPersistFailed: "persist_failed", TrailApproved: "approved",
}

// String is the result's text ("" for a value that is no result).
func (r TrailResult) String() string {
	if int(r) < len(trailResultText) {
		return trailResultText[r]
	}
	return ""
}

// kindResult is stage 13's result for an outcome of kind k (one of the
// kinds stage 13 produces).
func kindResult(k OutcomeKind) TrailResult {
	switch k {
	case KindSucceeded:
		return TrailSucceeded
	case KindCancelled:
		return TrailCancelled
	case KindTimedOut:
		return TrailTimedOut
	case KindAmbiguous:
		return TrailAmbiguous
	}
	return TrailFailed
}

// Name is the stage's name in StageNames ("" for a number outside 1-14).
func (e TrailEntry) Name() string {
	if e.Stage < 1 || int(e.Stage) >= len(StageNames) {
		return ""
	}
	return StageNames[e.Stage]
}

// trailJSON is TrailEntry's JSON form.
type trailJSON struct {
	Stage  int    `json:"stage"`
	Name   string `json:"name"`
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
}

// MarshalJSON encodes the entry with its stage's name and its result's
// text.
func (e TrailEntry) MarshalJSON() ([]byte, error) {
	return json.Marshal(trailJSON{int(e.Stage), e.Name(), e.Result.String(), e.Detail})
}

// UnmarshalJSON decodes what MarshalJSON encodes and refuses anything
// else: unknown members, a stage outside 1-14, a name that is not the
// stage's, a result that is none of the TrailResults.
func (e *TrailEntry) UnmarshalJSON(b []byte) error {
	var w trailJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("trail entry: %w", err)
	}
	if dec.More() {
		return errors.New("trail entry: data after the object")
	}
	if w.Stage < 1 || w.Stage >= len(StageNames) || w.Name != StageNames[w.Stage] {
		return fmt.Errorf("trail entry: stage %d is not named %q", w.Stage, w.Name)
	}
	t := TrailEntry{Stage: uint8(w.Stage), Detail: w.Detail}
	for r, text := range trailResultText {
		if text != "" && text == w.Result {
			t.Result = TrailResult(r)
		}
	}
	if t.Result == 0 {
		return fmt.Errorf("trail entry: unknown result %q", w.Result)
	}
	*e = t
	return nil
}

// Succeeded: the callable returned without error. Result may be nil; a
// nil result is a success, not a failure.
type Succeeded struct {
	OutcomeBase
	// Result is what the callable returned, as it returned it.
	Result any
	// ResultDigest is the sha256-v1 digest (lowercase hex) of Result's
	// canonical JSON (RFC 8785; a nil Result digests "null"). A result
	// with no canonical form (NaN or an infinity, a chan or func, a
	// cycle, nesting deeper than 1000) still succeeds, because the effect
	// has happened and cannot be refused after the fact: its digest is
	// then that of the text "unencodable: " followed by the encoder's
	// error, which binds no result. Return JSON values (strings, finite
	// numbers, bools, nil, []any, map[string]any, or structs that encode
	// to them) for a digest that identifies the result.
	ResultDigest string
}

// Denied: policy, guards, containment or the context refused; the callable
// was not reached.
type Denied struct{ OutcomeBase }

// Deferred: no capacity; retry at RetryAt with a new attempt.
type Deferred struct {
	OutcomeBase
	RetryAt time.Time
}

// Escalated: a soft gate requires approval by ApproverClass. The worker is
// not blocked; an approval starts a new attempt.
type Escalated struct {
	OutcomeBase
	Approval ApprovalRequest
}

// ApprovalRequest says who must approve what, until when
// (docs/approvals.md). File gives the form polc writes for an approver.
type ApprovalRequest struct {
	// ID identifies this approval request (an approval names it): the
	// escalated attempt's id, since each escalation issues one.
	ID            string
	ApproverClass string
	GateID        string
	// RequestID and RequestDigest are the escalated request's.
	RequestID     string
	RequestDigest string
	// SubjectDigest is what an approval must be bound to (SubjectDigest):
	// the retry, a new request, has the same one when nothing but its
	// identity changed.
	SubjectDigest string
	Action        string
	// Arguments are the arguments as stage 2 checked them (the
	// subject's); Target is their normalized reading.
	Arguments     map[string]any
	Target        approval.Target
	Principal     string
	Tenant        string
	Workspace     string
	ReasonCode    string
	RuleIDs       []string
	PolicyID      string
	PolicyVersion string
	PolicyDigest  string
	CreatedAt     time.Time
	// ExpiresAt is CreatedAt plus the rule's expires_after (ExpiresAfter),
	// past which no approval of it is valid.
	ExpiresAt    *time.Time
	ExpiresAfter time.Duration
	// Refusal is the code of the approval the request presented and the
	// executor refused (approval_expired, …), "" when it presented none.
	Refusal string
}

// Failed: the callable (or the evidence layer) failed. Class is a stable
// class, never raw error text.
type Failed struct {
	OutcomeBase
	Class string
	// Result is what the callable returned with its error, if anything
	// (bash's exit code and output for exit_status). It is not evidence.
	Result any
}

// Cancelled: the caller's context was cancelled.
type Cancelled struct{ OutcomeBase }

// TimedOut: the per-action deadline passed.
type TimedOut struct{ OutcomeBase }

// Ambiguous: the callable cannot tell whether its effect happened. It is
// never retried within the attempt.
type Ambiguous struct{ OutcomeBase }

// Kind implementations.
func (*Succeeded) Kind() OutcomeKind { return KindSucceeded }
func (*Denied) Kind() OutcomeKind    { return KindDenied }
func (*Deferred) Kind() OutcomeKind  { return KindDeferred }
func (*Escalated) Kind() OutcomeKind { return KindEscalated }
func (*Failed) Kind() OutcomeKind    { return KindFailed }
func (*Cancelled) Kind() OutcomeKind { return KindCancelled }
func (*TimedOut) Kind() OutcomeKind  { return KindTimedOut }
func (*Ambiguous) Kind() OutcomeKind { return KindAmbiguous }

// GovernanceEvidenceError is a failed governed evidence append. Before the
// call (CallExecuted false) the callable was never reached; after it
// (CallExecuted true) the effect happened and the append is never retried.
type GovernanceEvidenceError struct {
	CallExecuted bool
	RecordType   string
	Err          error
}

func (e *GovernanceEvidenceError) Error() string {
	return fmt.Sprintf("governance evidence: appending %s failed (call_executed=%v): %v", e.RecordType, e.CallExecuted, e.Err)
}

// Unwrap returns the store's error.
func (e *GovernanceEvidenceError) Unwrap() error { return e.Err }

// ErrorClass lets a callable's error name its stable class, the Failed
// outcome's Class and reason code (errors.As finds it anywhere in the
// error's chain). The class is a stable code, never error text (which may
// hold secrets): 1 to 64 characters, each of a-z, 0-9, '_' or '.'
// ("quota_exceeded", "http.status_503"). A class outside that grammar is
// replaced by "callable_error", as is an error without an ErrorClass, so
// that nothing unchecked reaches the outcome or the evidence. The
// executor's own classes (callable_panic, backend_panic,
// backend_skipped_call, governance_evidence) should not be reused.
type ErrorClass interface {
	ErrorClass() string
}
