// Package certificate mints and verifies TaskCertificates (docs/evidence.md):
// the statement that a closed task boundary's evidence chain verifies, that
// every operation in it has exactly one terminal, and which gates allowed
// and denied what.
//
// # Byte format
//
// An unsigned certificate file is the RFC 8785 canonical JSON of one object
// (a trailing newline allowed) with exactly these members:
//
//	certificate_id       lowercase UUID
//	task_boundary_id     lowercase UUID
//	chain_id             lowercase UUID
//	policy_id            lowercase UUID
//	policy_version       non-empty string
//	policy_digest        64 lowercase hex: the snapshot digest (sha256-v1)
//	evidence_chain_head  64 lowercase hex: chain_hash of the task_closed record
//	tree_size            records in the chain
//	merkle_root          standard base64 of the RFC 6962 root (as in checkpoints)
//	gate_summary         {advisory_allow, advisory_deny, [approval_count,]
//	                      exception_count, hard_allow, hard_deny, soft_allow,
//	                      soft_deny}
//	process_grade        "FULL" | "DEGRADED"
//	minted_at            YYYY-MM-DDTHH:MM:SS.ffffffZ
//
// gate_summary counts gate_evaluated records by level and decision,
// exception_granted records and approval_granted records (approval_count,
// present exactly when it is not zero: a certificate without approvals is
// byte for byte what it was before approvals existed); process_grade is DEGRADED exactly when an
// exception was granted. Both are derived from the records, never supplied.
//
// A signed certificate is a DSSE envelope (canonical JSON):
//
//	{"payload":"<base64 of the certificate's canonical JSON>",
//	 "payloadType":"application/vnd.polc.task-certificate+json",
//	 "signatures":[{"keyid":"<name>+<hex8>","sig":"<base64 Ed25519 signature>"}]}
//
// signed over DSSE's PAE: "DSSEv1 " + len(type) + " " + type + " " +
// len(payload) + " " + payload, lengths in ASCII decimal. The keyid is a
// hint only; verification tries every trusted key. The certificate format
// has no version member of its own (its member set is fixed: docs/evidence.md
// "Task certificates");
// a future incompatible version would change the DSSE payload type.
package certificate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

// PayloadType is the DSSE payload type of a signed certificate.
const PayloadType = "application/vnd.polc.task-certificate+json"

// Process grades.
const (
	GradeFull     = "FULL"
	GradeDegraded = "DEGRADED"
)

// MaxCertificateBytes bounds a certificate or envelope file.
const MaxCertificateBytes = 1 << 16

// MaxSnapshotBytes bounds the policy snapshot a certificate is checked
// against: a larger file cannot be the policy (Verify reports
// policy_mismatch without parsing it), so a verifier reads no more.
const MaxSnapshotBytes = 16 << 20

// GateSummary counts gate results by level and decision, exceptions and
// approvals. ApprovalCount (the chain's approval_granted records,
// docs/approvals.md) is written only when it is not zero, so a
// certificate of a task without approvals is what it was before approvals
// existed; a certificate that states approval_count 0 is not canonical and
// is refused.
type GateSummary struct {
	AdvisoryAllow  int64 `json:"advisory_allow"`
	AdvisoryDeny   int64 `json:"advisory_deny"`
	ApprovalCount  int64 `json:"approval_count,omitempty"`
	ExceptionCount int64 `json:"exception_count"`
	HardAllow      int64 `json:"hard_allow"`
	HardDeny       int64 `json:"hard_deny"`
	SoftAllow      int64 `json:"soft_allow"`
	SoftDeny       int64 `json:"soft_deny"`
}

// gateCounts is GateSummary without approval_count, for strict decoding.
type gateCounts struct {
	AdvisoryAllow  int64 `json:"advisory_allow"`
	AdvisoryDeny   int64 `json:"advisory_deny"`
	ExceptionCount int64 `json:"exception_count"`
	HardAllow      int64 `json:"hard_allow"`
	HardDeny       int64 `json:"hard_deny"`
	SoftAllow      int64 `json:"soft_allow"`
	SoftDeny       int64 `json:"soft_deny"`
}

// UnmarshalJSON decodes a gate summary strictly: exactly the seven counts,
// plus approval_count when it is not zero.
func (g *GateSummary) UnmarshalJSON(b []byte) error {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return errors.New("want an object")
	}
	var c gateCounts
	var approvals int64
	if _, ok := probe["approval_count"]; ok {
		var w struct {
			gateCounts
			ApprovalCount int64 `json:"approval_count"`
		}
		if err := strictjson.Decode(b, &w); err != nil {
			return err
		}
		if w.ApprovalCount == 0 {
			return errors.New("approval_count: omitted when zero, never 0")
		}
		c, approvals = w.gateCounts, w.ApprovalCount
	} else if err := strictjson.Decode(b, &c); err != nil {
		return err
	}
	*g = GateSummary{AdvisoryAllow: c.AdvisoryAllow, AdvisoryDeny: c.AdvisoryDeny, ApprovalCount: approvals, ExceptionCount: c.ExceptionCount,
		HardAllow: c.HardAllow, HardDeny: c.HardDeny, SoftAllow: c.SoftAllow, SoftDeny: c.SoftDeny}
	return nil
}

// Certificate is a TaskCertificate. Values returned by Parse are valid.
type Certificate struct {
	CertificateID     string      `json:"certificate_id"`
	TaskBoundaryID    string      `json:"task_boundary_id"`
	ChainID           string      `json:"chain_id"`
	PolicyID          string      `json:"policy_id"`
	PolicyVersion     string      `json:"policy_version"`
	PolicyDigest      string      `json:"policy_digest"`
	EvidenceChainHead string      `json:"evidence_chain_head"`
	TreeSize          int64       `json:"tree_size"`
	MerkleRoot        string      `json:"merkle_root"`
	GateSummary       GateSummary `json:"gate_summary"`
	ProcessGrade      string      `json:"process_grade"`
	MintedAt          string      `json:"minted_at"`
}

// Derive returns the gate summary and grade of a verified chain.
func Derive(res *chain.Result) (GateSummary, string) {
	g := res.Gates
	s := GateSummary{
		AdvisoryAllow: g.AdvisoryAllow, AdvisoryDeny: g.AdvisoryDeny, ApprovalCount: res.Approvals, ExceptionCount: res.Exceptions,
		HardAllow: g.HardAllow, HardDeny: g.HardDeny, SoftAllow: g.SoftAllow, SoftDeny: g.SoftDeny,
	}
	grade := GradeFull
	if res.Exceptions > 0 {
		grade = GradeDegraded
	}
	return s, grade
}

// Marshal returns the certificate's canonical JSON (no trailing newline).
func (c *Certificate) Marshal() ([]byte, error) { return jcs.Marshal(c) }

var (
	hexRe  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// ParseError is a certificate or envelope that does not parse.
type ParseError struct{ Msg string }

func (e *ParseError) Error() string { return "certificate: " + e.Msg }

// Parse decodes an unsigned certificate file strictly: canonical JSON (one
// trailing newline allowed), exactly the format's members, and every value's
// grammar. It returns a *ParseError.
func Parse(data []byte) (*Certificate, error) {
	if len(data) > MaxCertificateBytes {
		return nil, &ParseError{fmt.Sprintf("exceeds %d bytes", MaxCertificateBytes)}
	}
	body := bytes.TrimSuffix(data, []byte("\n"))
	canon, err := jcs.Transform(body)
	if err != nil {
		return nil, &ParseError{"not JSON: " + err.Error()}
	}
	if !bytes.Equal(canon, body) {
		return nil, &ParseError{"not in canonical form (RFC 8785)"}
	}
	var c Certificate
	if err := strictjson.Decode(body, &c); err != nil {
		return nil, &ParseError{err.Error()}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Certificate) validate() error {
	fail := func(f, msg string) error { return &ParseError{f + ": " + msg} }
	for _, x := range []struct{ name, v string }{
		{"certificate_id", c.CertificateID}, {"task_boundary_id", c.TaskBoundaryID},
		{"chain_id", c.ChainID}, {"policy_id", c.PolicyID},
	} {
		if !uuidRe.MatchString(x.v) {
			return fail(x.name, "want a lowercase UUID")
		}
	}
	switch {
	case c.PolicyVersion == "":
		return fail("policy_version", "empty")
	case !hexRe.MatchString(c.PolicyDigest):
		return fail("policy_digest", "want 64 lowercase hex characters")
	case !hexRe.MatchString(c.EvidenceChainHead):
		return fail("evidence_chain_head", "want 64 lowercase hex characters")
	case c.TreeSize < 1 || c.TreeSize > chain.MaxSequence:
		return fail("tree_size", "want an integer in [1, 2^53-1]")
	case c.ProcessGrade != GradeFull && c.ProcessGrade != GradeDegraded:
		return fail("process_grade", `want "FULL" or "DEGRADED"`)
	}
	if root, err := base64.StdEncoding.DecodeString(c.MerkleRoot); err != nil || len(root) != 32 || base64.StdEncoding.EncodeToString(root) != c.MerkleRoot {
		return fail("merkle_root", "want the standard base64 of 32 bytes")
	}
	if _, err := chain.ParseTime(c.MintedAt); err != nil {
		return fail("minted_at", "want YYYY-MM-DDTHH:MM:SS.ffffffZ")
	}
	g := c.GateSummary
	for _, n := range []int64{g.AdvisoryAllow, g.AdvisoryDeny, g.ApprovalCount, g.ExceptionCount, g.HardAllow, g.HardDeny, g.SoftAllow, g.SoftDeny} {
		if n < 0 || n > chain.MaxSequence {
			return fail("gate_summary", "counts must be in [0, 2^53-1]")
		}
	}
	return nil
}

// isEnvelope reports whether data is a JSON object with a payloadType
// member (a DSSE envelope) rather than a bare certificate.
func isEnvelope(data []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	_, ok := probe["payloadType"]
	return ok
}

func marshalCanonical(v any) ([]byte, error) { return jcs.Marshal(v) }
