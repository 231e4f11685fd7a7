package executor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"polc.dev/polc/approval"
	"polc.dev/polc/chain"
	"polc.dev/polc/decision"
	"polc.dev/polc/snapshot"
)

// ErrApprovalReplayed is what an ApprovalLedger returns for a nonce it
// has recorded before.
var ErrApprovalReplayed = errors.New("approval nonce already used")

// ApprovalLedger records the nonces of the approvals the executor has
// accepted: an approval is single-use. UseApprovalNonce records nonce
// atomically and returns ErrApprovalReplayed (wrapped or not) when it
// was recorded before. A ledger that a restart resets (MemoryApprovalLedger)
// lets an approval be replayed after the restart; statestore's SQLite
// store keeps them.
type ApprovalLedger interface {
	UseApprovalNonce(ctx context.Context, nonce, approvalID string, at time.Time) error
}

// MemoryApprovalLedger is an in-memory ApprovalLedger: single use within
// one process only.
type MemoryApprovalLedger struct {
	mu   sync.Mutex
	used map[string]string
}

// UseApprovalNonce implements ApprovalLedger.
func (l *MemoryApprovalLedger) UseApprovalNonce(_ context.Context, nonce, approvalID string, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.used[nonce]; ok {
		return ErrApprovalReplayed
	}
	if l.used == nil {
		l.used = map[string]string{}
	}
	l.used[nonce] = approvalID
	return nil
}

// acceptedApproval is the approval an attempt accepted (stage 7): a
// recheck (stage 10) of the same gate holds it while it is valid.
type acceptedApproval struct {
	a       *approval.Approval
	gate    string
	expires time.Time
}

// SubjectDigest is what an approval of an escalated request binds:
// approval.SubjectDigest of the action, the arguments as stage 2 checked
// them, the principal, tenant and workspace. The request id, its time and
// its metadata are not in it, so a retry (a new request) is the same
// subject; a changed argument is another.
func SubjectDigest(action string, args map[string]any, principal, tenant, workspace string) string {
	return approval.SubjectDigest(action, args, principal, tenant, workspace)
}

// subjectDigest is the attempt's SubjectDigest.
func (a *attempt) subjectDigest() string {
	return SubjectDigest(a.req.Action, a.argsChecked, a.principal, a.ec.Tenant, a.ec.Workspace)
}

// approvalRule returns the shortest expires_after of the matched approval
// rules, and whether any has one.
func (a *attempt) approvalLifetime(ids []string) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, r := range a.pol.snap.CompiledRules {
		ar, ok := r.(*snapshot.ApprovalRule)
		if !ok || ar.ExpiresAfterMicroseconds == nil || !slices.Contains(ids, ar.RuleID) {
			continue
		}
		d := time.Duration(*ar.ExpiresAfterMicroseconds) * time.Microsecond
		if !found || d < best {
			best, found = d, true
		}
	}
	return best, found
}

// approvalGate is the gate an approval lifts for decision d: the first
// soft gate that denies, when the decision escalates (no hard gate
// denies) and the request presented approvals; "" otherwise.
func approvalGate(d *decision.Decision, presented int) string {
	if presented == 0 || d.Disposition != decision.Escalate || d.ApproverClass == nil {
		return ""
	}
	for i := range d.Gates {
		g := &d.Gates[i]
		if g.Decision == decision.Deny && g.Level == snapshot.LevelHard {
			return ""
		}
	}
	for i := range d.Gates {
		g := &d.Gates[i]
		if g.Decision == decision.Deny && g.Level == snapshot.LevelSoft {
			return g.GateID
		}
	}
	return ""
}

// takeApproval verifies the request's approvals against the escalation of
// gate and accepts the first that holds, recording its nonce in the
// ledger. It returns the refusal of the most telling one otherwise: one
// bound to this request over one bound to another.
func (a *attempt) takeApproval(gate string, d *decision.Decision) (*acceptedApproval, *approval.Error) {
	cfg := &a.e.cfg
	if cfg.ApprovalTrust == nil || cfg.ApprovalLedger == nil {
		return nil, &approval.Error{Code: approval.CodeUnavailable, Msg: "the executor has no approver trust or approval ledger (Config.ApprovalTrust, Config.ApprovalLedger)"}
	}
	life, _ := a.approvalLifetime(d.RuleIDs)
	x := approval.Expect{
		SubjectDigest: a.subjectDigest(), PolicyDigest: a.pol.snap.Digest, GateID: gate,
		ApproverClass: *d.ApproverClass, Now: a.e.now(), MaxLifetime: life,
	}
	var best *approval.Error
	keep := func(err error) {
		var ae *approval.Error
		if !errors.As(err, &ae) {
			ae = &approval.Error{Code: approval.CodeMalformed, Msg: err.Error()}
		}
		if best == nil || (best.Code == approval.CodeWrongRequest && ae.Code != approval.CodeWrongRequest) {
			best = ae
		}
	}
	for _, signed := range a.req.Approvals {
		ap, _, err := approval.Open(signed, cfg.ApprovalTrust, x.Now)
		if err == nil {
			err = approval.Check(ap, x)
		}
		if err != nil {
			keep(err)
			continue
		}
		if err := cfg.ApprovalLedger.UseApprovalNonce(context.WithoutCancel(a.ctx), ap.Nonce, ap.ApprovalID, x.Now); err != nil {
			if errors.Is(err, ErrApprovalReplayed) {
				keep(&approval.Error{Code: approval.CodeReplayed, Msg: "approval " + ap.ApprovalID + " was used before"})
			} else {
				keep(&approval.Error{Code: approval.CodeUnavailable, Msg: "the approval ledger failed: " + err.Error()})
			}
			continue
		}
		_, expires := ap.Times()
		acc := &acceptedApproval{a: ap, gate: gate, expires: expires}
		if a.started {
			if err := a.append(chain.ApprovalGrantedPayload{
				ApproverClass: ap.ApproverClass, ExpiresAt: ap.ExpiresAt, GateID: gate, IssuedAt: ap.IssuedAt,
				Nonce: ap.Nonce, SignedApproval: string(signed), SubjectDigest: x.SubjectDigest,
			}); err != nil {
				return acc, &approval.Error{Code: "evidence", Msg: err.Error()}
			}
		}
		return acc, nil
	}
	return nil, best
}

// approvalRequest builds the escalated outcome's approval request.
func (a *attempt) approvalRequest(gate, reason string, d *decision.Decision) ApprovalRequest {
	// One reading of the clock, as the expiry alone took before the
	// request had a creation time: the clock of a reproducible run
	// advances on every reading.
	now := a.e.now()
	r := ApprovalRequest{
		ID: a.base.AttemptID, RequestID: a.req.RequestID, ApproverClass: *d.ApproverClass, GateID: gate,
		RequestDigest: a.requestDigest(), SubjectDigest: a.subjectDigest(), Action: a.req.Action,
		Arguments: a.argsChecked, Principal: a.principal, Tenant: a.ec.Tenant, Workspace: a.ec.Workspace, ReasonCode: reason, RuleIDs: slices.Clone(d.RuleIDs),
		PolicyID: a.pol.snap.PolicyID, PolicyVersion: a.pol.snap.Version, PolicyDigest: a.pol.snap.Digest,
		CreatedAt: now,
	}
	if r.RuleIDs == nil {
		r.RuleIDs = []string{}
	}
	if life, ok := a.approvalLifetime(d.RuleIDs); ok {
		r.ExpiresAfter = life
		exp := now.Add(life)
		r.ExpiresAt = &exp
	}
	n := a.normalized()
	r.Target = approval.Target{Commands: [][]string{}, Paths: []approval.PathAccess{}, Hosts: []string{}}
	for _, c := range n.Commands {
		r.Target.Commands = append(r.Target.Commands, slices.Clone(c))
	}
	for _, p := range n.Paths {
		r.Target.Paths = append(r.Target.Paths, approval.PathAccess{Path: p.Path, Access: p.Access})
	}
	r.Target.Hosts = append(r.Target.Hosts, n.Hosts...)
	if n.MCP != nil {
		m := n.MCP.Server + "/" + n.MCP.Tool
		if n.MCP.Resource != nil {
			m += " " + *n.MCP.Resource
		}
		r.Target.MCP = &m
	}
	return r
}

// File is the approval request as polc writes it for an approver
// (approval.Request): what polc approvals show prints and polc approve
// signs.
func (r *ApprovalRequest) File() *approval.Request {
	f := &approval.Request{
		Version: approval.Version, ID: r.ID, RequestID: r.RequestID, RequestDigest: r.RequestDigest,
		SubjectDigest: r.SubjectDigest, Action: r.Action, Arguments: r.Arguments, Principal: r.Principal, Tenant: r.Tenant,
		Workspace:     r.Workspace,
		ApproverClass: r.ApproverClass, GateID: r.GateID, ReasonCode: r.ReasonCode, RuleIDs: r.RuleIDs,
		PolicyID: r.PolicyID, PolicyVersion: r.PolicyVersion, PolicyDigest: r.PolicyDigest,
		CreatedAt: chain.FormatTime(r.CreatedAt), ExpiresAfterUS: r.ExpiresAfter.Microseconds(),
	}
	if f.RuleIDs == nil {
		f.RuleIDs = []string{}
	}
	if f.Arguments == nil {
		f.Arguments = map[string]any{}
	}
	if r.ExpiresAt != nil {
		f.ExpiresAt = chain.FormatTime(*r.ExpiresAt)
	}
	return f
}
