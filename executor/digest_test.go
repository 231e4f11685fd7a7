package executor

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"polc.dev/polc/internal/digest"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/normalize"
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
		// Digest encodes the form without jcs.Append's interface: the
		// same bytes, so the same digest as the reference's.
		if d, ref := r.Digest(), digest.Of(json.RawMessage(want)); d != ref {
			t.Errorf("%d: Digest %s, the reference encoding digests to %s", i, d, ref)
		}
	}
	bad := ExecutionRequest{RequestID: "\xff"}
	if _, err := jcs.Marshal(bad.digestForm()); err == nil {
		t.Error("invalid UTF-8 in a request id encoded without error")
	}
	if bad.Digest() != digest.Of(bad.digestForm()) {
		t.Error("Digest of an unencodable request differs from digestOf its form")
	}
}

// TestContextDigest checks that the context digest is stable and changes
// with every member (one mutation each), the boundary counting by id.
func TestContextDigest(t *testing.T) {
	owner := "00000000-0000-4000-8000-000000000001"
	base := func() ExecutionContext {
		return ExecutionContext{
			ContextID: "c", Scope: EphemeralScope{ID: "s"}, Principal: Principal{Kind: "agent", ID: "a"},
			Tenant: "t", Workspace: "/w", Policy: SnapshotRef{PolicyID: "p", Version: "1", Digest: "d"},
			Backend: "inprocess/v1", Profile: ProfileGoverned, Boundary: &TaskBoundary{id: "b"}, Usage: normalize.Usage{Calls: 1},
		}
	}
	b0 := base()
	want := b0.Digest()
	if again := base(); again.Digest() != want {
		t.Fatal("equal contexts digest differently")
	}
	other := base()
	other.Boundary = &TaskBoundary{id: "b", certifiable: true}
	if other.Digest() != want {
		t.Error("the boundary should count by id only")
	}
	mutations := map[string]func(*ExecutionContext){
		"context_id": func(c *ExecutionContext) { c.ContextID = "c2" },
		"scope":      func(c *ExecutionContext) { c.Scope = EphemeralScope{ID: "s2"} },
		"scope kind": func(c *ExecutionContext) { c.Scope = DurableRunScope{RunID: "s", OwnerAttemptID: &owner} },
		"no scope":   func(c *ExecutionContext) { c.Scope = nil },
		"principal":  func(c *ExecutionContext) { c.Principal.ID = "b" },
		"tenant":     func(c *ExecutionContext) { c.Tenant = "t2" },
		"workspace":  func(c *ExecutionContext) { c.Workspace = "/w2" },
		"policy id":  func(c *ExecutionContext) { c.Policy.PolicyID = "p2" },
		"version":    func(c *ExecutionContext) { c.Policy.Version = "2" },
		"digest":     func(c *ExecutionContext) { c.Policy.Digest = "e" },
		"backend":    func(c *ExecutionContext) { c.Backend = "other" },
		"profile":    func(c *ExecutionContext) { c.Profile = ProfileCertifiable },
		"boundary":   func(c *ExecutionContext) { c.Boundary = &TaskBoundary{id: "b2"} },
		"no bound":   func(c *ExecutionContext) { c.Boundary = nil },
		"usage":      func(c *ExecutionContext) { c.Usage.Tokens = 5 },
	}
	seen := map[string]string{want: "base"}
	for name, mutate := range mutations {
		c := base()
		mutate(&c)
		d := c.Digest()
		if prev, dup := seen[d]; dup {
			t.Errorf("mutation %q digests like %q", name, prev)
		}
		seen[d] = name
	}
}
