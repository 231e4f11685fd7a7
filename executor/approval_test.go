package executor_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/approval"
	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
	"polc.dev/polc/keys"
)

// approver is a test approver key and the trust file naming it.
type approver struct {
	signer note.Signer
	trust  *chain.Trust
}

func newApprover(t testing.TB, name, class string) *approver {
	t.Helper()
	skey, vkey, err := keys.Generate(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := chain.ParseTrust([]byte("approver:" + class + " " + vkey + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &approver{signer: s, trust: tr}
}

var approvalNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// sign returns a signed approval of write_note with args for gate notes,
// changed by mutate before it is signed.
func (ap *approver) sign(t testing.TB, r *rig, args map[string]any, mutate func(*approval.Approval)) []byte {
	t.Helper()
	nonce, err := approval.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	a := &approval.Approval{
		Version: approval.Version, ApprovalID: executor.NewUUID(), RequestID: executor.NewUUID(), Decision: approval.DecisionApprove,
		ApproverClass: "lead", GateID: "notes", KeyID: keyID(ap.signer), Nonce: nonce, PolicyDigest: r.snap.Digest,
		SubjectDigest: executor.SubjectDigest("write_note", args, "agent:a", "acme", "/ws"),
		IssuedAt:      chain.FormatTime(approvalNow.Add(-time.Minute)), ExpiresAt: chain.FormatTime(approvalNow.Add(30 * time.Minute)),
	}
	if mutate != nil {
		mutate(a)
	}
	b, err := approval.Sign(a, ap.signer)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keyID(s note.Signer) string {
	v := s.Name() + "+"
	const hexdigits = "0123456789abcdef"
	h := s.KeyHash()
	for i := 7; i >= 0; i-- {
		v += string(hexdigits[(h>>(4*i))&0xf])
	}
	return v
}

func approvalRig(t testing.TB, ap *approver, ledger executor.ApprovalLedger, store chain.Store) *rig {
	return newRig(t, store, func(c *executor.Config) {
		c.ApprovalTrust, c.ApprovalLedger = ap.trust, ledger
	})
}

func withApprovals(r executor.ExecutionRequest, signed ...[]byte) executor.ExecutionRequest {
	r.Approvals = signed
	return r
}

// TestApprovalLiftsEscalation: an escalated write_note, retried as a new
// request with a signed approval of the lead class, runs; the approval is
// recorded (approval_granted) before the gate results and the chain
// verifies.
func TestApprovalLiftsEscalation(t *testing.T) {
	store := chain.NewMemStore()
	ap := newApprover(t, "lead-key", "lead")
	r := approvalRig(t, ap, &executor.MemoryApprovalLedger{}, store)
	b, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	ec := r.ctx(executor.ProfileGoverned, b)
	args := map[string]any{"text": "hi"}
	out := r.exec.Execute(context.Background(), req("1", "write_note", args), ec)
	esc, ok := out.(*executor.Escalated)
	if !ok {
		t.Fatalf("first attempt: %s %s, want escalated", out.Kind(), out.Base().ReasonCode)
	}
	want := executor.SubjectDigest("write_note", args, "agent:a", "acme", "/ws")
	if esc.Approval.SubjectDigest != want || esc.Approval.ApproverClass != "lead" || esc.Approval.GateID != "notes" || esc.Approval.ID == "" {
		t.Fatalf("approval request %+v", esc.Approval)
	}
	if _, err := approval.ParseRequest(mustMarshal(t, esc.Approval.File())); err != nil {
		t.Fatalf("the approval request file does not parse: %v", err)
	}
	signed := ap.sign(t, r, args, func(a *approval.Approval) { a.RequestID = esc.Approval.ID })
	out = r.exec.Execute(context.Background(), withApprovals(req("2", "write_note", args), signed), ec)
	if out.Kind() != executor.KindSucceeded {
		t.Fatalf("retry: %s %s %v", out.Kind(), out.Base().ReasonCode, out.Base().Trail)
	}
	if r.calls["write_note"].Load() != 1 {
		t.Fatalf("write_note ran %d times", r.calls["write_note"].Load())
	}
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	_ = res
	vr, err := chain.Verify(bytes.NewReader(store.Export(b.ChainID())), chain.VerifyOptions{RequireClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	if !vr.OK() || vr.Approvals != 1 || len(vr.ApprovalRecords) != 1 {
		t.Fatalf("chain: ok=%v approvals=%d findings=%v", vr.OK(), vr.Approvals, vr.Findings)
	}
	if got := vr.ApprovalRecords[0].Payload.SignedApproval; got != string(signed) {
		t.Fatalf("recorded approval differs from the one presented")
	}
}

func mustMarshal(t testing.TB, f *approval.Request) []byte {
	t.Helper()
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestApprovalRefusals: each way an approval can fail to lift the
// escalation leaves the request escalated under the refusal's code, the
// callable unreached.
func TestApprovalRefusals(t *testing.T) {
	ap := newApprover(t, "lead-key", "lead")
	other := newApprover(t, "lead-key", "lead") // same name, another key: not trusted
	ops := newApprover(t, "ops-key", "ops")
	args := map[string]any{"text": "hi"}
	cases := []struct {
		name   string
		signed func(r *rig) []byte
		args   map[string]any
		code   string
	}{
		{"forged", func(r *rig) []byte { return other.sign(t, r, args, nil) }, args, approval.CodeForged},
		{"tampered", func(r *rig) []byte {
			b := ap.sign(t, r, args, nil)
			return bytes.Replace(b, []byte(`"note":""`), []byte(`"note":"x"`), 1)
		}, args, approval.CodeForged},
		{"expired", func(r *rig) []byte {
			return ap.sign(t, r, args, func(a *approval.Approval) {
				a.IssuedAt = chain.FormatTime(approvalNow.Add(-time.Hour))
				a.ExpiresAt = chain.FormatTime(approvalNow.Add(-time.Second))
			})
		}, args, approval.CodeExpired},
		{"not yet valid", func(r *rig) []byte {
			return ap.sign(t, r, args, func(a *approval.Approval) {
				a.IssuedAt = chain.FormatTime(approvalNow.Add(time.Minute))
				a.ExpiresAt = chain.FormatTime(approvalNow.Add(time.Hour))
			})
		}, args, approval.CodeExpired},
		{"longer than expires_after", func(r *rig) []byte {
			return ap.sign(t, r, args, func(a *approval.Approval) {
				a.ExpiresAt = chain.FormatTime(approvalNow.Add(2 * time.Hour))
			})
		}, args, approval.CodeTooLong},
		{"wrong class", func(r *rig) []byte {
			return ops.sign(t, r, args, func(a *approval.Approval) { a.ApproverClass = "ops" })
		}, args, approval.CodeWrongClass},
		{"class not the key's", func(r *rig) []byte {
			return ops.sign(t, r, args, nil) // an ops key signing for lead
		}, args, approval.CodeWrongClass},
		{"changed request", func(r *rig) []byte { return ap.sign(t, r, args, nil) }, map[string]any{"text": "something else"}, approval.CodeWrongRequest},
		{"wrong gate", func(r *rig) []byte {
			return ap.sign(t, r, args, func(a *approval.Approval) { a.GateID = "other" })
		}, args, approval.CodeWrongRequest},
		{"wrong policy", func(r *rig) []byte {
			return ap.sign(t, r, args, func(a *approval.Approval) { a.PolicyDigest = strings.Repeat("0", 64) })
		}, args, approval.CodeWrongRequest},
		{"refusal", func(r *rig) []byte {
			return ap.sign(t, r, args, func(a *approval.Approval) { a.Decision = approval.DecisionDeny })
		}, args, approval.CodeRefused},
		{"malformed", func(*rig) []byte { return []byte("not an approval") }, args, approval.CodeMalformed},
	}
	trust := &chain.Trust{Keys: append(append([]*chain.Key{}, ap.trust.Keys...), ops.trust.Keys...)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, nil, func(cfg *executor.Config) {
				cfg.ApprovalTrust, cfg.ApprovalLedger = trust, &executor.MemoryApprovalLedger{}
			})
			out := r.exec.Execute(context.Background(), withApprovals(req("1", "write_note", c.args), c.signed(r)), r.ctx(executor.ProfileMinimal, nil))
			esc, ok := out.(*executor.Escalated)
			if !ok || out.Base().ReasonCode != c.code || esc.Approval.Refusal != c.code {
				t.Fatalf("got %s %s, want escalated %s (%v)", out.Kind(), out.Base().ReasonCode, c.code, out.Base().Trail)
			}
			if n := r.calls["write_note"].Load(); n != 0 {
				t.Fatalf("the callable ran %d times", n)
			}
		})
	}
}

// TestApprovalReplay: an approval is spent by the attempt it lifts; the
// same approval on the next request is refused (approval_replayed).
func TestApprovalReplay(t *testing.T) {
	ap := newApprover(t, "lead-key", "lead")
	r := approvalRig(t, ap, &executor.MemoryApprovalLedger{}, nil)
	args := map[string]any{"text": "hi"}
	signed := ap.sign(t, r, args, nil)
	ec := r.ctx(executor.ProfileMinimal, nil)
	if out := r.exec.Execute(context.Background(), withApprovals(req("1", "write_note", args), signed), ec); out.Kind() != executor.KindSucceeded {
		t.Fatalf("first use: %s %s", out.Kind(), out.Base().ReasonCode)
	}
	out := r.exec.Execute(context.Background(), withApprovals(req("2", "write_note", args), signed), ec)
	if out.Kind() != executor.KindEscalated || out.Base().ReasonCode != approval.CodeReplayed {
		t.Fatalf("replay: %s %s", out.Kind(), out.Base().ReasonCode)
	}
	if n := r.calls["write_note"].Load(); n != 1 {
		t.Fatalf("the callable ran %d times", n)
	}
}

// TestApprovalNeverLiftsHardDenial: echo is denied outright; an approval
// bound to it (signed by a trusted key, for the right subject) changes
// nothing and is not spent.
func TestApprovalNeverLiftsHardDenial(t *testing.T) {
	ap := newApprover(t, "lead-key", "lead")
	ledger := &executor.MemoryApprovalLedger{}
	r := approvalRig(t, ap, ledger, nil)
	args := map[string]any{"text": "hi"}
	signed := ap.sign(t, r, args, func(a *approval.Approval) {
		a.SubjectDigest = executor.SubjectDigest("echo", args, "agent:a", "acme", "/ws")
	})
	out := r.exec.Execute(context.Background(), withApprovals(req("1", "echo", args), signed), r.ctx(executor.ProfileMinimal, nil))
	if out.Kind() != executor.KindDenied || r.calls["echo"].Load() != 0 {
		t.Fatalf("echo with an approval: %s %s", out.Kind(), out.Base().ReasonCode)
	}
	a, _ := approval.Parse(signed)
	if err := ledger.UseApprovalNonce(context.Background(), a.Nonce, a.ApprovalID, approvalNow); err != nil {
		t.Fatalf("the approval was spent on a denied request: %v", err)
	}
}

// TestApprovalUnavailable: an executor without approver trust refuses
// every approval rather than trusting it.
func TestApprovalUnavailable(t *testing.T) {
	ap := newApprover(t, "lead-key", "lead")
	r := newRig(t, nil, nil)
	args := map[string]any{"text": "hi"}
	out := r.exec.Execute(context.Background(), withApprovals(req("1", "write_note", args), ap.sign(t, r, args, nil)), r.ctx(executor.ProfileMinimal, nil))
	if out.Kind() != executor.KindEscalated || out.Base().ReasonCode != approval.CodeUnavailable {
		t.Fatalf("got %s %s", out.Kind(), out.Base().ReasonCode)
	}
}

// TestApprovalReplayAfterRestart: the nonce ledger is the SQLite state
// store: an executor built after a restart (a new store on the same file)
// still refuses the spent approval.
func TestApprovalReplayAfterRestart(t *testing.T) {
	ap := newApprover(t, "lead-key", "lead")
	path := filepath.Join(t.TempDir(), "state.db")
	args := map[string]any{"text": "hi"}
	var signed []byte
	for i, want := range []string{"", approval.CodeReplayed} {
		st, err := statestore.OpenSQLite(path)
		if err != nil {
			t.Fatal(err)
		}
		r := approvalRig(t, ap, st, nil)
		if signed == nil {
			signed = ap.sign(t, r, args, nil)
		}
		out := r.exec.Execute(context.Background(), withApprovals(req("1", "write_note", args), signed), r.ctx(executor.ProfileMinimal, nil))
		if out.Base().ReasonCode != want || (want == "" && out.Kind() != executor.KindSucceeded) {
			t.Fatalf("run %d: %s %q, want %q", i, out.Kind(), out.Base().ReasonCode, want)
		}
		st.Close()
	}
}

// TestApprovalKeyExpiredBeforeUse: an approval issued while its key was
// valid (issued_at is the signer's choice) is refused when the executor
// uses it after the key's valid_until: approval_expired.
func TestApprovalKeyExpiredBeforeUse(t *testing.T) {
	ap := newApprover(t, "lead-key", "lead")
	k := *ap.trust.Keys[0]
	until := approvalNow.Add(-30 * time.Second) // after issued_at (now - 1m), before now
	k.ValidUntil = &until
	short := &chain.Trust{Keys: []*chain.Key{&k}}
	args := map[string]any{"text": "hi"}
	r := newRig(t, nil, func(cfg *executor.Config) {
		cfg.ApprovalTrust, cfg.ApprovalLedger = short, &executor.MemoryApprovalLedger{}
	})
	out := r.exec.Execute(context.Background(), withApprovals(req("1", "write_note", args), ap.sign(t, r, args, nil)), r.ctx(executor.ProfileMinimal, nil))
	if _, ok := out.(*executor.Escalated); !ok || out.Base().ReasonCode != approval.CodeExpired {
		t.Fatalf("got %s %s, want escalated approval_expired (%v)", out.Kind(), out.Base().ReasonCode, out.Base().Trail)
	}
	if n := r.calls["write_note"].Load(); n != 0 {
		t.Fatalf("the callable ran %d times", n)
	}
}
