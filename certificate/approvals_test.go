package certificate_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/approval"
	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
	"polc.dev/polc/snapshot"
)

// approvalChain is a closed chain with one operation per approval: each
// lifted by its approval_granted record (payload from rec, the signed
// approval from a), a soft deny of gate g and a completed call.
func approvalChain(t *testing.T, p *evidencegen.Producer, recs ...chain.ApprovalGrantedPayload) *chain.Result {
	t.Helper()
	for _, rec := range recs {
		op := p.Start("bash")
		p.Append(op, rec)
		p.Gate(op, evidencegen.Gate{ID: rec.GateID, Level: "soft", Decision: "deny"})
		p.Append(op, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: evidencegen.Digest("r")})
	}
	p.Close()
	res, err := chain.Verify(bytes.NewReader(p.JSONL()), chain.VerifyOptions{RequireClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestCheckApprovals: a recorded approval verifies against the trust
// file's approver key; each mutation of the approval or its record is
// reported with its stable code, and a nonce used twice is reported by
// the chain verifier itself.
func TestCheckApprovals(t *testing.T) {
	rm := evidencegen.NewKey("release-manager", "approvals")
	intern := evidencegen.NewKey("intern", "approvals")
	trust, err := chain.ParseTrust([]byte("approver:release-manager " + rm.VKey + "\napprover:intern " + intern.VKey + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	issued := evidencegen.Epoch.Add(-time.Minute)
	snap, _ := evidencegen.Snapshot("approvals", "1", evidencegen.NewIDs("approvals-snapshot"))
	mk := func(p *evidencegen.Producer, key *evidencegen.Key, nonce string, mutate func(*approval.Approval), mutRec func(*chain.ApprovalGrantedPayload)) chain.ApprovalGrantedPayload {
		a := &approval.Approval{
			Version: 1, ApprovalID: "00000000-0000-4000-8000-0000000000a1", RequestID: "00000000-0000-4000-8000-0000000000a2",
			Decision: approval.DecisionApprove, ApproverClass: "release-manager", GateID: "release",
			KeyID: key.Signer.Name() + "+" + strings.Split(key.VKey, "+")[1], Nonce: nonce,
			PolicyDigest: p.Snapshot.Digest, SubjectDigest: evidencegen.Digest("subject"),
			IssuedAt: chain.FormatTime(issued), ExpiresAt: chain.FormatTime(issued.Add(time.Hour)),
		}
		if mutate != nil {
			mutate(a)
		}
		signed, err := approval.Sign(a, key.Signer)
		if err != nil {
			t.Fatal(err)
		}
		rec := chain.ApprovalGrantedPayload{ApproverClass: "release-manager", ExpiresAt: a.ExpiresAt, GateID: "release", IssuedAt: a.IssuedAt,
			Nonce: a.Nonce, SignedApproval: string(signed), SubjectDigest: evidencegen.Digest("subject")}
		if mutRec != nil {
			mutRec(&rec)
		}
		return rec
	}
	nonce := strings.Repeat("1", 64)
	cases := []struct {
		name   string
		key    *evidencegen.Key
		mutate func(*approval.Approval)
		mutRec func(*chain.ApprovalGrantedPayload)
		code   chain.Code
	}{
		{"valid", rm, nil, nil, ""},
		{"untrusted key", evidencegen.NewKey("release-manager", "other"), nil, nil, chain.CodeApprovalForged},
		{"signed approval altered", rm, nil, func(r *chain.ApprovalGrantedPayload) {
			r.SignedApproval = strings.Replace(r.SignedApproval, `"note":""`, `"note":"x"`, 1)
		}, chain.CodeApprovalForged},
		{"record nonce differs", rm, nil, func(r *chain.ApprovalGrantedPayload) { r.Nonce = strings.Repeat("2", 64) }, chain.CodeApprovalForged},
		{"a refusal recorded", rm, func(a *approval.Approval) { a.Decision = approval.DecisionDeny }, nil, chain.CodeApprovalForged},
		{"key of another class", intern, nil, nil, chain.CodeApprovalWrongClass},
		{"class not the escalation's", intern, func(a *approval.Approval) { a.ApproverClass = "intern" }, nil, chain.CodeApprovalWrongClass},
		{"another subject", rm, func(a *approval.Approval) { a.SubjectDigest = evidencegen.Digest("other") }, nil, chain.CodeApprovalWrongRequest},
		{"another gate", rm, func(a *approval.Approval) { a.GateID = "other" }, nil, chain.CodeApprovalWrongRequest},
		{"another policy", rm, func(a *approval.Approval) { a.PolicyDigest = evidencegen.Digest("policy") }, nil, chain.CodeApprovalWrongRequest},
		{"used after expiry", rm, func(a *approval.Approval) {
			a.IssuedAt = chain.FormatTime(issued.Add(-2 * time.Hour))
			a.ExpiresAt = chain.FormatTime(issued.Add(-time.Hour))
		}, nil, chain.CodeApprovalExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := evidencegen.NewProducer("approvals-"+c.name, snap)
			res := approvalChain(t, p, mk(p, c.key, nonce, c.mutate, c.mutRec))
			fs := certificate.CheckApprovals(res, trust, nil)
			if c.code == "" {
				if len(fs) != 0 || !res.OK() || res.Approvals != 1 {
					t.Fatalf("valid approval: %v %v", fs, res.Findings)
				}
				return
			}
			if len(fs) != 1 || fs[0].Code != c.code {
				t.Fatalf("findings %v, want one %s", fs, c.code)
			}
		})
	}
	// The key was valid at issued_at (the signer's choice) but its
	// valid_until passed before the record's time, when it was used.
	t.Run("key expired before use", func(t *testing.T) {
		until := issued.Add(30 * time.Second).UTC().Format(time.RFC3339)
		short, err := chain.ParseTrust([]byte("approver:release-manager " + rm.VKey + " valid_until=" + until + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		p := evidencegen.NewProducer("approvals-key-expired", snap)
		res := approvalChain(t, p, mk(p, rm, nonce, nil, nil))
		fs := certificate.CheckApprovals(res, short, nil)
		if len(fs) != 1 || fs[0].Code != chain.CodeApprovalExpired || !strings.Contains(fs[0].Message, "time of use") {
			t.Fatalf("findings %v, want one approval_expired (time of use)", fs)
		}
	})
	// With the chain's snapshot, an approval valid longer than the
	// expires_after of its gate's approval rules for its class is
	// approval_too_long; the recorded one is valid for 1h.
	t.Run("longer than expires_after", func(t *testing.T) {
		withRules := func(limits ...time.Duration) *snapshot.Snapshot {
			s := *snap
			s.CompiledRules = snapshot.Rules{}
			b := snapshot.GateBinding{GateID: "release", Level: "soft"}
			for i, l := range limits {
				id := fmt.Sprintf("approval[release-manager]:bash:%d", i)
				class, us := "release-manager", l.Microseconds()
				ar := &snapshot.ApprovalRule{RuleBase: snapshot.RuleBase{RuleID: id, Order: i, Effect: "require_approval"}, Action: "bash", ApproverClass: &class}
				if l > 0 {
					ar.ExpiresAfterMicroseconds = &us
				}
				s.CompiledRules = append(s.CompiledRules, ar)
				b.RuleIDs = append(b.RuleIDs, id)
			}
			s.GateBindings = []snapshot.GateBinding{b}
			return &s
		}
		p := evidencegen.NewProducer("approvals-too-long", snap)
		res := approvalChain(t, p, mk(p, rm, nonce, nil, nil))
		for _, c := range []struct {
			name   string
			limits []time.Duration
			want   bool
		}{
			{"30m rule", []time.Duration{30 * time.Minute}, true},
			{"1h rule", []time.Duration{time.Hour}, false},
			{"30m and 2h rules (which matched is unknown)", []time.Duration{30 * time.Minute, 2 * time.Hour}, false},
			{"a rule without expires_after", []time.Duration{30 * time.Minute, 0}, false},
			{"no rule of the gate", nil, false},
		} {
			fs := certificate.CheckApprovals(res, trust, withRules(c.limits...))
			got := len(fs) == 1 && fs[0].Code == chain.CodeApprovalTooLong
			if got != c.want || (!c.want && len(fs) != 0) {
				t.Errorf("%s: findings %v, want approval_too_long %v", c.name, fs, c.want)
			}
		}
		if fs := certificate.CheckApprovals(res, trust, nil); len(fs) != 0 {
			t.Errorf("without a snapshot: %v", fs)
		}
	})
	t.Run("replayed", func(t *testing.T) {
		p := evidencegen.NewProducer("approvals-replayed", snap)
		rec := mk(p, rm, nonce, nil, nil)
		res := approvalChain(t, p, rec, rec)
		if res.First(chain.CodeApprovalReplayed) == nil {
			t.Fatalf("findings %v, want approval_replayed", res.Findings)
		}
	})
}

// TestGateSummaryCountsApprovals: Derive counts approval_granted records;
// approval_count is in the certificate only when it is not zero (so a
// certificate without approvals keeps its bytes) and a stated 0 is refused.
func TestGateSummaryCountsApprovals(t *testing.T) {
	rm := evidencegen.NewKey("release-manager", "approvals")
	snap, _ := evidencegen.Snapshot("approvals", "1", evidencegen.NewIDs("approvals-snapshot"))
	p := evidencegen.NewProducer("approvals-summary", snap)
	issued := evidencegen.Epoch.Add(-time.Minute)
	a := &approval.Approval{
		Version: 1, ApprovalID: "00000000-0000-4000-8000-0000000000a1", RequestID: "00000000-0000-4000-8000-0000000000a2",
		Decision: approval.DecisionApprove, ApproverClass: "release-manager", GateID: "release",
		KeyID: rm.Signer.Name() + "+" + strings.Split(rm.VKey, "+")[1], Nonce: strings.Repeat("1", 64),
		PolicyDigest: snap.Digest, SubjectDigest: evidencegen.Digest("subject"),
		IssuedAt: chain.FormatTime(issued), ExpiresAt: chain.FormatTime(issued.Add(time.Hour)),
	}
	signed, err := approval.Sign(a, rm.Signer)
	if err != nil {
		t.Fatal(err)
	}
	res := approvalChain(t, p, chain.ApprovalGrantedPayload{ApproverClass: "release-manager", ExpiresAt: a.ExpiresAt, GateID: "release",
		IssuedAt: a.IssuedAt, Nonce: a.Nonce, SignedApproval: string(signed), SubjectDigest: a.SubjectDigest})
	sum, grade := certificate.Derive(res)
	if sum.ApprovalCount != 1 || sum.SoftDeny != 1 || grade != certificate.GradeFull {
		t.Fatalf("summary %+v grade %s", sum, grade)
	}
	c := &certificate.Certificate{GateSummary: sum}
	b, err := c.Marshal()
	if err != nil || !bytes.Contains(b, []byte(`"approval_count":1,`)) {
		t.Fatalf("%s %v", b, err)
	}
	c.GateSummary.ApprovalCount = 0
	if b, _ := c.Marshal(); bytes.Contains(b, []byte("approval_count")) {
		t.Fatalf("approval_count written when zero: %s", b)
	}
	var g certificate.GateSummary
	zero := `{"advisory_allow":0,"advisory_deny":0,"approval_count":0,"exception_count":0,"hard_allow":0,"hard_deny":0,"soft_allow":0,"soft_deny":0}`
	if err := g.UnmarshalJSON([]byte(zero)); err == nil {
		t.Fatal("approval_count 0 accepted")
	}
	if err := g.UnmarshalJSON([]byte(strings.Replace(zero, `"approval_count":0`, `"approval_count":3`, 1))); err != nil || g.ApprovalCount != 3 {
		t.Fatalf("approval_count 3: %v %+v", err, g)
	}
	if err := g.UnmarshalJSON([]byte(strings.Replace(zero, `"approval_count":0`, `"approvals":3`, 1))); err == nil {
		t.Fatal("an unknown member accepted")
	}
}
