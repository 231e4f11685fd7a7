package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/chain/storetest"
	"polc.dev/polc/pgstore"
)

// BenchmarkAppendConcurrent: 16 writers, each appending to a chain of its
// own and waiting for each record's commit (as a governed operation
// waits), so that group commit shares transactions among them. ns/op is
// per record.
func BenchmarkAppendConcurrent(b *testing.B) {
	s := pgstore.OpenEvidenceBench(b)
	const writers = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := storetest.NewIDs(fmt.Sprintf("%08x", 0xb0000000+w))
			c := ids.Next()
			var prev *chain.Hash
			for seq := int64(0); next.Add(1) <= int64(b.N); seq++ {
				op := ids.Next()
				r, err := chain.Seal(storetest.Draft(ids, c, &op, storetest.Bound()), seq, prev)
				if err != nil {
					b.Error(err)
					return
				}
				rc, err := s.Append(context.Background(), r)
				if err != nil {
					b.Error(err)
					return
				}
				h := rc.HeadHash
				prev = &h
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(s.Stats().RecordsPerGroup(), "records/commit")
}
