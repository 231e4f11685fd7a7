package chain

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFileStoreAppend measures the file store alone under the
// executor's access pattern: 64 concurrent writers into one chain, each
// waiting for its record to be durable (group commit, fsync per group). It
// is the floor under the executor's governed throughput.
func BenchmarkFileStoreAppend(b *testing.B) {
	s, err := OpenFileStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w := &Writer{Store: s, ChainID: testChain}
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("00000000-0000-4000-8000-%012x", n.Add(1))
			d := Draft{RecordID: id, OperationID: &id, ChainID: testChain, PolicyID: testPolicy,
				PolicyVersion: "1", Payload: boundPayload(), CreatedAt: time.Now()}
			if _, _, err := w.Append(context.Background(), d); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "records/s")
	st := s.Stats()
	b.ReportMetric(st.RecordsPerGroup(), "records/fsync")
	b.ReportMetric(float64(st.MeanSync().Microseconds()), "µs/fsync")
}
