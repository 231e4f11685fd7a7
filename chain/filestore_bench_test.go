package chain

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// BenchmarkFsyncFloor is the disk's floor under any group commit: one
// goroutine appending groups of a fixed size to a file, each written and
// fsynced, nothing else. It reports MB/s and µs per fsync; a store that
// must make B bytes/s durable cannot beat B / (MB/s at its group size).
func BenchmarkFsyncFloor(b *testing.B) {
	for _, size := range []int{16 << 10, 64 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("group=%dKiB", size>>10), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := bytes.Repeat([]byte("x"), size)
			var off int64
			start := time.Now()
			for b.Loop() {
				if _, err := f.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				off += int64(size)
			}
			el := time.Since(start)
			b.ReportMetric(float64(off)/el.Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(el.Microseconds())/float64(b.N), "µs/fsync")
		})
	}
}
