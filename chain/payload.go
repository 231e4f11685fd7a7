package chain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

// Payload is the typed content of a record's payload_json. The set of
// implementations is closed: one struct per record type. Nullable members are
// pointers; every member is always present on the wire.
type Payload interface {
	// RecordType returns the record type this payload belongs to.
	RecordType() Type
	// AppendCanonical appends the payload's canonical JSON (RFC 8785)
	// without checking it against the schema (EncodePayload does).
	AppendCanonical(b []byte) ([]byte, error)
}

// PolicyBoundPayload pins the exact policy snapshot and effect backend of an
// operation (executor stage 4: docs/executor.md "The fourteen stages").
type PolicyBoundPayload struct {
	EffectBackendID        string `json:"effect_backend_id"`
	EffectCapabilityDigest string `json:"effect_capability_digest"`
	PolicyDigest           string `json:"policy_digest"`
	TaskBoundaryID         string `json:"task_boundary_id"`
}

// OperationStartedPayload opens an operation. Actor is "kind:id" or nil.
type OperationStartedPayload struct {
	Actor             *string `json:"actor"`
	AttemptID         string  `json:"attempt_id"`
	ParentOperationID *string `json:"parent_operation_id"`
	RequestDigest     string  `json:"request_digest"`
	RunID             *string `json:"run_id"`
	ToolID            string  `json:"tool_id"`
}

// GateEvaluatedPayload is one gate result. Level is hard, soft or advisory;
// Decision is allow or deny.
type GateEvaluatedPayload struct {
	ArgumentsDigest string   `json:"arguments_digest"`
	Decision        string   `json:"decision"`
	GateID          string   `json:"gate_id"`
	Level           string   `json:"level"`
	ReasonCode      string   `json:"reason_code"`
	ResultID        string   `json:"result_id"`
	RuleIDs         []string `json:"rule_ids"`
}

// ExceptionGrantedPayload records a single-use exception to a soft gate.
// ExpiresAt must be later than IssuedAt.
type ExceptionGrantedPayload struct {
	Actor      string `json:"actor"`
	ExpiresAt  string `json:"expires_at"`
	GateID     string `json:"gate_id"`
	GrantID    string `json:"grant_id"`
	IssuedAt   string `json:"issued_at"`
	ReasonCode string `json:"reason_code"`
}

// ApprovalGrantedPayload records a signed approval that lifted a soft
// gate's escalation (docs/approvals.md). SignedApproval is the approval
// exactly as presented (a signed note), so that an auditor can check its
// signature offline; the other members are what the executor checked it
// against: the escalating gate and approver class, the subject digest it
// computed for the operation, and the approval's validity window and
// nonce as signed. ExpiresAt must be later than IssuedAt.
type ApprovalGrantedPayload struct {
	ApproverClass  string `json:"approver_class"`
	ExpiresAt      string `json:"expires_at"`
	GateID         string `json:"gate_id"`
	IssuedAt       string `json:"issued_at"`
	Nonce          string `json:"nonce"`
	SignedApproval string `json:"signed_approval"`
	SubjectDigest  string `json:"subject_digest"`
}

// OperationDeniedPayload is the terminal of a denied operation. Disposition
// escalate requires an ApproverClass; deny requires it to be nil. GateID is
// nil when no gate produced the denial (e.g. policy.no_gate_binding).
type OperationDeniedPayload struct {
	ApproverClass *string `json:"approver_class"`
	Disposition   string  `json:"disposition"`
	GateID        *string `json:"gate_id"`
	ReasonCode    string  `json:"reason_code"`
}

// CallableCompletedPayload is the terminal of a successful call.
type CallableCompletedPayload struct {
	DurationUS   int64  `json:"duration_us"`
	ResultDigest string `json:"result_digest"`
}

// CallableFailedPayload is the terminal of a call that raised.
type CallableFailedPayload struct {
	DurationUS int64  `json:"duration_us"`
	ErrorClass string `json:"error_class"`
}

// OperationCancelledPayload is the terminal of a cancelled operation.
type OperationCancelledPayload struct {
	DurationUS int64 `json:"duration_us"`
}

// OperationTimedOutPayload is the terminal of an operation that timed out.
type OperationTimedOutPayload struct {
	DurationUS int64 `json:"duration_us"`
}

// ExternalResultAmbiguousPayload is the terminal of a call whose effect is
// unknown.
type ExternalResultAmbiguousPayload struct {
	DurationUS int64  `json:"duration_us"`
	ReasonCode string `json:"reason_code"`
}

// TaskClosedPayload closes the chain's task boundary. ClosedAt must not be
// before OpenedAt; OperationCount is the number of operation_started records
// in the chain.
type TaskClosedPayload struct {
	ClosedAt       string `json:"closed_at"`
	OpenedAt       string `json:"opened_at"`
	OperationCount int64  `json:"operation_count"`
	TaskBoundaryID string `json:"task_boundary_id"`
}

// RecordSupersededPayload corrects an earlier record, named by the record's
// supersedes_record_id.
type RecordSupersededPayload struct {
	ReasonCode string `json:"reason_code"`
}

// RecordType implements Payload.
func (PolicyBoundPayload) RecordType() Type { return PolicyBound }

// RecordType implements Payload.
func (OperationStartedPayload) RecordType() Type { return OperationStarted }

// RecordType implements Payload.
func (GateEvaluatedPayload) RecordType() Type { return GateEvaluated }

// RecordType implements Payload.
func (ExceptionGrantedPayload) RecordType() Type { return ExceptionGranted }

// RecordType implements Payload.
func (ApprovalGrantedPayload) RecordType() Type { return ApprovalGranted }

// RecordType implements Payload.
func (OperationDeniedPayload) RecordType() Type { return OperationDenied }

// RecordType implements Payload.
func (CallableCompletedPayload) RecordType() Type { return CallableCompleted }

// RecordType implements Payload.
func (CallableFailedPayload) RecordType() Type { return CallableFailed }

// RecordType implements Payload.
func (OperationCancelledPayload) RecordType() Type { return OperationCancelled }

// RecordType implements Payload.
func (OperationTimedOutPayload) RecordType() Type { return OperationTimedOut }

// RecordType implements Payload.
func (ExternalResultAmbiguousPayload) RecordType() Type { return ExternalResultAmbiguous }

// RecordType implements Payload.
func (TaskClosedPayload) RecordType() Type { return TaskClosed }

// RecordType implements Payload.
func (RecordSupersededPayload) RecordType() Type { return RecordSuperseded }

// kind is the value grammar of one payload member.
type kind uint8

const (
	kString     kind = iota // non-empty string
	kStringNull             // non-empty string or null
	kHex                    // 64 lowercase hex
	kUUID                   // lowercase UUID
	kUUIDNull               // lowercase UUID or null
	kTime                   // YYYY-MM-DDTHH:MM:SS.ffffffZ
	kInt                    // integer in [0, 2^53-1]
	kActor                  // "kind:id", both parts non-empty
	kActorNull              // kActor or null
	kStringList             // array of non-empty strings
	kEnum                   // one of field.enum
)

type field struct {
	key  string
	kind kind
	enum []string
}

type schema struct {
	typ    Type
	fields []field // sorted by key: the canonical member order
	new    func() Payload
}

// maxFields bounds the members of any payload (gate_evaluated has the most).
const maxFields = 7

var schemas = []schema{
	{PolicyBound, []field{
		{key: "effect_backend_id", kind: kString},
		{key: "effect_capability_digest", kind: kHex},
		{key: "policy_digest", kind: kHex},
		{key: "task_boundary_id", kind: kUUID},
	}, func() Payload { return &PolicyBoundPayload{} }},
	{OperationStarted, []field{
		{key: "actor", kind: kActorNull},
		{key: "attempt_id", kind: kUUID},
		{key: "parent_operation_id", kind: kUUIDNull},
		{key: "request_digest", kind: kHex},
		{key: "run_id", kind: kStringNull},
		{key: "tool_id", kind: kString},
	}, func() Payload { return &OperationStartedPayload{} }},
	{GateEvaluated, []field{
		{key: "arguments_digest", kind: kHex},
		{key: "decision", kind: kEnum, enum: []string{"allow", "deny"}},
		{key: "gate_id", kind: kString},
		{key: "level", kind: kEnum, enum: []string{"hard", "soft", "advisory"}},
		{key: "reason_code", kind: kString},
		{key: "result_id", kind: kUUID},
		{key: "rule_ids", kind: kStringList},
	}, func() Payload { return &GateEvaluatedPayload{} }},
	{ExceptionGranted, []field{
		{key: "actor", kind: kActor},
		{key: "expires_at", kind: kTime},
		{key: "gate_id", kind: kString},
		{key: "grant_id", kind: kUUID},
		{key: "issued_at", kind: kTime},
		{key: "reason_code", kind: kString},
	}, func() Payload { return &ExceptionGrantedPayload{} }},
	{ApprovalGranted, []field{
		{key: "approver_class", kind: kString},
		{key: "expires_at", kind: kTime},
		{key: "gate_id", kind: kString},
		{key: "issued_at", kind: kTime},
		{key: "nonce", kind: kHex},
		{key: "signed_approval", kind: kString},
		{key: "subject_digest", kind: kHex},
	}, func() Payload { return &ApprovalGrantedPayload{} }},
	{OperationDenied, []field{
		{key: "approver_class", kind: kStringNull},
		{key: "disposition", kind: kEnum, enum: []string{"deny", "escalate"}},
		{key: "gate_id", kind: kStringNull},
		{key: "reason_code", kind: kString},
	}, func() Payload { return &OperationDeniedPayload{} }},
	{CallableCompleted, []field{
		{key: "duration_us", kind: kInt},
		{key: "result_digest", kind: kHex},
	}, func() Payload { return &CallableCompletedPayload{} }},
	{CallableFailed, []field{
		{key: "duration_us", kind: kInt},
		{key: "error_class", kind: kString},
	}, func() Payload { return &CallableFailedPayload{} }},
	{OperationCancelled, []field{
		{key: "duration_us", kind: kInt},
	}, func() Payload { return &OperationCancelledPayload{} }},
	{OperationTimedOut, []field{
		{key: "duration_us", kind: kInt},
	}, func() Payload { return &OperationTimedOutPayload{} }},
	{ExternalResultAmbiguous, []field{
		{key: "duration_us", kind: kInt},
		{key: "reason_code", kind: kString},
	}, func() Payload { return &ExternalResultAmbiguousPayload{} }},
	{TaskClosed, []field{
		{key: "closed_at", kind: kTime},
		{key: "opened_at", kind: kTime},
		{key: "operation_count", kind: kInt},
		{key: "task_boundary_id", kind: kUUID},
	}, func() Payload { return &TaskClosedPayload{} }},
	{RecordSuperseded, []field{
		{key: "reason_code", kind: kString},
	}, func() Payload { return &RecordSupersededPayload{} }},
}

func schemaOf(t Type) *schema {
	for i := range schemas {
		if schemas[i].typ == t {
			return &schemas[i]
		}
	}
	return nil
}

// PayloadKeys returns the member names of t's payload in canonical order, or
// nil for an unknown type.
func PayloadKeys(t Type) []string {
	s := schemaOf(t)
	if s == nil {
		return nil
	}
	keys := make([]string, len(s.fields))
	for i, f := range s.fields {
		keys[i] = f.key
	}
	return keys
}

// PayloadError reports a payload_json that does not satisfy its record type's
// schema. Key is the offending member ("" for the whole payload).
type PayloadError struct {
	Type Type
	Key  string
	Msg  string
}

func (e *PayloadError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s payload: %s", e.Type, e.Msg)
	}
	return fmt.Sprintf("%s payload: %s: %s", e.Type, e.Key, e.Msg)
}

// EncodePayload returns the canonical payload_json of p after checking it
// against its record type's schema.
func EncodePayload(p Payload) (string, error) {
	bp := encBufs.Get().(*[]byte)
	defer encBufs.Put(bp)
	b, err := appendPayload((*bp)[:0], p)
	if err != nil {
		return "", err
	}
	if cap(b) <= 4<<10 {
		*bp = b
	}
	return string(b), nil
}

// encBufs recycles EncodePayload's buffers.
var encBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// DecodePayload decodes payload_json of a record of type t. It applies the
// same checks as ParseRecord: canonical form, exactly the schema's members,
// value grammars and cross-member rules.
func DecodePayload(t Type, payloadJSON string) (Payload, error) {
	s := schemaOf(t)
	if s == nil {
		return nil, &PayloadError{Type: t, Msg: "unknown record type"}
	}
	var spans [maxFields]span
	if err := validatePayload(t, []byte(payloadJSON), &spans); err != nil {
		return nil, err
	}
	p := s.new()
	if err := strictjson.Decode([]byte(payloadJSON), p); err != nil {
		return nil, &PayloadError{Type: t, Msg: err.Error()}
	}
	// Return the value, not the pointer, so type switches read naturally.
	switch v := p.(type) {
	case *PolicyBoundPayload:
		return *v, nil
	case *OperationStartedPayload:
		return *v, nil
	case *GateEvaluatedPayload:
		return *v, nil
	case *ExceptionGrantedPayload:
		return *v, nil
	case *ApprovalGrantedPayload:
		return *v, nil
	case *OperationDeniedPayload:
		return *v, nil
	case *CallableCompletedPayload:
		return *v, nil
	case *CallableFailedPayload:
		return *v, nil
	case *OperationCancelledPayload:
		return *v, nil
	case *OperationTimedOutPayload:
		return *v, nil
	case *ExternalResultAmbiguousPayload:
		return *v, nil
	case *TaskClosedPayload:
		return *v, nil
	case *RecordSupersededPayload:
		return *v, nil
	}
	panic("chain: schema table and payload types disagree")
}

// span is a [start, end) byte range of a member value inside a payload.
type span struct{ start, end int32 }

func (s span) of(b []byte) []byte { return b[s.start:s.end] }

// validatePayload is the fast, exact check of a payload against its schema.
// p must be canonical JSON with exactly the schema's members in canonical
// order; spans receives each member's raw value range. On failure it returns
// a *PayloadError explaining the first problem.
func validatePayload(t Type, p []byte, spans *[maxFields]span) error {
	s := schemaOf(t)
	if s == nil {
		return &PayloadError{Type: t, Msg: "unknown record type"}
	}
	if !scanPayload(s, p, spans) {
		return explainPayload(s, p)
	}
	return checkPayloadRules(s, p, spans)
}

func scanPayload(s *schema, p []byte, spans *[maxFields]span) bool {
	i := 0
	if len(p) < 2 || p[0] != '{' {
		return false
	}
	i = 1
	for n, f := range s.fields {
		if n > 0 {
			if i >= len(p) || p[i] != ',' {
				return false
			}
			i++
		}
		// "key":
		if i+len(f.key)+3 > len(p) || p[i] != '"' || string(p[i+1:i+1+len(f.key)]) != f.key ||
			p[i+1+len(f.key)] != '"' || p[i+2+len(f.key)] != ':' {
			return false
		}
		i += len(f.key) + 3
		end, ok := scanValue(f, p, i)
		if !ok {
			return false
		}
		spans[n] = span{int32(i), int32(end)}
		i = end
	}
	return i == len(p)-1 && p[i] == '}'
}

func scanValue(f field, p []byte, i int) (int, bool) {
	isNull := func() bool { return i+4 <= len(p) && string(p[i:i+4]) == "null" }
	switch f.kind {
	case kString, kStringNull, kActor, kActorNull:
		if (f.kind == kStringNull || f.kind == kActorNull) && isNull() {
			return i + 4, true
		}
		end, ok := scanString(p, i)
		if !ok || end-i <= 2 {
			return 0, false
		}
		if f.kind == kActor || f.kind == kActorNull {
			c := bytes.IndexByte(p[i+1:end-1], ':')
			if c <= 0 || c == end-i-3 {
				return 0, false
			}
		}
		return end, true
	case kHex:
		if i+66 > len(p) || p[i] != '"' || p[i+65] != '"' || !isHex64(p[i+1:i+65]) {
			return 0, false
		}
		return i + 66, true
	case kUUID, kUUIDNull:
		if f.kind == kUUIDNull && isNull() {
			return i + 4, true
		}
		if i+38 > len(p) || p[i] != '"' || p[i+37] != '"' || !isUUID(p[i+1:i+37]) {
			return 0, false
		}
		return i + 38, true
	case kTime:
		if i+29 > len(p) || p[i] != '"' || p[i+28] != '"' || !isTime(p[i+1:i+28]) {
			return 0, false
		}
		return i + 29, true
	case kInt:
		_, end, ok := scanInt(p, i)
		return end, ok
	case kStringList:
		if i >= len(p) || p[i] != '[' {
			return 0, false
		}
		i++
		if i < len(p) && p[i] == ']' {
			return i + 1, true
		}
		for {
			end, ok := scanString(p, i)
			if !ok || end-i <= 2 {
				return 0, false
			}
			i = end
			if i >= len(p) {
				return 0, false
			}
			if p[i] == ']' {
				return i + 1, true
			}
			if p[i] != ',' {
				return 0, false
			}
			i++
		}
	case kEnum:
		end, ok := scanString(p, i)
		if !ok {
			return 0, false
		}
		if !slices.Contains(f.enum, string(p[i+1:end-1])) {
			return 0, false
		}
		return end, true
	}
	return 0, false
}

// checkPayloadRules applies the cross-member rules of a payload that already
// matches its grammar.
func checkPayloadRules(s *schema, p []byte, spans *[maxFields]span) error {
	fail := func(key, format string, args ...any) error {
		return &PayloadError{Type: s.typ, Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	switch s.typ {
	case ExceptionGranted:
		// expires_at (1) must be later than issued_at (4).
		if string(spans[1].of(p)) <= string(spans[4].of(p)) {
			return fail("expires_at", "must be later than issued_at")
		}
	case ApprovalGranted:
		// expires_at (1) must be later than issued_at (3).
		if string(spans[1].of(p)) <= string(spans[3].of(p)) {
			return fail("expires_at", "must be later than issued_at")
		}
	case OperationDenied:
		approver := spans[0].of(p)
		disp := string(spans[1].of(p))
		if disp == `"escalate"` && string(approver) == "null" {
			return fail("approver_class", "escalate requires an approver_class")
		}
		if disp == `"deny"` && string(approver) != "null" {
			return fail("approver_class", "must be null when disposition is deny")
		}
	case TaskClosed:
		if string(spans[0].of(p)) < string(spans[1].of(p)) {
			return fail("closed_at", "is before opened_at")
		}
	}
	return nil
}

// explained counts the calls of explainRecord and explainPayload: each
// costs a general JSON decode, so verifying must call them only for the
// findings it keeps (TestUnreportedLinesAreNotExplained counts them
// rather than timing the verifier).
var explained atomic.Int64

// explainPayload finds a human-readable reason for a payload that the fast
// scanner rejected. It is only called on failure.
func explainPayload(s *schema, p []byte) error {
	explained.Add(1)
	fail := func(key, format string, args ...any) error {
		return &PayloadError{Type: s.typ, Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	canon, err := jcs.Transform(p)
	if err != nil {
		return fail("", "not JSON: %v", err)
	}
	if !bytes.Equal(canon, p) {
		return fail("", "not in canonical form (RFC 8785)")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(p, &obj); err != nil || p[0] != '{' {
		return fail("", "not an object")
	}
	var missing, extra []string
	for _, f := range s.fields {
		if _, ok := obj[f.key]; !ok {
			missing = append(missing, f.key)
		}
	}
	for k := range obj {
		if !slices.ContainsFunc(s.fields, func(f field) bool { return f.key == k }) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 {
		return fail(missing[0], "missing member")
	}
	if len(extra) > 0 {
		return fail(extra[0], "unknown member")
	}
	for _, f := range s.fields {
		v := obj[f.key]
		if _, ok := scanValue(f, v, 0); !ok {
			return fail(f.key, "want %s", kindName(f))
		}
		if end, _ := scanValue(f, v, 0); end != len(v) {
			return fail(f.key, "want %s", kindName(f))
		}
	}
	return fail("", "invalid payload")
}

func kindName(f field) string {
	switch f.kind {
	case kString:
		return "a non-empty string"
	case kStringNull:
		return "a non-empty string or null"
	case kHex:
		return "64 lowercase hex characters"
	case kUUID:
		return "a lowercase UUID"
	case kUUIDNull:
		return "a lowercase UUID or null"
	case kTime:
		return "a YYYY-MM-DDTHH:MM:SS.ffffffZ timestamp"
	case kInt:
		return "an integer in [0, 2^53-1]"
	case kActor:
		return `a "kind:id" actor`
	case kActorNull:
		return `a "kind:id" actor or null`
	case kStringList:
		return "an array of non-empty strings"
	case kEnum:
		return "one of " + strings.Join(f.enum, ", ")
	}
	return "a valid value"
}
