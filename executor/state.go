package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"polc.dev/polc/internal/jcs"
)

// Profile is the strength of the guarantees behind an outcome; every
// outcome carries the profile it was produced under (docs/executor.md "Profiles").
type Profile string

// Runtime profiles.
const (
	// ProfileMinimal persists nothing.
	ProfileMinimal Profile = "minimal"
	// ProfileDurable commits each attempt, its outcome and its outbox
	// messages in one StateStore transaction.
	ProfileDurable Profile = "durable"
	// ProfileGoverned appends evidence (docs/evidence.md) for every operation to a
	// chain.Store against an exact policy snapshot.
	ProfileGoverned Profile = "governed"
	// ProfileCertifiable is governed inside an open task boundary, closed
	// once, after which a certificate is minted.
	ProfileCertifiable Profile = "certifiable"
)

// AttemptRecord is what the durable profile persists for one attempt
// (stage 14): the attempt, its normalized outcome and its outbox intents,
// committed together.
type AttemptRecord struct {
	// RunID is the durable scope's run id.
	RunID string
	// AttemptID identifies this attempt; it is never reused.
	AttemptID string
	// OwnerAttemptID is the enclosing attempt of the scope, if any.
	OwnerAttemptID *string
	RequestID      string
	// OperationID is set when the attempt reached operation_started.
	OperationID *string
	ActionID    string
	// RequestDigest is the sha256-v1 digest of the canonical request.
	RequestDigest string
	// Outcome is the outcome kind ("succeeded", "denied", …).
	Outcome string
	// ReasonCode is the stable reason of the outcome ("" for success).
	ReasonCode string
	// ResultDigest is the digest of a successful result, nil otherwise.
	ResultDigest *string
	// CallExecuted says whether the callable was reached.
	CallExecuted bool
	Profile      Profile
	StartedAt    time.Time
	FinishedAt   time.Time
	Outbox       []OutboxMessage
}

// OutboxMessage is an intent to deliver something after the commit
// (docs/statestore.md): delivered at least once by a separate relay.
type OutboxMessage struct {
	MessageID   string
	Topic       string
	PayloadJSON string
}

// Outbox collects the messages a durable attempt's callable wants
// delivered if, and only if, the attempt is committed: stage 14 commits
// them in the attempt's transaction, after the executor's action.outcome
// message, each with a new message id (the transactional outbox, for the
// caller's own events). A callable gets it with OutboxFromContext.
type Outbox struct {
	mu     sync.Mutex
	msgs   []OutboxMessage
	bytes  int
	closed bool
}

// Outbox bounds: what one attempt may add.
const (
	MaxOutboxMessages = 64
	MaxOutboxBytes    = 1 << 20 // payloads, in total
)

// Add queues a message for topic (non-empty) with payload encoded as
// canonical JSON. It fails once the callable has returned (a goroutine it
// left behind), when payload has no JSON form, or beyond MaxOutboxMessages
// or MaxOutboxBytes. Messages are committed whatever the outcome: a
// callable adds only what it means to announce.
func (o *Outbox) Add(topic string, payload any) error {
	if topic == "" {
		return errors.New("outbox: empty topic")
	}
	b, err := jcs.Marshal(payload)
	if err != nil {
		return fmt.Errorf("outbox: payload: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.closed:
		return errors.New("outbox: the callable has returned; its attempt's messages are fixed")
	case len(o.msgs) >= MaxOutboxMessages:
		return fmt.Errorf("outbox: more than %d messages", MaxOutboxMessages)
	case o.bytes+len(b) > MaxOutboxBytes:
		return fmt.Errorf("outbox: more than %d bytes of payload", MaxOutboxBytes)
	}
	o.msgs = append(o.msgs, OutboxMessage{Topic: topic, PayloadJSON: string(b)})
	o.bytes += len(b)
	return nil
}

// take closes the outbox and returns its messages (none for a nil one).
func (o *Outbox) take() []OutboxMessage {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	return o.msgs
}

type outboxKey struct{}

// OutboxFromContext returns the Outbox of the durable attempt whose
// callable ctx was given to, and false in any other profile (nothing would
// commit the messages).
func OutboxFromContext(ctx context.Context) (*Outbox, bool) {
	o, ok := ctx.Value(outboxKey{}).(*Outbox)
	return o, ok
}

// StateStore is the durable profile's store. Implementations commit
// CommitAttempt atomically: the run row (created if new), the attempt and
// outcome row and every outbox message, or nothing.
type StateStore interface {
	// CommitAttempt persists a finished attempt. A second commit of the
	// same AttemptID is a *StateConflictError, never an overwrite.
	CommitAttempt(ctx context.Context, a AttemptRecord) error
}

// StateConflictError is a write that would overwrite committed state.
type StateConflictError struct {
	Key    string
	Reason string
}

func (e *StateConflictError) Error() string {
	return fmt.Sprintf("state conflict on %s: %s", e.Key, e.Reason)
}

// ProjectedRecord is one evidence record as the projector applies it.
type ProjectedRecord struct {
	ChainID     string
	RecordID    string
	Sequence    int64
	RecordType  string
	OperationID *string
	ChainHash   string
	// PayloadJSON is the record's canonical payload, for projections that
	// derive attempt state (operation_started → running, terminal →
	// outcome).
	PayloadJSON string
}

// ProjectionStore is where an EvidenceProjector applies evidence.
type ProjectionStore interface {
	// ApplyProjection applies records under projection version with the
	// idempotency key (chain_id, record_id, version) and sets the
	// projector's cursor to next, in one transaction. A record already
	// applied with the same chain_hash is a no-op; one applied (under any
	// version) with a different one is a *ProjectionConflictError and
	// nothing is applied. A projector name is bound to one version: another
	// version under a name with a cursor is a *StateConflictError.
	ApplyProjection(ctx context.Context, projector string, version int, records []ProjectedRecord, next string) error
	// ProjectionCursor returns the projector's committed cursor ("" when
	// it has applied nothing).
	ProjectionCursor(ctx context.Context, projector string) (string, error)
}

// ProjectionConflictError is a replayed record whose digest differs from
// the one already projected: fail closed and get an operator's attention.
type ProjectionConflictError struct {
	ChainID, RecordID string
	Projected, Got    string
}

func (e *ProjectionConflictError) Error() string {
	return fmt.Sprintf("projection conflict: record %s of chain %s was projected with chain_hash %s, replay has %s", e.RecordID, e.ChainID, e.Projected, e.Got)
}
