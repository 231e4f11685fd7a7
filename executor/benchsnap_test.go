package executor_test

import (
	"bytes"
	"os"
	"testing"
)

// benchSnapshot is the snapshot bench/executorbench runs on: testPolicy
// compiled. Its benchmarks cannot compile it themselves (their binary
// must not link the compiler).
const benchSnapshot = "../bench/executorbench/testdata/snapshot.json"

// TestBenchSnapshotUpToDate keeps bench/executorbench's snapshot equal to
// testPolicy compiled. POLC_UPDATE=1 rewrites it.
func TestBenchSnapshotUpToDate(t *testing.T) {
	want, err := compilePolicy(t, testPolicy).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("POLC_UPDATE") != "" {
		if err := os.WriteFile(benchSnapshot, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(benchSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not testPolicy compiled (run POLC_UPDATE=1 go test ./executor -run TestBenchSnapshotUpToDate)", benchSnapshot)
	}
}
