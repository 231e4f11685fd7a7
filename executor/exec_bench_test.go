package executor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/cputime"
)

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
		r := newRig(b, nil, func(c *executor.Config) { c.IDs = executor.NewUUID; c.Now = time.Now })
		ec := r.ctx(executor.ProfileMinimal, nil)
		q := req("r", "nothing", nil)
		b.ReportAllocs()
		for b.Loop() {
			if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
				b.Fatal(out.Kind())
			}
		}
	})
	b.Run("governed-file", func(b *testing.B) {
		r, ec, _ := governedFileRig(b)
		q := req("r", "nothing", nil)
		b.ReportAllocs()
		for b.Loop() {
			if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
				b.Fatal(out.Kind(), out.Base().EvidenceError)
			}
		}
	})
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
			q := req(fmt.Sprint(n.Add(1)), "nothing", nil)
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

// governedFileRig is an executor on a fresh file store (real clock and
// ids) and a governed context on an open boundary.
func governedFileRig(b *testing.B) (*rig, executor.ExecutionContext, *chain.FileStore) {
	store, err := chain.OpenFileStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	r := newRig(b, store, func(c *executor.Config) { c.IDs = executor.NewUUID; c.Now = time.Now })
	bd, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := store.Head(context.Background(), bd.ChainID()); err != nil {
		b.Fatal(err)
	}
	return r, r.ctx(executor.ProfileGoverned, bd), store
}

// BenchmarkArgumentsExecute is BenchmarkExecute/minimal with an argument
// object, which the minimal benchmark's nil arguments never clone,
// validate or digest.
func BenchmarkArgumentsExecute(b *testing.B) {
	r := newRig(b, nil, func(c *executor.Config) { c.IDs = executor.NewUUID; c.Now = time.Now })
	ec := r.ctx(executor.ProfileMinimal, nil)
	q := req("r", "nothing", map[string]any{"text": "hello, world"})
	b.ReportAllocs()
	for b.Loop() {
		if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
			b.Fatal(out.Kind(), out.Base().ReasonCode)
		}
	}
}
