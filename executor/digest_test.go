package executor

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"polc.dev/polc/internal/jcs"
)

// requestDigestReference is the naive form of a request digest: the
// object built from maps and encoded by encoding/json, then canonicalized
// by jcs.Transform. requestDigestForm.AppendCanonical must equal it.
func requestDigestReference(r *ExecutionRequest) ([]byte, error) {
	var scope any
	switch s := r.Scope.(type) {
	case EphemeralScope:
		scope = map[string]any{"kind": s.ScopeKind(), "scope_id": s.ID}
	case DurableRunScope:
		scope = map[string]any{"kind": s.ScopeKind(), "run_id": s.RunID, "owner_attempt_id": s.OwnerAttemptID}
	}
	raw, err := json.Marshal(map[string]any{
		"request_id": r.RequestID, "action": r.Action, "arguments": r.Arguments,
		"principal_claim": r.PrincipalClaim, "scope": scope, "timeout_us": r.Timeout.Microseconds(),
		"idempotency_key": r.IdempotencyKey, "metadata": r.Metadata,
	})
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

func TestRequestDigestMatchesReference(t *testing.T) {
	claim, owner := "agent:x", "00000000-0000-4000-8000-000000000001"
	reqs := []ExecutionRequest{
		{},
		{RequestID: "r1", Action: "bash", Arguments: map[string]any{"command": "ls -la", "n": 1.5, "list": []any{"a", nil, true}},
			Scope: EphemeralScope{ID: "s"}, Timeout: 10 * time.Second},
		{RequestID: "é\u2028\"\\", Action: "mcp:srv/tool", PrincipalClaim: &claim, IdempotencyKey: "k",
			Metadata: map[string]any{"z": map[string]any{"b": 1.0, "a": "\x01"}, "€": "x", "\U0001F600": 2.0},
			Scope:    DurableRunScope{RunID: "run", OwnerAttemptID: &owner}},
		{RequestID: "r", Scope: DurableRunScope{RunID: "run"}, Timeout: time.Duration(math.MaxInt64)},
		{RequestID: "r", Scope: &EphemeralScope{ID: "pointer scopes digest as null"}, Timeout: -time.Microsecond},
		{RequestID: "r", Arguments: map[string]any{}, Metadata: map[string]any{"num": json.Number("1e3")}},
	}
	for i, r := range reqs {
		want, err := requestDigestReference(&r)
		if err != nil {
			t.Fatalf("%d: reference: %v", i, err)
		}
		got, err := jcs.Marshal(r.digestForm())
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if string(got) != string(want) {
			t.Errorf("%d:\n got %s\nwant %s", i, got, want)
		}
	}
	bad := ExecutionRequest{RequestID: "\xff"}
	if _, err := jcs.Marshal(bad.digestForm()); err == nil {
		t.Error("invalid UTF-8 in a request id encoded without error")
	}
}
