package evidencegen

import (
	"bufio"
	"io"
	"time"

	"polc.dev/polc/chain"
)

// WriteLargeChain streams a valid closed chain of at least minBytes to w:
// the standard scenario's operations repeated, then task_closed. It returns
// the head (the task_closed record's chain_hash) and the number of records.
// Memory stays constant: records are sealed and written one at a time.
func WriteLargeChain(w io.Writer, minBytes int64, seed string) (chain.Hash, int64, error) {
	ids := NewIDs(seed)
	snap, _ := Snapshot("bench", "1.0.0", NewIDs("bench snapshot"))
	clock := &Clock{T: Epoch, Step: 700 * time.Microsecond}
	chainID, boundary := ids.Next(), ids.Next()
	opened := clock.Now()
	bw := bufio.NewWriterSize(w, 1<<20)
	var prev *chain.Hash
	var seq, written, ops int64
	var buf []byte
	emit := func(op string, p chain.Payload) error {
		d := chain.Draft{RecordID: ids.Next(), ChainID: chainID, PolicyID: snap.PolicyID, PolicyVersion: snap.Version, Payload: p, CreatedAt: clock.Now()}
		if op != "" {
			d.OperationID = &op
		}
		r, err := chain.Seal(d, seq, prev)
		if err != nil {
			return err
		}
		h := r.Hash()
		prev = &h
		seq++
		buf = append(r.AppendCanonical(buf[:0]), '\n')
		written += int64(len(buf))
		_, err = bw.Write(buf)
		return err
	}
	actor := "user:alice"
	approver := "security"
	gateSoft := "gate-soft"
	for written < minBytes {
		op := ids.Next()
		steps := []chain.Payload{
			chain.PolicyBoundPayload{EffectBackendID: "inprocess/v1", EffectCapabilityDigest: Digest("caps"), PolicyDigest: snap.Digest, TaskBoundaryID: boundary},
			chain.OperationStartedPayload{Actor: &actor, AttemptID: ids.Next(), RequestDigest: Digest(op), ToolID: "read_file"},
			chain.GateEvaluatedPayload{ArgumentsDigest: Digest("a" + op), Decision: "allow", GateID: "gate-hard", Level: "hard", ReasonCode: "policy.allow", ResultID: ids.Next(), RuleIDs: []string{"r-1", "r-2"}},
			chain.GateEvaluatedPayload{ArgumentsDigest: Digest("a" + op), Decision: "allow", GateID: gateSoft, Level: "soft", ReasonCode: "policy.allow", ResultID: ids.Next(), RuleIDs: []string{"r-3"}},
		}
		switch ops % 3 {
		case 0:
			steps = append(steps, chain.CallableCompletedPayload{DurationUS: 1234, ResultDigest: Digest("r" + op)})
		case 1:
			steps = append(steps, chain.CallableFailedPayload{DurationUS: 99, ErrorClass: "ValueError"})
		default:
			steps[3] = chain.GateEvaluatedPayload{ArgumentsDigest: Digest("a" + op), Decision: "deny", GateID: gateSoft, Level: "soft", ReasonCode: "approval_required", ResultID: ids.Next(), RuleIDs: []string{"r-3"}}
			steps = append(steps, chain.OperationDeniedPayload{ApproverClass: &approver, Disposition: "escalate", GateID: &gateSoft, ReasonCode: "approval_required"})
		}
		for _, p := range steps {
			if err := emit(op, p); err != nil {
				return chain.Hash{}, 0, err
			}
		}
		ops++
	}
	err := emit("", chain.TaskClosedPayload{ClosedAt: chain.FormatTime(clock.T), OpenedAt: chain.FormatTime(opened), OperationCount: ops, TaskBoundaryID: boundary})
	if err != nil {
		return chain.Hash{}, 0, err
	}
	return *prev, seq, bw.Flush()
}
