package certificate

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"polc.dev/polc/approval"
	"polc.dev/polc/chain"
	"polc.dev/polc/snapshot"
)

// CheckApprovals checks every approval_granted record of a verified chain
// against the trust file's approver keys, offline (docs/approvals.md
// "What an auditor sees"): the recorded approval's signature verifies
// under an approver:<class> key valid at its issued_at and at the
// record's time, when it was used (else
// approval_forged, or approval_expired for a key outside its window); it
// approves, and its members are the record's (approval_forged); its class
// is the record's, which is the escalation's (approval_wrong_class); it is
// bound to the record's subject and gate and to the chain's policy
// (approval_wrong_request); the record was written inside its validity
// window (approval_expired). With snap, the chain's policy (nil when none
// was given), its lifetime (expires_at - issued_at) is at most the rule's
// expires_after (approval_too_long; see approvalMaxLifetime). A nonce
// used twice is the chain verifier's approval_replayed.
func CheckApprovals(res *chain.Result, trust *chain.Trust, snap *snapshot.Snapshot) []chain.Finding {
	var out []chain.Finding
	for _, r := range res.ApprovalRecords {
		p := r.Payload
		add := func(code chain.Code, msg, exp, act string) {
			out = append(out, chain.NewFinding(code, "approval_granted: "+msg).Values(exp, act).At(r.Sequence, r.Line))
		}
		// The record's time is when the executor used the approval:
		// its key must have been valid then, not only at issued_at.
		used, terr := chain.ParseTime(r.CreatedAt)
		if terr != nil {
			add(chain.CodeApprovalExpired, "the record's time is not a time: "+terr.Error(), "YYYY-MM-DDTHH:MM:SS.ffffffZ", r.CreatedAt)
			continue
		}
		a, key, err := approval.Open([]byte(p.SignedApproval), trust, used)
		if err != nil {
			var ae *approval.Error
			code := chain.CodeApprovalForged
			if errors.As(err, &ae) {
				switch ae.Code {
				case approval.CodeExpired:
					code = chain.CodeApprovalExpired
				case approval.CodeWrongClass:
					code = chain.CodeApprovalWrongClass
				}
			}
			add(code, err.Error(), "an approval signed by a trusted approver key", "not verified")
			continue
		}
		_ = key
		switch {
		case a.Decision != approval.DecisionApprove:
			add(chain.CodeApprovalForged, "the recorded approval refuses the request", approval.DecisionApprove, a.Decision)
		case a.Nonce != p.Nonce || a.IssuedAt != p.IssuedAt || a.ExpiresAt != p.ExpiresAt:
			add(chain.CodeApprovalForged, "the record's nonce or times differ from its signed approval's", a.Nonce+" "+a.IssuedAt+" "+a.ExpiresAt, p.Nonce+" "+p.IssuedAt+" "+p.ExpiresAt)
		case a.ApproverClass != p.ApproverClass:
			add(chain.CodeApprovalWrongClass, "the approval's class is not the escalation's", p.ApproverClass, a.ApproverClass)
		case a.SubjectDigest != p.SubjectDigest:
			add(chain.CodeApprovalWrongRequest, "the approval is bound to another request", p.SubjectDigest, a.SubjectDigest)
		case a.GateID != p.GateID:
			add(chain.CodeApprovalWrongRequest, "the approval is for another gate", p.GateID, a.GateID)
		case res.PolicyDigest != "" && a.PolicyDigest != res.PolicyDigest:
			add(chain.CodeApprovalWrongRequest, "the approval is bound to another policy", res.PolicyDigest, a.PolicyDigest)
		case r.CreatedAt < a.IssuedAt || r.CreatedAt >= a.ExpiresAt:
			add(chain.CodeApprovalExpired, "used outside its validity window", "["+a.IssuedAt+", "+a.ExpiresAt+")", r.CreatedAt+" (sequence "+strconv.FormatInt(r.Sequence, 10)+")")
		default:
			if limit, ok := approvalMaxLifetime(snap, p.GateID, p.ApproverClass); ok {
				issued, expires := a.Times()
				if life := expires.Sub(issued); life > limit {
					add(chain.CodeApprovalTooLong, "valid longer than the policy's expires_after for its gate and class", "at most "+limit.String(), life.String())
				}
			}
		}
	}
	return out
}

// approvalMaxLifetime is the longest expires_after of snap's approval
// rules for class that gate binds, and whether any has one. The chain
// does not record which of them matched (the executor bounds an approval
// by the shortest expires_after of the rules that matched), so the
// longest is the bound that never refuses an approval the executor could
// have accepted.
func approvalMaxLifetime(snap *snapshot.Snapshot, gate, class string) (time.Duration, bool) {
	if snap == nil {
		return 0, false
	}
	var ids []string
	for _, g := range snap.GateBindings {
		if g.GateID == gate {
			ids = append(ids, g.RuleIDs...)
		}
	}
	var best time.Duration
	found := false
	for _, r := range snap.CompiledRules {
		ar, ok := r.(*snapshot.ApprovalRule)
		if !ok || ar.ApproverClass == nil || *ar.ApproverClass != class || !slices.Contains(ids, ar.RuleID) {
			continue
		}
		if ar.ExpiresAfterMicroseconds == nil {
			// A rule without a limit matched as well as any: no bound.
			return 0, false
		}
		if d := time.Duration(*ar.ExpiresAfterMicroseconds) * time.Microsecond; !found || d > best {
			best, found = d, true
		}
	}
	return best, found
}
