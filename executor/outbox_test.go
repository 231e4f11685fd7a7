package executor_test

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// TestCallableOutbox: a durable attempt's callable adds its own messages
// to the attempt's Outbox; stage 14 commits them in the attempt's
// transaction after the executor's action.outcome message. Nothing else
// gets an outbox (nothing would commit it), payloads must have a JSON
// form, and a goroutine the callable left behind cannot add once it has
// returned.
func TestCallableOutbox(t *testing.T) {
	snap := compilePolicy(t, `package p
policies: p: {version: "1", principals: ["agent:a"], tenants: ["acme"], actions: allow: ["announce"]}
`)
	late := make(chan error, 1)
	returned := make(chan struct{}) // closed once Execute has returned
	var got struct {
		ok      bool
		badJSON error
	}
	reg := executor.NewRegistry()
	if err := reg.Register(normalize.ActionDescriptor{ID: "announce", Version: "1",
		Arguments: []byte(`{"type":"object"}`)}, func(ctx context.Context, _ map[string]any) (any, error) {
		ob, ok := executor.OutboxFromContext(ctx)
		got.ok = ok
		if !ok {
			return "no outbox", nil
		}
		got.badJSON = ob.Add("x", math.NaN())
		if err := ob.Add("invoice.created", map[string]any{"id": 7, "total": "9.50"}); err != nil {
			return nil, err
		}
		if err := ob.Add("mail.queued", []string{"a@example.com"}); err != nil {
			return nil, err
		}
		go func() { <-returned; late <- ob.Add("late", 1) }()
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	st, err := statestore.OpenSQLite(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}, State: st})
	if err != nil {
		t.Fatal(err)
	}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.DurableRunScope{RunID: "run-1"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "acme", Workspace: "/ws", Policy: executor.SnapshotRefOf(snap), Backend: executor.InProcessBackendName, Profile: executor.ProfileDurable}
	out := e.Execute(context.Background(), executor.ExecutionRequest{RequestID: "r1", Action: "announce", Arguments: map[string]any{}, Scope: ec.Scope}, ec)
	close(returned)
	if out.Kind() != executor.KindSucceeded || out.Base().StateError != nil {
		t.Fatalf("%s %s %v", out.Kind(), out.Base().ReasonCode, out.Base().StateError)
	}
	if !got.ok || got.badJSON == nil {
		t.Fatalf("outbox given %v; a NaN payload added: %v", got.ok, got.badJSON)
	}
	if err := <-late; err == nil || !strings.Contains(err.Error(), "returned") {
		t.Errorf("an Add after the callable returned: %v", err)
	}
	msgs, err := st.Outbox(context.Background(), "run-1")
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, m := range msgs {
		topics = append(topics, m.Topic+" "+m.PayloadJSON)
		if m.AttemptID != out.Base().AttemptID || m.MessageID == "" {
			t.Errorf("message %+v: attempt %s", m, out.Base().AttemptID)
		}
	}
	want := []string{`invoice.created {"id":7,"total":"9.50"}`, `mail.queued ["a@example.com"]`}
	if len(topics) != 3 || !strings.HasPrefix(topics[0], "action.outcome ") || strings.Join(topics[1:], "|") != strings.Join(want, "|") {
		t.Errorf("committed outbox %q, want action.outcome then %q", topics, want)
	}

	ec.Profile, ec.Scope = executor.ProfileMinimal, executor.EphemeralScope{ID: "s"}
	if out := e.Execute(context.Background(), executor.ExecutionRequest{RequestID: "r2", Action: "announce", Arguments: map[string]any{}, Scope: ec.Scope}, ec); out.Kind() != executor.KindSucceeded || got.ok {
		t.Errorf("minimal: %s, outbox given %v", out.Kind(), got.ok)
	}
}
