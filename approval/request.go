package approval

import (
	"bytes"

	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

// Request is an approval request: what an escalated outcome asks an
// approver of ApproverClass to approve, and why. polc run and polc serve
// write it as a file (canonical JSON), polc approvals show prints it,
// polc approve signs an Approval for it.
type Request struct {
	Version int `json:"version"`
	// ID identifies the approval request (a lowercase UUID).
	ID string `json:"id"`
	// RequestID and RequestDigest are the escalated execution request's
	// id and digest (what its operation_started records).
	RequestID     string `json:"request_id"`
	RequestDigest string `json:"request_digest"`
	// SubjectDigest is what an approval binds: the digest of the action,
	// its checked arguments, principal, tenant and workspace, and
	// nothing a retry changes (not the request id or time). A changed
	// command is another subject and needs another approval.
	SubjectDigest string `json:"subject_digest"`
	Action        string `json:"action"`
	// Target is what exactly would run: the normalized request's
	// commands, paths, hosts and MCP target.
	Target        Target   `json:"target"`
	Principal     string   `json:"principal"`
	Tenant        string   `json:"tenant"`
	ApproverClass string   `json:"approver_class"`
	GateID        string   `json:"gate_id"`
	ReasonCode    string   `json:"reason_code"`
	RuleIDs       []string `json:"rule_ids"`
	PolicyID      string   `json:"policy_id"`
	PolicyVersion string   `json:"policy_version"`
	PolicyDigest  string   `json:"policy_digest"`
	CreatedAt     string   `json:"created_at"`
	// ExpiresAt is CreatedAt plus the rule's expires_after: no approval
	// of this request may be valid later.
	ExpiresAt string `json:"expires_at"`
	// ExpiresAfterUS is the rule's expires_after, in microseconds: the
	// longest an approval may be valid.
	ExpiresAfterUS int64 `json:"expires_after_us"`
}

// Target is the normalized request as an approver needs to read it.
type Target struct {
	Commands [][]string   `json:"commands"`
	Paths    []PathAccess `json:"paths"`
	Hosts    []string     `json:"hosts"`
	MCP      *string      `json:"mcp"`
}

// PathAccess is one file-system access of the target.
type PathAccess struct {
	Path   string `json:"path"`
	Access string `json:"access"`
}

// Marshal returns the request's canonical JSON and a newline.
func (r *Request) Marshal() ([]byte, error) {
	b, err := jcs.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseRequest decodes an approval request file strictly: canonical JSON
// (one trailing newline allowed), exactly the format's members.
func ParseRequest(data []byte) (*Request, error) {
	if len(data) > MaxBytes {
		return nil, errf(CodeMalformed, "approval request exceeds %d bytes", MaxBytes)
	}
	body := bytes.TrimSuffix(data, []byte("\n"))
	canon, err := jcs.Transform(body)
	if err != nil {
		return nil, errf(CodeMalformed, "approval request is not JSON: %v", err)
	}
	if !bytes.Equal(canon, body) {
		return nil, errf(CodeMalformed, "approval request is not in canonical form (RFC 8785)")
	}
	var r Request
	if err := strictjson.Decode(body, &r); err != nil {
		return nil, errf(CodeMalformed, "approval request: %v", err)
	}
	switch {
	case r.Version != Version:
		return nil, errf(CodeMalformed, "approval request version %d: this reader reads version %d", r.Version, Version)
	case !uuidRe.MatchString(r.ID):
		return nil, errf(CodeMalformed, "approval request id: want a lowercase UUID")
	case !hexRe.MatchString(r.SubjectDigest) || !hexRe.MatchString(r.PolicyDigest):
		return nil, errf(CodeMalformed, "approval request: subject_digest and policy_digest must be 64 lowercase hex characters")
	case !validText(r.ApproverClass) || r.GateID == "":
		return nil, errf(CodeMalformed, "approval request: needs an approver_class and a gate_id")
	case r.ExpiresAfterUS <= 0:
		return nil, errf(CodeMalformed, "approval request: expires_after_us must be positive")
	}
	return &r, nil
}
