// Package approval is the format of polc's approvals (docs/approvals.md):
// the approval request an escalated outcome carries, and the signed,
// single-use approval (or refusal) an approver issues for it. The executor
// verifies an approval before the call; certverify checks the approvals
// recorded in a chain against a trust file's approver keys, offline.
//
// A signed approval is a C2SP signed note (Ed25519, as checkpoints are)
// whose text is exactly two lines:
//
//	polc.dev/approval/v1
//	<the approval's canonical JSON (RFC 8785)>
//
// Verifiers check the signature over those bytes and parse them strictly;
// nothing is ever re-serialised to be checked.
package approval

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

// Header is the first line of a signed approval's text: the format and its
// version.
const Header = "polc.dev/approval/v1"

// Version is the version member of requests and approvals.
const Version = 1

// MaxBytes bounds a signed approval (and an approval request file).
const MaxBytes = 16 << 10

// MaxNoteBytes bounds an approval's note.
const MaxNoteBytes = 1 << 10

// Decisions an approval carries.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// Stable refusal codes (docs/approvals.md). The executor's reason codes
// and certverify's finding codes are these.
const (
	CodeMalformed    = "approval_malformed"     // not a signed approval of this format
	CodeForged       = "approval_forged"        // no trusted approver key's signature verifies
	CodeExpired      = "approval_expired"       // outside its validity window, or its key's
	CodeReplayed     = "approval_replayed"      // its nonce was used before
	CodeWrongClass   = "approval_wrong_class"   // not the escalation's approver class, or not its key's
	CodeWrongRequest = "approval_wrong_request" // bound to another request, gate or policy
	CodeRefused      = "approval_refused"       // the approver refused (polc deny-approval)
	CodeTooLong      = "approval_too_long"      // valid longer than the rule's expires_after
	CodeUnavailable  = "approval_unavailable"   // the executor has no approver trust or nonce ledger
	// CodeRequestMismatch: an approval request file whose subject_digest
	// is not the digest of the subject it shows (it was edited).
	CodeRequestMismatch = "approval_request_mismatch"
)

// Error is a refusal with a stable code.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

func errf(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Approval is the signed body: one approver's decision on one approval
// request, bound to the request's subject digest, gate, approver class and
// policy, valid in [IssuedAt, ExpiresAt), usable once (Nonce).
type Approval struct {
	ApprovalID    string `json:"approval_id"`
	ApproverClass string `json:"approver_class"`
	Decision      string `json:"decision"`
	ExpiresAt     string `json:"expires_at"`
	GateID        string `json:"gate_id"`
	IssuedAt      string `json:"issued_at"`
	KeyID         string `json:"key_id"`
	Nonce         string `json:"nonce"`
	Note          string `json:"note"`
	PolicyDigest  string `json:"policy_digest"`
	RequestID     string `json:"request_id"`
	SubjectDigest string `json:"subject_digest"`
	Version       int    `json:"version"`
}

var (
	hexRe  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// validate checks every member's grammar.
func (a *Approval) validate() error {
	bad := func(member, want string) error {
		return errf(CodeMalformed, "%s: want %s", member, want)
	}
	switch {
	case a.Version != Version:
		return errf(CodeMalformed, "version %d: this verifier reads version %d", a.Version, Version)
	case !uuidRe.MatchString(a.ApprovalID):
		return bad("approval_id", "a lowercase UUID")
	case !uuidRe.MatchString(a.RequestID):
		return bad("request_id", "a lowercase UUID")
	case a.Decision != DecisionApprove && a.Decision != DecisionDeny:
		return bad("decision", `"approve" or "deny"`)
	case !validText(a.ApproverClass):
		return bad("approver_class", "a non-empty class without spaces")
	case a.GateID == "":
		return bad("gate_id", "a non-empty string")
	case a.KeyID == "":
		return bad("key_id", "the signing key's name+hex8")
	case !hexRe.MatchString(a.Nonce):
		return bad("nonce", "64 lowercase hex characters")
	case !hexRe.MatchString(a.PolicyDigest):
		return bad("policy_digest", "64 lowercase hex characters")
	case !hexRe.MatchString(a.SubjectDigest):
		return bad("subject_digest", "64 lowercase hex characters")
	case len(a.Note) > MaxNoteBytes:
		return bad("note", fmt.Sprintf("at most %d bytes", MaxNoteBytes))
	}
	issued, err := chain.ParseTime(a.IssuedAt)
	if err != nil {
		return bad("issued_at", "YYYY-MM-DDTHH:MM:SS.ffffffZ")
	}
	expires, err := chain.ParseTime(a.ExpiresAt)
	if err != nil {
		return bad("expires_at", "YYYY-MM-DDTHH:MM:SS.ffffffZ")
	}
	if !expires.After(issued) {
		return bad("expires_at", "a time after issued_at")
	}
	return nil
}

// validText reports whether s is non-empty and has no white space.
func validText(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n")
}

// Times returns the approval's validity window.
func (a *Approval) Times() (issued, expires time.Time) {
	issued, _ = chain.ParseTime(a.IssuedAt)
	expires, _ = chain.ParseTime(a.ExpiresAt)
	return issued, expires
}

// NewNonce returns a fresh random nonce (64 hex characters).
func NewNonce() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Sign returns the signed approval: a's canonical JSON under Header,
// signed by signer, whose name+hex8 must be a.KeyID.
func Sign(a *Approval, signer note.Signer) ([]byte, error) {
	if id := fmt.Sprintf("%s+%08x", signer.Name(), signer.KeyHash()); a.KeyID != id {
		return nil, fmt.Errorf("approval: key_id %q is not the signer's %q", a.KeyID, id)
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	body, err := jcs.Marshal(a)
	if err != nil {
		return nil, err
	}
	return note.Sign(&note.Note{Text: Header + "\n" + string(body) + "\n"}, signer)
}

// Parse decodes a signed approval without checking its signature: the
// text must be Header and one line of the approval's canonical JSON, with
// exactly the format's members, each in its grammar. It returns an *Error
// (approval_malformed).
func Parse(signed []byte) (*Approval, error) {
	if len(signed) > MaxBytes {
		return nil, errf(CodeMalformed, "exceeds %d bytes", MaxBytes)
	}
	// A signed note is its text, a blank line, and signature lines.
	i := bytes.Index(signed, []byte("\n\n"))
	if i < 0 {
		return nil, errf(CodeMalformed, "not a signed note (no blank line before the signatures)")
	}
	text := signed[:i+1]
	head, rest, ok := bytes.Cut(text, []byte("\n"))
	if !ok || string(head) != Header {
		return nil, errf(CodeMalformed, "the first line is not %q", Header)
	}
	body, tail, ok := bytes.Cut(rest, []byte("\n"))
	if !ok || len(tail) != 0 {
		return nil, errf(CodeMalformed, "want exactly one line of JSON after the header")
	}
	canon, err := jcs.Transform(body)
	if err != nil {
		return nil, errf(CodeMalformed, "not JSON: %v", err)
	}
	if !bytes.Equal(canon, body) {
		return nil, errf(CodeMalformed, "not in canonical form (RFC 8785)")
	}
	var a Approval
	if err := strictjson.Decode(body, &a); err != nil {
		return nil, errf(CodeMalformed, "%v", err)
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// Open parses a signed approval and verifies its signature against the
// trust file's approver keys. The key that signed must be the one the
// approval names (key_id) and its class the approval's; both the
// approval's issued_at and at, the time of use (the executor's clock;
// offline, the time of the approval_granted record), must lie in the
// key's validity window: issued_at alone is the signer's choice, and a
// retired or compromised key could otherwise still sign approvals
// backdated into its window. A signature by any other key (a log or
// certifier key, an unknown key) verifies nothing: approval_forged.
func Open(signed []byte, trust *chain.Trust, at time.Time) (*Approval, *chain.Key, error) {
	a, err := Parse(signed)
	if err != nil {
		return nil, nil, err
	}
	var vs []note.Verifier
	if trust != nil {
		for _, k := range trust.Keys {
			if k.Role != chain.RoleApprover {
				continue
			}
			if v, err := note.NewVerifier(k.VKey); err == nil {
				vs = append(vs, v)
			}
		}
	}
	n, err := note.Open(signed, note.VerifierList(vs...))
	if err != nil {
		return a, nil, errf(CodeForged, "no trusted approver key's signature verifies: %v", err)
	}
	var key *chain.Key
	for _, s := range n.Sigs {
		if k := trust.Lookup(s.Name, s.Hash); k != nil && k.Role == chain.RoleApprover && k.ID() == a.KeyID {
			key = k
			break
		}
	}
	if key == nil {
		return a, nil, errf(CodeForged, "key_id %s is not the approver key that signed", a.KeyID)
	}
	if key.Class != a.ApproverClass {
		return a, key, errf(CodeWrongClass, "key %s approves for class %s, the approval says %s", key.ID(), key.Class, a.ApproverClass)
	}
	issued, _ := a.Times()
	if !key.ValidAt(issued) {
		return a, key, errf(CodeExpired, "key %s is not valid at issued_at %s (window %s)", key.ID(), a.IssuedAt, key.Window())
	}
	if !key.ValidAt(at) {
		return a, key, errf(CodeExpired, "key %s is not valid at the time of use %s (window %s)", key.ID(), chain.FormatTime(at), key.Window())
	}
	return a, key, nil
}

// Expect is what an approval must match to lift an escalation.
type Expect struct {
	SubjectDigest string
	PolicyDigest  string
	GateID        string
	ApproverClass string
	// Now is when it is used: within [issued_at, expires_at).
	Now time.Time
	// MaxLifetime, when positive, bounds expires_at - issued_at (the
	// rule's expires_after).
	MaxLifetime time.Duration
}

// Check compares an opened approval with what the escalation expects. A
// refusal (decision deny) is CodeRefused.
func Check(a *Approval, x Expect) error {
	switch {
	case a.Decision != DecisionApprove:
		return errf(CodeRefused, "approval %s refuses the request", a.ApprovalID)
	case a.ApproverClass != x.ApproverClass:
		return errf(CodeWrongClass, "the approval is for class %s, the gate needs %s", a.ApproverClass, x.ApproverClass)
	case a.SubjectDigest != x.SubjectDigest:
		return errf(CodeWrongRequest, "the approval is bound to subject %s, this request is %s", a.SubjectDigest, x.SubjectDigest)
	case a.GateID != x.GateID:
		return errf(CodeWrongRequest, "the approval is for gate %s, this request escalated at %s", a.GateID, x.GateID)
	case a.PolicyDigest != x.PolicyDigest:
		return errf(CodeWrongRequest, "the approval is bound to policy %s, this request is judged by %s", a.PolicyDigest, x.PolicyDigest)
	}
	issued, expires := a.Times()
	if x.MaxLifetime > 0 && expires.Sub(issued) > x.MaxLifetime {
		return errf(CodeTooLong, "valid for %v, the rule allows %v", expires.Sub(issued), x.MaxLifetime)
	}
	if x.Now.Before(issued) || !x.Now.Before(expires) {
		return errf(CodeExpired, "valid in [%s, %s), used at %s", a.IssuedAt, a.ExpiresAt, chain.FormatTime(x.Now))
	}
	return nil
}
