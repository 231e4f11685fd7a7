package zzbench

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/snapshot"
)

func BenchmarkMinimal(b *testing.B) {
	data, err := os.ReadFile("team.json")
	if err != nil {
		b.Fatal(err)
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		b.Fatal(err)
	}
	reg := executor.NewRegistry()
	obj := `{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`
	if err := reg.Register(executor.ActionDescriptor{ID: "nothing", Version: "1", Source: executor.Source{Kind: "sdk", Ref: "test"},
		Arguments: []byte(obj)}, func(ctx context.Context, args map[string]any) (any, error) { return nil, nil }); err != nil {
		b.Fatal(err)
	}
	ex, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}, IDs: executor.NewUUID, Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	ref := executor.SnapshotRef{PolicyID: snap.PolicyID, Version: snap.Version, Digest: snap.Digest}
	ec := executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "acme", Workspace: "/ws", Policy: ref, Backend: "inprocess", Profile: executor.ProfileMinimal}
	q := executor.ExecutionRequest{RequestID: "r", Action: "nothing", Scope: executor.EphemeralScope{ID: "s"}}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.Logf("live heap %d KB", ms.HeapAlloc>>10)
	b.ReportAllocs()
	for b.Loop() {
		if out := ex.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
			b.Fatal(out.Kind(), out.Base().ReasonCode)
		}
	}
}
