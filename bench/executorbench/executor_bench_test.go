package executorbench_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/cputime"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// rig is an executor over testdata/snapshot.json with one action,
// "nothing", whose callable does nothing, on the real clock and ids.
type rig struct {
	exec *executor.Executor
	snap *snapshot.Snapshot
}

func newRig(b *testing.B, store chain.Store) *rig {
	data, err := os.ReadFile("testdata/snapshot.json")
	if err != nil {
		b.Fatal(err)
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		b.Fatal(err)
	}
	reg := executor.NewRegistry()
	// The executor tests' argument schema, so that the same checks run.
	obj := `{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`
	if err := reg.Register(normalize.ActionDescriptor{ID: "nothing", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"}, Arguments: []byte(obj)},
		func(context.Context, map[string]any) (any, error) { return nil, nil }); err != nil {
		b.Fatal(err)
	}
	e, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}, Evidence: store, IDs: executor.NewUUID, Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	return &rig{exec: e, snap: snap}
}

func (r *rig) ref() executor.SnapshotRef {
	return executor.SnapshotRef{PolicyID: r.snap.PolicyID, Version: r.snap.Version, Digest: r.snap.Digest}
}

func (r *rig) ctx(profile executor.Profile, bd *executor.TaskBoundary) executor.ExecutionContext {
	return executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "acme", Workspace: "/ws", Policy: r.ref(), Backend: "inprocess", Profile: profile, Boundary: bd}
}

func req(id string, args map[string]any) executor.ExecutionRequest {
	return executor.ExecutionRequest{RequestID: id, Action: "nothing", Arguments: args, Scope: executor.EphemeralScope{ID: "s"}}
}

// governedFileRig is an executor on a fresh file store and a governed
// context on an open boundary.
func governedFileRig(b *testing.B) (*rig, executor.ExecutionContext, *chain.FileStore) {
	store, err := chain.OpenFileStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	r := newRig(b, store)
	bd, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := store.Head(context.Background(), bd.ChainID()); err != nil {
		b.Fatal(err)
	}
	return r, r.ctx(executor.ProfileGoverned, bd), store
}

// BenchmarkExecute measures Execute's overhead around a callable that does
// nothing: the minimal profile (no persistence) and the governed profile
// with the file store (every record fsynced, group commit), one caller.
func BenchmarkExecute(b *testing.B) {
	// direct is the floor: the same callable without Execute.
	b.Run("direct", func(b *testing.B) {
		fn := func(context.Context, map[string]any) (any, error) { return nil, nil }
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fn(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("minimal", func(b *testing.B) {
		r := newRig(b, nil)
		ec := r.ctx(executor.ProfileMinimal, nil)
		q := req("r", nil)
		b.ReportAllocs()
		for b.Loop() {
			if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
				b.Fatal(out.Kind(), out.Base().ReasonCode)
			}
		}
	})
	b.Run("governed-file", func(b *testing.B) {
		r, ec, _ := governedFileRig(b)
		q := req("r", nil)
		b.ReportAllocs()
		for b.Loop() {
			if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
				b.Fatal(out.Kind(), out.Base().EvidenceError)
			}
		}
	})
}

// BenchmarkArgumentsExecute is BenchmarkExecute/minimal with an argument
// object, which the minimal benchmark's nil arguments never clone,
// validate or digest.
func BenchmarkArgumentsExecute(b *testing.B) {
	r := newRig(b, nil)
	ec := r.ctx(executor.ProfileMinimal, nil)
	q := req("r", map[string]any{"text": "hello, world"})
	b.ReportAllocs()
	for b.Loop() {
		if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
			b.Fatal(out.Kind(), out.Base().ReasonCode)
		}
	}
}

// BenchmarkGovernedThroughput runs governed operations from 64 concurrent
// callers into one chain in the file store (durable fsync, group commit)
// and reports operations per second.
func BenchmarkGovernedThroughput(b *testing.B) {
	r, ec, store := governedFileRig(b)
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	start := time.Now()
	cpu0, _ := cputime.Process()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			q := req(fmt.Sprint(n.Add(1)), nil)
			if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
				b.Error(out.Kind(), out.Base().EvidenceError)
				return
			}
		}
	})
	el := time.Since(start)
	cpu1, _ := cputime.Process()
	cpu := cpu1 - cpu0
	b.ReportMetric(float64(n.Load())/el.Seconds(), "ops/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n.Load()), "cpu-µs/op")
	b.ReportMetric(cpu.Seconds()/el.Seconds(), "cores")
	st := store.Stats()
	b.ReportMetric(st.RecordsPerGroup(), "records/fsync")
	b.ReportMetric(float64(st.MeanSync().Microseconds()), "µs/fsync")
	b.ReportMetric(float64(st.Records)/float64(n.Load()), "records/op")
	b.ReportMetric(float64(st.Bytes)/float64(n.Load()), "bytes/op")
}

// TestIntegratorShaped keeps this package's test binary shaped like a
// runtime's: no compiler, no CUE, no OPA (they would make the benchmarks
// measure the collector's cost of a heap no runtime has).
func TestIntegratorShaped(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "-test", "polc.dev/polc/bench/executorbench").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "cuelang.org/") || strings.HasPrefix(pkg, "github.com/open-policy-agent/") || pkg == "polc.dev/polc/compiler" {
			t.Errorf("the benchmarks' binary links %s", pkg)
		}
	}
}
