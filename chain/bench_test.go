package chain_test

import (
	"bytes"
	"sync"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

var (
	benchOnce  sync.Once
	benchChain []byte
	benchHead  chain.Hash
	benchN     int64
)

func benchData(b *testing.B) []byte {
	benchOnce.Do(func() {
		var buf bytes.Buffer
		h, n, err := evidencegen.WriteLargeChain(&buf, 16<<20, "bench")
		if err != nil {
			b.Fatal(err)
		}
		benchChain, benchHead, benchN = buf.Bytes(), h, n
	})
	return benchChain
}

// BenchmarkVerify measures streaming verification of a 16 MiB chain;
// records/s is reported as a metric.
func BenchmarkVerify(b *testing.B) {
	data := benchData(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{ExpectedHead: &benchHead})
		if err != nil || !res.OK() || !res.HeadMatched {
			b.Fatalf("verification failed: %v %v", err, res.Findings)
		}
	}
	b.ReportMetric(float64(benchN)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkParseRecord measures the single-record parser (allocating the
// Record struct), for comparison with the streaming path.
func BenchmarkParseRecord(b *testing.B) {
	data := benchData(b)
	line := data[:bytes.IndexByte(data, '\n')]
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := chain.ParseRecord(line); err != nil {
			b.Fatal(err)
		}
	}
}
