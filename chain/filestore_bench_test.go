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

// BenchmarkFileStoreOperations is the file store alone under the
// executor's governed record pattern: 64 concurrent writers into one
// chain, each operation five records awaited at three points (two, two,
// one: the start receipts, the pre-call records, the terminal), as
// Execute appends them. It is the ceiling the store puts on governed
// operations per second, without the executor's own work. The prefilled
// variant writes the reserve before the timer starts (enough for the
// whole run), so the run pays for no zeros: what the store would do if
// its reserve were written while the chain is idle.
func BenchmarkFileStoreOperations(b *testing.B) {
	for _, prefill := range []bool{false, true} {
		name := "reserve"
		if prefill {
			name = "prefilled"
		}
		b.Run(name, func(b *testing.B) {
			s, err := OpenFileStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			w := &Writer{Store: s, ChainID: testChain}
			var ids atomic.Int64
			draft := func() Draft {
				id := fmt.Sprintf("00000000-0000-4000-8000-%012x", ids.Add(1))
				return Draft{RecordID: id, OperationID: &id, ChainID: testChain, PolicyID: testPolicy,
					PolicyVersion: "1", Payload: boundPayload(), CreatedAt: time.Now()}
			}
			if prefill {
				if !reserveSupported {
					b.Skip("no reserve on this platform")
				}
				// ~4.6 KB per operation at up to ~25,000 operations/s.
				s.reserveChunk = int64(b.N)*5*1024 + 64<<20
				if _, _, err := w.Append(context.Background(), draft()); err != nil {
					b.Fatal(err)
				}
				for deadline := time.Now().Add(time.Minute); s.Stats().Reserved < s.reserveChunk; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						b.Fatal("the reserve was not written within a minute")
					}
				}
			}
			st0 := s.Stats()
			b.SetParallelism(32) // 64 goroutines on 2 CPUs
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					for _, k := range [...]int{2, 2, 1} {
						var wait func() error
						for range k {
							_, _, wt, err := w.AppendAsync(context.Background(), draft())
							if err != nil {
								b.Error(err)
								return
							}
							wait = wt
						}
						if err := wait(); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
			el := time.Since(start)
			st := s.Stats()
			groups, recs, bytes := st.Groups-st0.Groups, st.Records-st0.Records, st.Bytes-st0.Bytes
			b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
			b.ReportMetric(float64(recs)/float64(max(groups, 1)), "records/fsync")
			b.ReportMetric(float64((st.SyncTime-st0.SyncTime).Microseconds())/float64(max(groups, 1)), "µs/fsync")
			b.ReportMetric(float64(bytes)/el.Seconds()/1e6, "MB/s")
		})
	}
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
	// Over the reserve: the same 64 KiB groups written over zeros already
	// on disk and made durable with datasync, as the file store does.
	b.Run("reserve/group=64KiB", func(b *testing.B) {
		const size = 64 << 10
		f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		// 64 MiB of reserve, written before the clock starts and then
		// overwritten in a cycle (its blocks stay allocated).
		const span = 64 << 20
		if err := (&FileStore{}).writeZeros(f, 0, span); err != nil {
			b.Fatal(err)
		}
		buf := bytes.Repeat([]byte("x"), size)
		var off int64
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, err := f.WriteAt(buf, off%span); err != nil {
				b.Fatal(err)
			}
			if err := datasync(f); err != nil {
				b.Fatal(err)
			}
			off += size
		}
		el := time.Since(start)
		b.ReportMetric(float64(off)/el.Seconds()/1e6, "MB/s")
		b.ReportMetric(float64(el.Microseconds())/float64(b.N), "µs/fsync")
	})
}
