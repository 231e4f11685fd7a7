package chain

import (
	"fmt"
	"testing"
	"time"

	"polc.dev/polc/internal/cputime"
)

// BenchmarkPrepareLink measures the CPU cost of building and linking one
// policy_bound record, as Writer.AppendAsync and the file store do it:
// prepare (payload encoding and digest, timestamp, checks, line head),
// then link after the chain's tip (sequence, previous hash, chain hash),
// the conflict checks and the commit into the chain's state. Each record
// is linked after the previous one, so the chain (and its maps of record
// ids and chain hashes) grows with b.N, as a long-lived chain's does. The
// record ids are made before the timer starts. checkLink is the generic
// check; checkNew the one for records linked at the tip. Besides wall
// time it reports cpu-ns/op, the process's CPU time (garbage collection
// included) per record, which a loaded machine disturbs less.
func BenchmarkPrepareLink(b *testing.B) {
	for _, c := range []struct {
		name  string
		check func(s *chainState, p *prepared) error
	}{
		{"checkLink", func(s *chainState, p *prepared) error { return s.checkLink(p.r) }},
		{"checkNew", func(s *chainState, p *prepared) error { return s.checkNew(p.r) }},
	} {
		b.Run(c.name, func(b *testing.B) { benchPrepareLink(b, c.check) })
	}
}

func benchPrepareLink(b *testing.B, check func(s *chainState, p *prepared) error) {
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012x", i+1)
	}
	st := newChainState()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	var bytes int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := cputime.Process()
	for i := 0; i < b.N; i++ {
		d := Draft{RecordID: ids[i], ChainID: testChain, OperationID: &ids[i], PolicyID: testPolicy,
			PolicyVersion: "1", Payload: boundPayload(), CreatedAt: t0.Add(time.Duration(i) * 1001 * time.Nanosecond)}
		p, err := prepare(d)
		if err != nil {
			b.Fatal(err)
		}
		seq, prev := int64(0), (*Hash)(nil)
		if st.has {
			seq, prev = st.tip.Sequence+1, &st.tip.Hash
		}
		line := p.link(seq, prev)
		if err := check(st, p); err != nil {
			b.Fatal(err)
		}
		st.commitHash(p.r, p.hash)
		bytes += int64(len(line) + 1)
		p.release() // as Writer does once the store copied the line
	}
	b.StopTimer()
	if cpu1, ok := cputime.Process(); ok && cpuOK && b.N > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
	if b.N > 0 {
		b.SetBytes(bytes / int64(b.N))
	}
}
