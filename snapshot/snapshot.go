// Package snapshot defines PolicySnapshot, the compiled, immutable output of
// polc: the only form of a permission policy that runtimes evaluate.
//
// # Byte format (polc.snapshot/v1)
//
// A snapshot file is the RFC 8785 (JCS) canonical JSON of one Snapshot
// object, followed by at most one "\n". Canonical JSON means: object keys
// sorted by UTF-16 code units, no whitespace, strings escaped as
// JSON.stringify does, integers in plain decimal. Snapshots carry no floats.
//
// Top-level members (all required; null only where noted):
//
//	format            "polc.snapshot/v1"
//	policy_id         lowercase UUID
//	name              policy name (its key under `policies`)
//	version           author-declared version string
//	description       string ("" when none)
//	digest            64 lowercase hex chars, see below
//	digest_algorithm  "sha256-v1"
//	principal_scope   sorted, duplicate-free principal patterns
//	tenant_scope      sorted, duplicate-free tenant patterns
//	compiled_rules    rules sorted by rule_id; rule i has order i
//	gate_bindings     gates sorted by order; order is 0..n-1
//	lineage           ancestors, root first: {policy_id, name, version, digest}
//	expansions        approved expansions: {path, values (strings and integers
//	                  within ±(2^53-1)), authority, evidence}
//	provenance        {compiler}
//	release_state     "staged" | "active"
//	activated_at      null | "YYYY-MM-DDTHH:MM:SS.ffffffZ"
//	activated_by      null | {kind, id}
//
// Every rule has kind, rule_id, order, effect and provenance
// ([{policy, field}], sorted). The closed set of kinds and their other
// members is given by the Go types in rules.go; a rule with a member its
// kind does not declare, or without one it does, is rejected. Integer
// members (limit, window_microseconds, expires_after_microseconds) are at
// most 2^53-1, the largest integer canonical JSON carries exactly.
//
// Two members carry a setting of the whole policy, copied into each rule
// of their kind: every subprocess allow rule has the same shell, and
// every budget rule the same window_microseconds (both null or both the
// same integer). A snapshot whose rules disagree is rejected: a policy
// has one of each, and a compiler reading it back as a parent would have
// to pick one.
//
// # Digest (sha256-v1)
//
// The canonical bytes of a snapshot are the JCS bytes of the snapshot object
// with the members digest, release_state, activated_at and activated_by
// removed. The digest is the lowercase hex SHA-256 of those bytes, with no
// prefix; the algorithm is named by digest_algorithm. Activation therefore
// never changes a digest, and neither does reformatting the CUE source:
// source positions live in a separate *.srcmap.json sidecar.
//
// Parse accepts only input that re-encodes byte for byte (modulo the one
// trailing newline), so two files with the same digest are the same file.
package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"polc.dev/polc/internal/jcs"
)

// Format is the value of the format member of every v1 snapshot.
const Format = "polc.snapshot/v1"

// DigestAlgorithm is the only digest algorithm v1 snapshots use.
const DigestAlgorithm = "sha256-v1"

// CompilerContract identifies the lowering rules that produced a snapshot; it
// changes only when the same declaration would compile to different rules.
const CompilerContract = "polc.compile/v1"

// Release states.
const (
	Staged = "staged"
	Active = "active"
)

// Snapshot is a compiled PermissionPolicy. Values returned by Parse are valid;
// callers must treat them as immutable.
type Snapshot struct {
	Format          string        `json:"format"`
	PolicyID        string        `json:"policy_id"`
	Name            string        `json:"name"`
	Version         string        `json:"version"`
	Description     string        `json:"description"`
	Digest          string        `json:"digest"`
	DigestAlgorithm string        `json:"digest_algorithm"`
	PrincipalScope  []string      `json:"principal_scope"`
	TenantScope     []string      `json:"tenant_scope"`
	CompiledRules   Rules         `json:"compiled_rules"`
	GateBindings    []GateBinding `json:"gate_bindings"`
	Lineage         []Ancestor    `json:"lineage"`
	Expansions      []Expansion   `json:"expansions"`
	Provenance      Provenance    `json:"provenance"`
	ReleaseState    string        `json:"release_state"`
	ActivatedAt     *string       `json:"activated_at"`
	ActivatedBy     *ActorRef     `json:"activated_by"`
}

// GateBinding binds rules to a gate of a given level. Rules are selected by
// Selectors (globs over rule ids, '*' any run of characters) as declared;
// RuleIDs is the resolved, sorted selection.
type GateBinding struct {
	GateID    string   `json:"gate_id"`
	AdapterID string   `json:"adapter_id"`
	Level     string   `json:"level"`
	Order     int      `json:"order"`
	ToolIDs   []string `json:"tool_ids"`
	Selectors []string `json:"selectors"`
	RuleIDs   []string `json:"rule_ids"`
}

// Gate levels, strictest first.
const (
	LevelHard     = "hard"
	LevelSoft     = "soft"
	LevelAdvisory = "advisory"
)

// AdapterID is the gate adapter that evaluates polc permission rules.
const AdapterID = "polc.permission/v1"

// Ancestor pins one policy in the inheritance chain.
type Ancestor struct {
	PolicyID string `json:"policy_id"`
	Name     string `json:"name"`
	Version  string `json:"version"`
	Digest   string `json:"digest"`
}

// Expansion records an approved grant beyond the parent policy.
type Expansion struct {
	Path      string `json:"path"`
	Values    []any  `json:"values"`
	Authority string `json:"authority"`
	Evidence  string `json:"evidence"`
}

// Provenance records how the snapshot was produced. It deliberately names no
// file, time or tool version, so that digests are reproducible.
type Provenance struct {
	Compiler string `json:"compiler"`
}

// ActorRef identifies who activated a snapshot.
type ActorRef struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

var (
	hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)
	uuidRe    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	timeRe    = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$`)
)

// CanonicalBytes returns the bytes the digest covers: JCS of s without
// digest, release_state, activated_at and activated_by.
func (s *Snapshot) CanonicalBytes() ([]byte, error) {
	return jcs.AppendOmit(nil, s, digestExcluded)
}

// ComputeDigest returns the sha256-v1 digest of s's canonical bytes.
func (s *Snapshot) ComputeDigest() (string, error) {
	b, err := s.CanonicalBytes()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Seal sets DigestAlgorithm and Digest from the current content.
func (s *Snapshot) Seal() error {
	s.DigestAlgorithm = DigestAlgorithm
	d, err := s.ComputeDigest()
	if err != nil {
		return err
	}
	s.Digest = d
	return nil
}

// Marshal returns the file form of s: its canonical JSON and a newline.
// Precondition: s is sealed; Marshal does not recompute the digest.
func (s *Snapshot) Marshal() ([]byte, error) {
	b, err := jcs.Marshal(s)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// digestExcluded are the members outside the digest.
var digestExcluded = map[string]bool{"digest": true, "release_state": true, "activated_at": true, "activated_by": true}

// digestOfCanonical hashes the canonical bytes of a snapshot given as
// canonical JSON, by dropping the excluded members from the input bytes
// themselves: what is hashed is what was read, not a re-serialisation.
func digestOfCanonical(body []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return "", err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !digestExcluded[k] {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, jcs.CompareKeys)
	h := sha256.New()
	h.Write([]byte{'{'})
	for i, k := range keys {
		if i > 0 {
			h.Write([]byte{','})
		}
		h.Write(jcs.AppendString(nil, k))
		h.Write([]byte{':'})
		h.Write(m[k])
	}
	h.Write([]byte{'}'})
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ParseError is returned by Parse for input that is not a valid snapshot.
// Path is the JSON path of the offending member ("" for the whole file).
type ParseError struct {
	Path string
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Path == "" {
		return "snapshot: " + e.Msg
	}
	return fmt.Sprintf("snapshot: %s: %s", e.Path, e.Msg)
}

// DigestMismatchError is returned by Parse when the digest member does not
// equal the digest recomputed from the content.
type DigestMismatchError struct {
	Declared string
	Computed string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("snapshot: digest %s does not match content (recomputed %s)", e.Declared, e.Computed)
}

// Parse decodes and validates a snapshot file. It rejects input that is not
// canonical JSON (one trailing newline allowed), unknown or missing members,
// nulls where a value is required, unknown rule kinds, members a rule's kind
// does not declare, invalid patterns, inconsistent orders or references, and
// a digest that does not recompute (*DigestMismatchError).
func Parse(data []byte) (*Snapshot, error) {
	body := bytes.TrimSuffix(data, []byte("\n"))
	canon, err := jcs.Transform(body)
	if err != nil {
		return nil, &ParseError{"", "invalid JSON: " + err.Error()}
	}
	if !bytes.Equal(canon, body) {
		return nil, &ParseError{"", "not in canonical form (RFC 8785); run `polc canon`"}
	}
	var s Snapshot
	if err := decodeStrict(body, &s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	computed, err := digestOfCanonical(body)
	if err != nil {
		return nil, &ParseError{"", err.Error()}
	}
	if computed != s.Digest {
		return nil, &DigestMismatchError{Declared: s.Digest, Computed: computed}
	}
	return &s, nil
}
