package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
)

// TaskBoundary is an open task: one evidence chain, one policy pin. In the
// governed profile every operation appends to its chain; closing it appends
// task_closed exactly once and, when certifiable, mints a certificate.
// Only Executor.OpenBoundary makes one: a boundary built any other way, or
// opened by another executor, is refused (boundary_foreign).
type TaskBoundary struct {
	// The boundary's identity is fixed when it opens: records, the
	// certificate and the checks of every operation depend on it.
	id          string
	chainID     string
	policy      SnapshotRef
	openedAt    time.Time
	certifiable bool

	writer *chain.Writer
	owner  *Executor // the executor that opened it; no other may use it
	// ops holds a read lock for the whole of each governed operation, so
	// that Close waits for in-flight operations and nothing is appended
	// after task_closed.
	ops      sync.RWMutex
	mu       sync.Mutex
	closed   bool
	closedAt time.Time // set with closed
	started  int64
	grants   []*grant
}

// ID is the task boundary's id (task_boundary_id in its records).
func (b *TaskBoundary) ID() string { return b.id }

// ChainID is the id of the boundary's evidence chain.
func (b *TaskBoundary) ChainID() string { return b.chainID }

// Policy is the snapshot the boundary pins.
func (b *TaskBoundary) Policy() SnapshotRef { return b.policy }

// OpenedAt is when the boundary opened.
func (b *TaskBoundary) OpenedAt() time.Time { return b.openedAt }

// ClosedAt is when the boundary closed (its task_closed record's
// closed_at), and false while it is open: with the chain head, what
// certificate.Issuer needs to mint again after a refused mint.
func (b *TaskBoundary) ClosedAt() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closedAt, b.closed
}

// Certifiable reports whether closing the boundary mints a certificate.
func (b *TaskBoundary) Certifiable() bool { return b.certifiable }

type grant struct {
	ExceptionGrant
	used bool
}

// ExceptionGrant is a prevalidated, single-use exception to a soft gate
// for one tool, valid in [IssuedAt, ExpiresAt). When a soft gate would
// deny, a matching unused grant is recorded (exception_granted) and lifts
// the denial; the task's certificate is then permanently DEGRADED.
type ExceptionGrant struct {
	GrantID    string
	GateID     string
	ToolID     string // the action id, or "*"
	Actor      string // "kind:id" of who granted it
	ReasonCode string
	IssuedAt   time.Time
	ExpiresAt  time.Time
}

// ErrBoundaryClosed is returned when closing a closed boundary, and denies
// operations on it.
var ErrBoundaryClosed = errors.New("task boundary already closed")

// Grant registers an exception for the boundary. It fails when the grant
// has no id, gate, tool or actor, or does not expire after it is issued.
func (b *TaskBoundary) Grant(g ExceptionGrant) error {
	if g.GrantID == "" || g.GateID == "" || g.ToolID == "" || g.Actor == "" || g.ReasonCode == "" || !g.ExpiresAt.After(g.IssuedAt) {
		return fmt.Errorf("exception grant needs an id, gate, tool, actor, reason and expires_at after issued_at")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grants = append(b.grants, &grant{ExceptionGrant: g})
	return nil
}

// takeGrants consumes one matching unexpired grant for tool at each of
// gates, all or none: it returns nil, and consumes nothing, when a gate
// has no grant left (a partial set would be spent on a denied operation).
func (b *TaskBoundary) takeGrants(gates []string, tool string, now time.Time) []ExceptionGrant {
	if len(gates) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	picked := make([]*grant, 0, len(gates))
	for _, gate := range gates {
		var found *grant
		for _, g := range b.grants {
			if !g.used && g.GateID == gate && (g.ToolID == tool || g.ToolID == "*") && !now.Before(g.IssuedAt) && now.Before(g.ExpiresAt) &&
				!slices.Contains(picked, g) {
				found = g
				break
			}
		}
		if found == nil {
			return nil
		}
		picked = append(picked, found)
	}
	out := make([]ExceptionGrant, len(picked))
	for i, g := range picked {
		g.used = true
		out[i] = g.ExceptionGrant
	}
	return out
}

// OpenBoundary starts a task boundary pinned to policy. Precondition: the
// executor has an evidence store and the snapshot.
func (e *Executor) OpenBoundary(policy SnapshotRef, certifiable bool) (*TaskBoundary, error) {
	if e.cfg.Evidence == nil {
		return nil, errors.New("open boundary: no evidence store configured")
	}
	if _, err := e.policy(policy); err != nil {
		return nil, err
	}
	b := &TaskBoundary{id: e.cfg.IDs(), chainID: e.cfg.IDs(), policy: policy, openedAt: e.now(), certifiable: certifiable}
	b.writer = &chain.Writer{Store: e.cfg.Evidence, ChainID: b.chainID}
	b.owner = e
	return b, nil
}

// CloseResult is what closing a boundary produced.
type CloseResult struct {
	// Head is the chain_hash of the task_closed record.
	Head chain.Hash
	// Records is the number of records in the chain.
	Records int64
	// Certificate is set for certifiable boundaries.
	Certificate *certificate.Certificate
}

// CloseBoundary waits for in-flight operations, appends task_closed once
// and, for a certifiable boundary, mints the certificate at that head. A
// second close is ErrBoundaryClosed. A close whose task_closed could not
// be appended at all (a cancelled ctx, a store refusing it) leaves the
// boundary open, to be closed again (nil result); one appended but not
// made durable leaves it closed (nil result). b must have been opened by e.
//
// Once task_closed is durable the boundary is closed for good, and the
// result (head, record count) is returned even with an error: a refused
// mint is a *certificate.RefusedError beside the result (mint again with
// certificate.Issuer, the head and ClosedAt), and a store that could not
// release the chain (chain.Releaser) gives its error. The mint does not
// observe ctx's cancellation: the chain is closed either way, and a
// cancelled context would refuse the only certificate it can have.
// Closing releases the chain when the store can (chain.Releaser), so its
// file ends with task_closed and can be handed to an auditor as it is.
func (e *Executor) CloseBoundary(ctx context.Context, b *TaskBoundary) (*CloseResult, error) {
	if b == nil || b.owner != e {
		return nil, errors.New("close boundary: the task boundary was not opened by this executor")
	}
	b.ops.Lock()
	defer b.ops.Unlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrBoundaryClosed
	}
	closedAt := e.now()
	b.closed, b.closedAt = true, closedAt
	started := b.started
	b.mu.Unlock()
	_, rc, wait, err := b.writer.AppendAsync(ctx, chain.Draft{
		RecordID: e.cfg.IDs(), PolicyID: b.policy.PolicyID, PolicyVersion: b.policy.Version, CreatedAt: closedAt,
		Payload: chain.TaskClosedPayload{TaskBoundaryID: b.id, OpenedAt: chain.FormatTime(b.openedAt), ClosedAt: chain.FormatTime(closedAt), OperationCount: started},
	})
	if err != nil {
		// task_closed is not in the chain (a cancelled context, a store
		// that refused it): the task is still open, and a later close may
		// succeed. (ops is still held: no operation ran meanwhile.)
		b.mu.Lock()
		b.closed, b.closedAt = false, time.Time{}
		b.mu.Unlock()
		return nil, &GovernanceEvidenceError{RecordType: string(chain.TaskClosed), Err: err}
	}
	if err := wait(); err != nil {
		// Linked but not known durable: a second task_closed could follow
		// it in the chain, so the boundary stays closed.
		return nil, &GovernanceEvidenceError{RecordType: string(chain.TaskClosed), Err: err}
	}
	res := &CloseResult{Head: rc.HeadHash, Records: rc.Sequence + 1}
	var mintErr error
	if b.certifiable {
		iss := certificate.Issuer{Store: e.cfg.Evidence, Snapshots: snapshotSource{e}, Now: e.now, NewID: e.cfg.IDs}
		res.Certificate, mintErr = iss.Mint(context.WithoutCancel(ctx), certificate.Boundary{
			TaskBoundaryID: b.id, ChainID: b.chainID, PolicyID: b.policy.PolicyID, PolicyVersion: b.policy.Version,
			OpenedAt: b.openedAt, ClosedAt: closedAt,
		}, rc.HeadHash)
	}
	var relErr error
	if r, ok := e.cfg.Evidence.(chain.Releaser); ok {
		// After the mint, which verifies the chain through the store.
		if err := r.Release(b.chainID); err != nil {
			relErr = fmt.Errorf("close boundary: release chain %s: %w", b.chainID, err)
		}
	}
	return res, errors.Join(mintErr, relErr)
}

// snapshotSource serves the executor's snapshots to the certificate issuer.
type snapshotSource struct{ e *Executor }

func (s snapshotSource) Snapshot(_ context.Context, policyID, version string) ([]byte, error) {
	for _, snap := range s.e.cfg.Policies {
		if snap.PolicyID == policyID && snap.Version == version {
			return snap.Marshal()
		}
	}
	return nil, fmt.Errorf("%w: %s@%s", certificate.ErrSnapshotNotFound, policyID, version)
}
