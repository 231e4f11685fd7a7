package approval

import (
	"bytes"

	"polc.dev/polc/internal/digest"
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
	// SubjectDigest is what an approval binds: SubjectDigest of Action,
	// Arguments, Principal, Tenant and Workspace, and nothing a retry
	// changes (not the request id or time). A changed command is another
	// subject and needs another approval. ParseRequest recomputes it
	// from those members and refuses a file whose digest is not theirs:
	// what an approver reads is what the approval binds.
	SubjectDigest string `json:"subject_digest"`
	Action        string `json:"action"`
	// Arguments are the action's arguments as the executor checked them:
	// exactly what would run.
	Arguments map[string]any `json:"arguments"`
	Principal string         `json:"principal"`
	Tenant    string         `json:"tenant"`
	// Workspace is the directory the action would run in.
	Workspace     string   `json:"workspace"`
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

// Target is the normalized request (its commands, paths, hosts and MCP
// target), as the executor's escalated outcome reports it. It is derived
// from the arguments by the policy's normalization, which a reader of a
// request file cannot redo, so the file does not carry it: an unbound
// copy would be something an approver reads but does not sign.
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

// MaxRequestBytes bounds an approval request file: it carries the
// action's arguments (a write_file's content among them).
const MaxRequestBytes = 4 << 20

// SubjectDigest is what an approval of an escalated request binds
// (Request.SubjectDigest): the sha256-v1 digest of the canonical JSON
// {action, arguments, principal, tenant, workspace}, the arguments as
// the executor checked them (nil is {}). The executor and ParseRequest
// both compute it here, so that a request file is checked against the
// very function the executor binds approvals with.
func SubjectDigest(action string, args map[string]any, principal, tenant, workspace string) string {
	if args == nil {
		args = map[string]any{}
	}
	return digest.Of(map[string]any{"action": action, "arguments": args, "principal": principal, "tenant": tenant, "workspace": workspace})
}

// ParseRequest decodes an approval request file strictly: canonical JSON
// (one trailing newline allowed), exactly the format's members, and a
// subject_digest that is the SubjectDigest of the file's action,
// arguments, principal, tenant and workspace (else
// CodeRequestMismatch: the file was edited after polc wrote it).
func ParseRequest(data []byte) (*Request, error) {
	if len(data) > MaxRequestBytes {
		return nil, errf(CodeMalformed, "approval request exceeds %d bytes", MaxRequestBytes)
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
	case r.Arguments == nil:
		return nil, errf(CodeMalformed, "approval request: arguments must be an object")
	}
	if got := SubjectDigest(r.Action, r.Arguments, r.Principal, r.Tenant, r.Workspace); got != r.SubjectDigest {
		return nil, errf(CodeRequestMismatch, "approval request %s: subject_digest %s is not the digest %s of its action, arguments, principal, tenant and workspace: the file was changed after polc wrote it", r.ID, r.SubjectDigest, got)
	}
	return &r, nil
}
