// Package evidencegen is a deterministic fake evidence producer and
// certifier for tests and fixtures: fixed keys, counter-derived UUIDs and a
// stepping clock, so the same calls always produce the same bytes. It plays
// the role of sigstore-go's VirtualSigstore for polc evidence.
package evidencegen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/chain"
	"polc.dev/polc/snapshot"
)

// IDs derives UUIDs from a seed and a counter: version 4 layout, lowercase.
type IDs struct {
	seed string
	n    uint64
}

// NewIDs returns an ID source for seed.
func NewIDs(seed string) *IDs { return &IDs{seed: seed} }

// Next returns the next UUID.
func (g *IDs) Next() string {
	g.n++
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], g.n)
	sum := sha256.Sum256(append([]byte(g.seed+"\x00"), b[:]...))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Clock is a deterministic clock advancing by Step on every call.
type Clock struct {
	T    time.Time
	Step time.Duration
}

// Now returns the current time and advances the clock.
func (c *Clock) Now() time.Time {
	t := c.T
	c.T = c.T.Add(c.Step)
	return t
}

// Epoch is the start of every generated clock.
var Epoch = time.Date(2026, 3, 1, 9, 0, 0, 123456000, time.UTC)

// Key is a deterministic signed-note key pair.
type Key struct {
	Name   string
	Signer note.Signer
	VKey   string
	SKey   string
}

// NewKey derives a key pair for name from a seed string (never use outside
// tests: the private key is a hash of public data).
func NewKey(name, seed string) *Key {
	s := sha256.Sum256([]byte("polc evidencegen key\x00" + seed))
	skey, vkey, err := note.GenerateKey(bytes.NewReader(s[:]), name)
	if err != nil {
		panic(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		panic(err)
	}
	return &Key{Name: name, Signer: signer, VKey: vkey, SKey: skey}
}

// Snapshot returns a minimal valid policy snapshot for fixtures.
func Snapshot(name, version string, ids *IDs) (*snapshot.Snapshot, []byte) {
	s := &snapshot.Snapshot{
		Format: snapshot.Format, PolicyID: ids.Next(), Name: name, Version: version,
		Description: "evidence fixture policy", PrincipalScope: []string{}, TenantScope: []string{},
		CompiledRules: snapshot.Rules{}, GateBindings: []snapshot.GateBinding{}, Lineage: []snapshot.Ancestor{},
		Expansions: []snapshot.Expansion{}, Provenance: snapshot.Provenance{Compiler: snapshot.CompilerContract},
		ReleaseState: snapshot.Staged,
	}
	if err := s.Seal(); err != nil {
		panic(err)
	}
	b, err := s.Marshal()
	if err != nil {
		panic(err)
	}
	if _, err := snapshot.Parse(b); err != nil {
		panic(err)
	}
	return s, b
}

// Producer writes one task boundary's chain into a MemStore, the way the
// executor does: policy_bound and operation_started, gate results, one
// terminal per operation, task_closed.
type Producer struct {
	Store      *chain.MemStore
	W          *chain.Writer
	IDs        *IDs
	Clock      *Clock
	Snapshot   *snapshot.Snapshot
	Boundary   string
	OpenedAt   time.Time
	Operations int64
	last       *chain.Record
}

// NewProducer starts a chain for a policy snapshot.
func NewProducer(seed string, snap *snapshot.Snapshot) *Producer {
	ids := NewIDs(seed)
	clock := &Clock{T: Epoch, Step: 1500 * time.Microsecond}
	p := &Producer{Store: chain.NewMemStore(), IDs: ids, Clock: clock, Snapshot: snap}
	p.W = &chain.Writer{Store: p.Store, ChainID: ids.Next()}
	p.Boundary = ids.Next()
	p.OpenedAt = clock.Now()
	return p
}

// ChainID returns the chain's id.
func (p *Producer) ChainID() string { return p.W.ChainID }

// Digest returns a deterministic digest of a label.
func Digest(label string) string {
	s := sha256.Sum256([]byte(label))
	return hex.EncodeToString(s[:])
}

// Append appends a record with the given payload for operation op ("" for
// none) and returns it.
func (p *Producer) Append(op string, payload chain.Payload) *chain.Record {
	return p.AppendDraft(p.Draft(op, payload))
}

// Draft returns the draft Append would use.
func (p *Producer) Draft(op string, payload chain.Payload) chain.Draft {
	d := chain.Draft{
		RecordID: p.IDs.Next(), PolicyID: p.Snapshot.PolicyID, PolicyVersion: p.Snapshot.Version,
		Payload: payload, CreatedAt: p.Clock.Now(),
	}
	if op != "" {
		d.OperationID = &op
	}
	return d
}

// AppendDraft appends a draft; it panics on failure (fixtures are valid).
func (p *Producer) AppendDraft(d chain.Draft) *chain.Record {
	r, _, err := p.W.Append(context.Background(), d)
	if err != nil {
		panic(fmt.Sprintf("evidencegen: append: %v", err))
	}
	p.last = r
	return r
}

// Gate is one gate result of an operation.
type Gate struct {
	ID, Level, Decision string
}

// Op describes one operation: its gate results (with an exception granted
// for ExceptionGate before they run, if set) and its terminal payload.
type Op struct {
	Tool          string
	ExceptionGate string
	Gates         []Gate
	Terminal      chain.Payload
}

// Start appends policy_bound and operation_started and returns the new
// operation id.
func (p *Producer) Start(tool string) string {
	op := p.IDs.Next()
	p.Append(op, chain.PolicyBoundPayload{
		EffectBackendID: "inprocess/v1", EffectCapabilityDigest: Digest("caps"),
		PolicyDigest: p.Snapshot.Digest, TaskBoundaryID: p.Boundary,
	})
	actor := "user:alice"
	p.Append(op, chain.OperationStartedPayload{
		Actor: &actor, AttemptID: p.IDs.Next(), RequestDigest: Digest("request " + op), ToolID: tool,
	})
	p.Operations++
	return op
}

// Gate appends a gate_evaluated record.
func (p *Producer) Gate(op string, g Gate) *chain.Record {
	return p.Append(op, chain.GateEvaluatedPayload{
		ArgumentsDigest: Digest("args " + op), Decision: g.Decision, GateID: g.ID, Level: g.Level,
		ReasonCode: "policy." + g.Decision, ResultID: p.IDs.Next(), RuleIDs: []string{"rule-" + g.ID},
	})
}

// Exception appends an exception_granted record for gate.
func (p *Producer) Exception(op, gate string) *chain.Record {
	now := p.Clock.T
	return p.Append(op, chain.ExceptionGrantedPayload{
		Actor: "user:security-officer", ExpiresAt: chain.FormatTime(now.Add(time.Hour)), GateID: gate,
		GrantID: p.IDs.Next(), IssuedAt: chain.FormatTime(now), ReasonCode: "exception.break_glass",
	})
}

// Run appends a whole operation.
func (p *Producer) Run(o Op) string {
	op := p.Start(o.Tool)
	if o.ExceptionGate != "" {
		p.Exception(op, o.ExceptionGate)
	}
	for _, g := range o.Gates {
		p.Gate(op, g)
	}
	if o.Terminal != nil {
		p.Append(op, o.Terminal)
	}
	return op
}

// Close appends task_closed and returns it.
func (p *Producer) Close() *chain.Record {
	return p.Append("", chain.TaskClosedPayload{
		ClosedAt: chain.FormatTime(p.Clock.T), OpenedAt: chain.FormatTime(p.OpenedAt),
		OperationCount: p.Operations, TaskBoundaryID: p.Boundary,
	})
}

// Last returns the last appended record.
func (p *Producer) Last() *chain.Record { return p.last }

// JSONL returns the chain file.
func (p *Producer) JSONL() []byte { return p.Store.Export(p.ChainID()) }

// Records returns the chain's records.
func (p *Producer) Records() []*chain.Record {
	rs, err := p.Store.Read(context.Background(), p.ChainID(), -1)
	if err != nil {
		panic(err)
	}
	return rs
}

// Standard appends the standard scenario: five operations covering every
// level and decision, every terminal type but cancelled/timed-out, an
// escalation and (when degraded) an exception. It returns the operation ids.
func (p *Producer) Standard(degraded bool) []string {
	approver := "security"
	soft := "gate-soft"
	ops := []string{
		p.Run(Op{Tool: "read_file", Gates: []Gate{{"gate-hard", "hard", "allow"}, {soft, "soft", "allow"}},
			Terminal: chain.CallableCompletedPayload{DurationUS: 1200, ResultDigest: Digest("result a")}}),
		p.Run(Op{Tool: "bash", Gates: []Gate{{"gate-hard", "hard", "deny"}},
			Terminal: chain.OperationDeniedPayload{Disposition: "deny", GateID: strPtr("gate-hard"), ReasonCode: "policy.deny"}}),
		p.Run(Op{Tool: "http_get", Gates: []Gate{{"gate-advisory", "advisory", "deny"}, {"gate-hard", "hard", "allow"}},
			Terminal: chain.CallableFailedPayload{DurationUS: 800, ErrorClass: "TimeoutError"}}),
		p.Run(Op{Tool: "write_file", Gates: []Gate{{soft, "soft", "deny"}},
			Terminal: chain.OperationDeniedPayload{ApproverClass: &approver, Disposition: "escalate", GateID: &soft, ReasonCode: "approval_required"}}),
		p.Run(Op{Tool: "mcp", Gates: []Gate{{"gate-hard", "hard", "allow"}},
			Terminal: chain.ExternalResultAmbiguousPayload{DurationUS: 30000000, ReasonCode: "connection_lost"}}),
	}
	if degraded {
		ops = append(ops, p.Run(Op{Tool: "write_file", ExceptionGate: soft, Gates: []Gate{{soft, "soft", "deny"}},
			Terminal: chain.CallableCompletedPayload{DurationUS: 500, ResultDigest: Digest("result f")}}))
	}
	return ops
}

func strPtr(s string) *string { return &s }
