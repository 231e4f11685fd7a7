// Package chain is polc's evidence layer (docs/evidence.md): records, the
// sha256-v1 hash chain, stores, streaming verification, RFC 6962 Merkle
// proofs, signed checkpoints, trust files and the projection source. It knows policies only by id, version and
// digest.
//
// # Record format (sha256-v1)
//
// A chain is a JSONL file: one record per line, each line the RFC 8785
// canonical JSON of one object followed by "\n". A record has exactly these
// members, which in canonical order are:
//
//	chain_hash            64 lowercase hex
//	chain_id              lowercase UUID, the same on every record
//	created_at            YYYY-MM-DDTHH:MM:SS.ffffffZ (UTC, 6 digits)
//	hash_algorithm        "sha256-v1"
//	operation_id          lowercase UUID; null exactly on task_closed and record_superseded
//	payload_digest        64 lowercase hex
//	payload_json          string: the canonical JSON of the payload (below)
//	policy_id             lowercase UUID
//	policy_version        non-empty string
//	previous_chain_hash   64 lowercase hex; null exactly on the genesis record
//	record_id             lowercase UUID, unique in the chain
//	record_type           one of the thirteen Types
//	sequence              integer, 0 for the genesis record, then +1, at most 2^53-1
//	supersedes_record_id  lowercase UUID; set exactly on record_superseded
//
// payload_digest is SHA-256 of the UTF-8 bytes of payload_json. chain_hash
// is SHA-256 of the canonical JSON of the record without chain_hash, which
// for a canonical line is "{" followed by the bytes after the chain_hash
// member: verifiers hash the line itself and never re-serialise.
//
// Payloads (docs/evidence.md "Payloads") are canonical JSON objects with
// exactly their type's members; integers only (no floats), non-empty
// strings, hex digests of 64 lowercase characters, null only where a member
// is nullable:
//
//	policy_bound               effect_backend_id, effect_capability_digest (hex), policy_digest (hex), task_boundary_id (uuid)
//	operation_started          actor ("kind:id"|null), attempt_id (uuid), parent_operation_id (uuid|null), request_digest (hex), run_id (string|null), tool_id
//	gate_evaluated             arguments_digest (hex), decision (allow|deny), gate_id, level (hard|soft|advisory), reason_code, result_id (uuid), rule_ids ([string])
//	exception_granted          actor ("kind:id"), expires_at (time, > issued_at), gate_id, grant_id (uuid), issued_at (time), reason_code
//	approval_granted           approver_class, expires_at (time, > issued_at), gate_id, issued_at (time), nonce (hex), signed_approval (string), subject_digest (hex)
//	operation_denied           approver_class (string, null unless escalate), disposition (deny|escalate), gate_id (string|null), reason_code
//	callable_completed         duration_us (int), result_digest (hex)
//	callable_failed            duration_us, error_class
//	operation_cancelled        duration_us
//	operation_timed_out        duration_us
//	external_result_ambiguous  duration_us, reason_code
//	task_closed                closed_at (time, >= opened_at), opened_at (time), operation_count (int), task_boundary_id (uuid)
//	record_superseded          reason_code
//
// approval_granted (added with format version sha256-v1, which it does not
// change: a verifier that predates it reports payload_invalid, never a
// silent pass) records a signed approval that lifted a soft gate's
// escalation (docs/approvals.md). signed_approval is the approval exactly
// as presented: a C2SP signed note whose text is "polc.dev/approval/v1\n"
// and the approval's canonical JSON (version 1: approval_id,
// approver_class, decision, expires_at, gate_id, issued_at, key_id, nonce,
// note, policy_digest, request_id, subject_digest, version), parsed
// strictly by package approval. The other members are what the executor
// checked it against: the escalation's gate and approver class, the
// operation's subject digest (executor.SubjectDigest) and the approval's
// signed window and nonce. The executor appends it after operation_started
// and before the operation's gate_evaluated records; each nonce appears
// at most once in a chain (approval_replayed).
//
// # Chain rules
//
// Besides each record's own checks and the links, a valid chain has one
// policy id, version and policy_bound digest, one task boundary; each
// operation's records read policy_bound, operation_started, gate_evaluated,
// exception_granted or approval_granted records, then exactly one terminal
// (in a closed chain); a hard deny, or a soft deny without an earlier
// unexpired exception or approval for its gate, ends in operation_denied; task_closed is the last record and
// counts the operation_started records; record_superseded names an earlier
// record. docs/certverify.md lists the finding code of every violation.
//
// # Merkle tree, checkpoints, proofs
//
// Leaf i of the chain's RFC 6962 tree is SHA-256(0x00 || chain_hash_i) (the
// 32 raw bytes). A checkpoint is a C2SP signed note (Ed25519) whose body is
// exactly "polc.dev/chain/<chain_id>\n<size>\n<base64 root>\n". Inclusion
// proofs use C2SP tlog-proof; consistency proofs use
// ConsistencyProofFile's format. See docs/evidence.md.
package chain
