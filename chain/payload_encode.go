package chain

import "polc.dev/polc/internal/jcs"

// Every payload type writes its own canonical form (jcs.Appender): a
// payload is encoded for every record on the governed hot path, where
// reflection cost a tenth of the executor's time. The member keys below
// are written in RFC 8785 order (the schemas' order);
// TestPayloadAppendersMatchReflection checks each type against
// Transform(encoding/json) of the same values.

// penc appends one payload object's members; the first error sticks.
type penc struct {
	b   []byte
	err error
}

// str appends key (separator, quoted name and colon) and v as a string.
func (e *penc) str(key, v string) {
	if e.err != nil {
		return
	}
	e.b, e.err = jcs.AppendValidString(append(e.b, key...), v)
}

// nullable appends key and v, or null when v is nil.
func (e *penc) nullable(key string, v *string) {
	if v == nil {
		if e.err == nil {
			e.b = append(append(e.b, key...), "null"...)
		}
		return
	}
	e.str(key, *v)
}

// int appends key and n.
func (e *penc) int(key string, n int64) {
	if e.err == nil {
		e.b = jcs.AppendInt(append(e.b, key...), n)
	}
}

// list appends key and vs as an array of strings (null when nil, as
// encoding/json does).
func (e *penc) list(key string, vs []string) {
	if e.err != nil {
		return
	}
	e.b = append(e.b, key...)
	if vs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, v := range vs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if e.b, e.err = jcs.AppendValidString(e.b, v); e.err != nil {
			return
		}
	}
	e.b = append(e.b, ']')
}

// end closes the object.
func (e *penc) end() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	return append(e.b, '}'), nil
}

// AppendCanonical implements jcs.Appender.
func (p PolicyBoundPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.str(`{"effect_backend_id":`, p.EffectBackendID)
	e.str(`,"effect_capability_digest":`, p.EffectCapabilityDigest)
	e.str(`,"policy_digest":`, p.PolicyDigest)
	e.str(`,"task_boundary_id":`, p.TaskBoundaryID)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p OperationStartedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.nullable(`{"actor":`, p.Actor)
	e.str(`,"attempt_id":`, p.AttemptID)
	e.nullable(`,"parent_operation_id":`, p.ParentOperationID)
	e.str(`,"request_digest":`, p.RequestDigest)
	e.nullable(`,"run_id":`, p.RunID)
	e.str(`,"tool_id":`, p.ToolID)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p GateEvaluatedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.str(`{"arguments_digest":`, p.ArgumentsDigest)
	e.str(`,"decision":`, p.Decision)
	e.str(`,"gate_id":`, p.GateID)
	e.str(`,"level":`, p.Level)
	e.str(`,"reason_code":`, p.ReasonCode)
	e.str(`,"result_id":`, p.ResultID)
	e.list(`,"rule_ids":`, p.RuleIDs)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p ExceptionGrantedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.str(`{"actor":`, p.Actor)
	e.str(`,"expires_at":`, p.ExpiresAt)
	e.str(`,"gate_id":`, p.GateID)
	e.str(`,"grant_id":`, p.GrantID)
	e.str(`,"issued_at":`, p.IssuedAt)
	e.str(`,"reason_code":`, p.ReasonCode)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p ApprovalGrantedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.str(`{"approver_class":`, p.ApproverClass)
	e.str(`,"expires_at":`, p.ExpiresAt)
	e.str(`,"gate_id":`, p.GateID)
	e.str(`,"issued_at":`, p.IssuedAt)
	e.str(`,"nonce":`, p.Nonce)
	e.str(`,"signed_approval":`, p.SignedApproval)
	e.str(`,"subject_digest":`, p.SubjectDigest)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p OperationDeniedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.nullable(`{"approver_class":`, p.ApproverClass)
	e.str(`,"disposition":`, p.Disposition)
	e.nullable(`,"gate_id":`, p.GateID)
	e.str(`,"reason_code":`, p.ReasonCode)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p CallableCompletedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.int(`{"duration_us":`, p.DurationUS)
	e.str(`,"result_digest":`, p.ResultDigest)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p CallableFailedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.int(`{"duration_us":`, p.DurationUS)
	e.str(`,"error_class":`, p.ErrorClass)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p OperationCancelledPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.int(`{"duration_us":`, p.DurationUS)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p OperationTimedOutPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.int(`{"duration_us":`, p.DurationUS)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p ExternalResultAmbiguousPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.int(`{"duration_us":`, p.DurationUS)
	e.str(`,"reason_code":`, p.ReasonCode)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p TaskClosedPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.str(`{"closed_at":`, p.ClosedAt)
	e.str(`,"opened_at":`, p.OpenedAt)
	e.int(`,"operation_count":`, p.OperationCount)
	e.str(`,"task_boundary_id":`, p.TaskBoundaryID)
	return e.end()
}

// AppendCanonical implements jcs.Appender.
func (p RecordSupersededPayload) AppendCanonical(b []byte) ([]byte, error) {
	e := penc{b: b}
	e.str(`{"reason_code":`, p.ReasonCode)
	return e.end()
}
