package pgstore_test

import (
	"context"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/chain/storetest"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/pgtest"
	"polc.dev/polc/pgstore"
)

// TestProjectorEndToEnd: executor.EvidenceProjector moves evidence from
// the PostgreSQL evidence store (source and chains) into the PostgreSQL
// state store: operations appear with their terminal status, and a second
// drain after more appends applies only those.
func TestProjectorEndToEnd(t *testing.T) {
	dsn := pgtest.Schema(t)
	ev := openEvidenceAt(t, dsn, pgstore.EvidenceOptions{})
	st, err := pgstore.OpenState(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	ids := storetest.NewIDs("00000011")
	c := ids.Next()
	w := &chain.Writer{Store: ev, ChainID: c}
	operation := func() string {
		op := ids.Next()
		for _, p := range []chain.Payload{
			storetest.Bound(),
			chain.OperationStartedPayload{AttemptID: ids.Next(), RequestDigest: chain.Hash{1}.String(), ToolID: "t"},
			chain.CallableCompletedPayload{DurationUS: 5, ResultDigest: chain.Hash{2}.String()},
		} {
			if _, _, err := w.Append(ctx, storetest.Draft(ids, c, &op, p)); err != nil {
				t.Fatal(err)
			}
		}
		return op
	}
	p := &executor.EvidenceProjector{Name: "ops", Version: 1, Source: ev, Chains: ev, Store: st, PageSize: 2}
	first := operation()
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	second := operation()
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{first, second} {
		o, ok, err := st.Operation(ctx, op)
		if err != nil || !ok || o.Status != "succeeded" || o.ChainID != c {
			t.Fatalf("operation %s: %+v %v %v", op, o, ok, err)
		}
	}
	if cur, err := st.ProjectionCursor(ctx, "ops"); err != nil || cur == "" {
		t.Fatalf("cursor %q %v", cur, err)
	}
}
