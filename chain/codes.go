package chain

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Code is a stable finding code. Codes are a contract: tools and tests match
// on them, never on message text. docs/certverify.md lists each with its
// meaning and exit code; TestCodesDocumented keeps the two in step.
type Code string

// Finding codes. Record-level codes come first, then links, then the
// operation state machine, then certificates, anchors and proofs.
const (
	CodeMalformedRecord      Code = "malformed_record"         // line is not a canonical record with the required members and value grammars
	CodePayloadInvalid       Code = "payload_invalid"          // payload_json violates its record type's schema
	CodeUnsupportedAlgorithm Code = "unsupported_algorithm"    // hash_algorithm is not sha256-v1
	CodeAlgorithmChanged     Code = "algorithm_changed"        // hash_algorithm differs from the chain's first record's
	CodeContentMismatch      Code = "content_mismatch"         // payload_digest or chain_hash does not recompute
	CodeBrokenLink           Code = "broken_link"              // previous_chain_hash is not the previous record's chain_hash
	CodeSequenceGap          Code = "sequence_gap"             // sequence skips ahead of previous+1
	CodeSequenceDuplicate    Code = "sequence_duplicate"       // sequence repeats or goes back
	CodeGenesisInvalid       Code = "genesis_invalid"          // first record is not sequence 0 with previous_chain_hash null
	CodeEmptyChain           Code = "empty_chain"              // no records
	CodeChainIDMismatch      Code = "chain_id_mismatch"        // record, checkpoint or certificate names another chain
	CodeDuplicateRecordID    Code = "duplicate_record_id"      // a record_id occurs twice
	CodeTornTail             Code = "torn_tail"                // the last line has no newline: an interrupted append
	CodeHeadMismatch         Code = "head_mismatch"            // the head differs from the expected head or the certificate's
	CodeTruncated            Code = "truncated"                // a checkpoint or certificate covers more records than the chain has
	CodeRootMismatch         Code = "root_mismatch"            // the Merkle root differs from a checkpoint's or certificate's
	CodeTaskNotClosed        Code = "task_not_closed"          // no task_closed record
	CodeRecordAfterClose     Code = "record_after_close"       // a record follows task_closed
	CodeMissingTerminal      Code = "missing_terminal"         // an operation_started has no terminal in a closed chain
	CodeDuplicateTerminal    Code = "duplicate_terminal"       // a second terminal for one operation
	CodeOrphanTerminal       Code = "orphan_terminal"          // a terminal for an operation that was never started
	CodeOrphanEvent          Code = "orphan_event"             // a gate or exception record for an operation that was never started
	CodeMissingPolicyBound   Code = "missing_policy_bound"     // operation_started without a preceding policy_bound
	CodeOperationOrder       Code = "operation_order"          // a record out of its operation's order (e.g. a second operation_started)
	CodeEventAfterTerminal   Code = "event_after_terminal"     // a record for an operation after its terminal
	CodeGateNotEnforced      Code = "gate_not_enforced"        // a blocking gate deny without operation_denied as terminal
	CodePolicyMismatch       Code = "policy_mismatch"          // policy id, version or digest disagree
	CodeBoundaryMismatch     Code = "boundary_mismatch"        // task_boundary_id disagrees
	CodeOperationCount       Code = "operation_count_mismatch" // task_closed.operation_count is not the number of operations
	CodeDanglingSupersede    Code = "dangling_supersede"       // supersedes_record_id names no earlier record
	CodeSummaryMismatch      Code = "summary_mismatch"         // certificate gate_summary differs from the records
	CodeGradeMismatch        Code = "grade_mismatch"           // certificate process_grade differs from the records
	CodeMalformedCertificate Code = "malformed_certificate"    // certificate or DSSE envelope does not parse
	CodeMalformedCheckpoint  Code = "malformed_checkpoint"     // checkpoint note does not parse
	CodeMalformedProof       Code = "malformed_proof"          // proof file does not parse
	CodeBadSignature         Code = "bad_signature"            // a trusted key's signature does not verify
	CodeUnknownKey           Code = "unknown_key"              // signed only by keys the trust file does not list
	CodeKeyRoleMismatch      Code = "key_role_mismatch"        // signed by a trusted key of the wrong role
	CodeKeyNotValid          Code = "key_not_valid"            // the signed time is outside the key's validity window
	CodeValidityUnchecked    Code = "validity_unchecked"       // a key has a validity window but no signed time is available
	CodeInclusionFailed      Code = "inclusion_failed"         // an inclusion proof does not verify
	CodeConsistencyFailed    Code = "consistency_failed"       // a consistency proof does not verify
	CodeUnanchored           Code = "unanchored"               // nothing trusted covers the head
	CodePolicyUnchecked      Code = "policy_unchecked"         // no snapshot given: the policy pin was not checked
	CodeIgnoredSignature     Code = "ignored_signature"        // a signature by an unknown key was ignored
	CodeMintedBeforeClose    Code = "minted_before_close"      // certificate minted_at precedes the task_closed record's closed_at
	CodeApprovalForged       Code = "approval_forged"          // an approval_granted's signed approval does not verify under a trusted approver key
	CodeApprovalExpired      Code = "approval_expired"         // an approval was used outside its signed validity window or its key's
	CodeApprovalReplayed     Code = "approval_replayed"        // an approval's nonce is used by a second approval_granted
	CodeApprovalWrongClass   Code = "approval_wrong_class"     // an approval's class is not the escalation's or its key's approver class
	CodeApprovalWrongRequest Code = "approval_wrong_request"   // an approval is bound to another request, gate or policy than the record's
	CodeApprovalTooLong      Code = "approval_too_long"        // an approval is valid longer than its rule's expires_after (needs the snapshot)
)

// Severity says how a finding affects the verdict.
type Severity string

// Severities, from the most to the least severe.
const (
	// SeverityError fails verification (exit 1).
	SeverityError Severity = "error"
	// SeverityUnsupported means the input uses something this verifier
	// does not implement (exit 2 unless an error is also present).
	SeverityUnsupported Severity = "unsupported"
	// SeverityInconclusive means the evidence is consistent but not anchored
	// to anything trusted (exit 3 unless a worse finding is present).
	SeverityInconclusive Severity = "inconclusive"
	// SeverityWarning is reported without affecting the exit code.
	SeverityWarning Severity = "warning"
)

// DefaultSeverity returns the severity a code has unless a caller decides
// otherwise (task_not_closed is a warning for an open chain and an error
// for a certificate).
func (c Code) DefaultSeverity() Severity {
	switch c {
	case CodeUnsupportedAlgorithm:
		return SeverityUnsupported
	case CodeUnanchored, CodeValidityUnchecked:
		return SeverityInconclusive
	case CodePolicyUnchecked, CodeIgnoredSignature, CodeTaskNotClosed:
		return SeverityWarning
	}
	return SeverityError
}

// Codes lists every finding code in documentation order.
var Codes = []Code{
	CodeMalformedRecord, CodePayloadInvalid, CodeUnsupportedAlgorithm, CodeAlgorithmChanged, CodeContentMismatch,
	CodeBrokenLink, CodeSequenceGap, CodeSequenceDuplicate, CodeGenesisInvalid, CodeEmptyChain,
	CodeChainIDMismatch, CodeDuplicateRecordID, CodeTornTail, CodeHeadMismatch, CodeTruncated,
	CodeRootMismatch, CodeTaskNotClosed, CodeRecordAfterClose, CodeMissingTerminal,
	CodeDuplicateTerminal, CodeOrphanTerminal, CodeOrphanEvent, CodeMissingPolicyBound,
	CodeOperationOrder, CodeEventAfterTerminal, CodeGateNotEnforced, CodePolicyMismatch,
	CodeBoundaryMismatch, CodeOperationCount, CodeDanglingSupersede, CodeSummaryMismatch,
	CodeGradeMismatch, CodeMalformedCertificate, CodeMalformedCheckpoint, CodeMalformedProof,
	CodeBadSignature, CodeUnknownKey, CodeKeyRoleMismatch, CodeKeyNotValid, CodeValidityUnchecked,
	CodeInclusionFailed, CodeConsistencyFailed, CodeUnanchored, CodePolicyUnchecked,
	CodeIgnoredSignature, CodeMintedBeforeClose, CodeApprovalForged, CodeApprovalExpired, CodeApprovalReplayed,
	CodeApprovalWrongClass, CodeApprovalWrongRequest, CodeApprovalTooLong,
}

// Finding is one verification result. Sequence and Line locate record-level
// findings (Line is 1-based; both are nil when not applicable). Expected and
// Actual carry both sides of a mismatch in their wire spelling.
type Finding struct {
	Code     Code     `json:"code"`
	Severity Severity `json:"severity"`
	Sequence *int64   `json:"sequence"`
	Line     *int64   `json:"line"`
	Expected string   `json:"expected"`
	Actual   string   `json:"actual"`
	Message  string   `json:"message"`
}

func (f Finding) String() string {
	s := string(f.Code)
	if f.Line != nil {
		s = "line " + strconv.FormatInt(*f.Line, 10) + ": " + s
	}
	if f.Sequence != nil {
		s += " (sequence " + strconv.FormatInt(*f.Sequence, 10) + ")"
	}
	if f.Message != "" {
		s += ": " + f.Message
	}
	if f.Expected != "" || f.Actual != "" {
		s += fmt.Sprintf(" (expected %s, actual %s)", orDash(f.Expected), orDash(f.Actual))
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// NewFinding returns a finding with the code's default severity.
func NewFinding(c Code, msg string) Finding {
	return Finding{Code: c, Severity: c.DefaultSeverity(), Message: msg}
}

// At returns f located at a record.
func (f Finding) At(seq, line int64) Finding {
	if seq >= 0 {
		f.Sequence = &seq
	}
	if line > 0 {
		f.Line = &line
	}
	return f
}

// Values returns f with expected and actual values.
func (f Finding) Values(expected, actual string) Finding {
	f.Expected, f.Actual = expected, actual
	return f
}

// maxFindingText bounds each of a chain finding's message, expected and
// actual values, in bytes. Findings quote values from records (a
// record_type, a member name, a gate id), which may be nearly
// MaxRecordBytes long: unbounded, the default 100 findings of a hostile
// chain made a report of 100 MB.
const maxFindingText = 1 << 10

// maxQuoted bounds a record value kept by the verifier to quote it later.
const maxQuoted = 256

// clip returns s cut to at most n bytes at a UTF-8 boundary, marked with
// "…" when it was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// clipped returns f with its texts cut to maxFindingText.
func (f Finding) clipped() Finding {
	f.Message = clip(f.Message, maxFindingText)
	f.Expected = clip(f.Expected, maxFindingText)
	f.Actual = clip(f.Actual, maxFindingText)
	return f
}
