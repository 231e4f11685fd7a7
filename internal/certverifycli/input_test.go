package certverifycli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/certverifycli"
	"polc.dev/polc/internal/evidencegen"
)

// run runs certverify with --format json and returns the exit code and the
// report's finding codes.
func run(t *testing.T, args ...string) (int, []chain.Code) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := certverifycli.Run(context.Background(), append(args, "--format", "json"),
		certverifycli.Env{Stdout: &stdout, Stderr: &stderr, Now: func() time.Time { return time.Unix(0, 0) }})
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var codes []chain.Code
	for _, f := range rep.Findings {
		codes = append(codes, f.Code)
	}
	return code, codes
}

func writeFiles(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHugeInputsAreNotBuffered: a certificate, record, note or proof file
// is refused beyond its size limit, and certverify reads no more than
// that: a hostile multi-gigabyte file must not be read into memory whole
// (it used to be, with os.ReadFile, before the parser looked at its size).
func TestHugeInputsAreNotBuffered(t *testing.T) {
	s := evidencegen.NewSmall()
	dir := writeFiles(t, map[string][]byte{"chain.jsonl": s.Chain, "trust.txt": s.Trust, "proof": s.Inclusion, "new.note": s.Checkpoint})
	const size = 256 << 20
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	p := func(n string) string { return filepath.Join(dir, n) }
	for _, tc := range []struct {
		args []string
		exit int
		code chain.Code
	}{
		{[]string{"cert", huge, "--chain", p("chain.jsonl")}, 1, chain.CodeMalformedCertificate},
		{[]string{"inclusion", huge, p("proof")}, 1, chain.CodeMalformedRecord},
		{[]string{"inclusion", p("record"), huge}, 1, chain.CodeMalformedProof},
		{[]string{"consistency", huge, p("new.note"), "--chain", p("chain.jsonl"), "--trust", p("trust.txt")}, 1, chain.CodeMalformedCheckpoint},
		{[]string{"chain", p("chain.jsonl"), "--checkpoint", huge, "--trust", p("trust.txt")}, 1, chain.CodeMalformedCheckpoint},
	} {
		if tc.args[1] == p("record") {
			os.WriteFile(p("record"), s.Record, 0o644)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		code, codes := run(t, tc.args...)
		runtime.ReadMemStats(&after)
		if code != tc.exit || len(codes) == 0 || !containsCode(codes, tc.code) {
			t.Errorf("%v: exit %d, findings %v; want exit %d with %s", tc.args[:2], code, codes, tc.exit, tc.code)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
			t.Errorf("%v: allocated %d MiB for a %d MiB input it refuses", tc.args[:2], alloc>>20, size>>20)
		}
	}
	// The trust file too: refused (exit 2) without reading it whole.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if code, _ := run(t, "chain", p("chain.jsonl"), "--trust", huge); code != certverifycli.ExitError {
		t.Errorf("huge trust file: exit %d, want 2", code)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
		t.Errorf("trust: allocated %d MiB for a %d MiB input it refuses", alloc>>20, size>>20)
	}
}

func containsCode(codes []chain.Code, c chain.Code) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}

// TestConsistencyChainSwapped: checkpoints given new-before-old fail with
// --chain as they do with --proof (it used to exit 0 with --chain).
func TestConsistencyChainSwapped(t *testing.T) {
	s := evidencegen.NewSmall()
	dir := writeFiles(t, map[string][]byte{"chain.jsonl": s.Chain, "trust.txt": s.Trust, "old.note": s.OldCheckpt, "new.note": s.Checkpoint})
	p := func(n string) string { return filepath.Join(dir, n) }
	if code, codes := run(t, "consistency", p("old.note"), p("new.note"), "--chain", p("chain.jsonl"), "--trust", p("trust.txt")); code != 0 {
		t.Fatalf("in order: exit %d %v", code, codes)
	}
	code, codes := run(t, "consistency", p("new.note"), p("old.note"), "--chain", p("chain.jsonl"), "--trust", p("trust.txt"))
	if code != certverifycli.ExitFailed || len(codes) != 1 || codes[0] != chain.CodeConsistencyFailed {
		t.Fatalf("swapped: exit %d %v, want 1 [consistency_failed]", code, codes)
	}
}

// TestConsistencyChainMaxFindings: --max-findings bounds the chain's
// findings in `consistency --chain` as in the other commands (it was
// ignored there: the chain was always verified with the default 100).
func TestConsistencyChainMaxFindings(t *testing.T) {
	s := evidencegen.NewSmall()
	// Every record's created_at edited, hashes kept: one content_mismatch
	// per record (the links and roots still hold: stored hashes), and the
	// warning task_not_closed (the task_closed record is not trusted).
	edited := bytes.ReplaceAll(s.Chain, []byte(`"created_at":"2026-03-01T09:`), []byte(`"created_at":"2026-03-01T10:`))
	dir := writeFiles(t, map[string][]byte{"chain.jsonl": edited, "trust.txt": s.Trust, "old.note": s.OldCheckpt, "new.note": s.Checkpoint})
	p := func(n string) string { return filepath.Join(dir, n) }
	var stdout bytes.Buffer
	code := certverifycli.Run(context.Background(), []string{"consistency", p("old.note"), p("new.note"), "--chain", p("chain.jsonl"),
		"--trust", p("trust.txt"), "--max-findings", "2", "--format", "json"},
		certverifycli.Env{Stdout: &stdout, Stderr: &bytes.Buffer{}, Now: func() time.Time { return time.Unix(0, 0) }})
	var rep struct {
		Findings        []chain.Finding `json:"findings"`
		FindingsOmitted int             `json:"findings_omitted"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if code != certverifycli.ExitFailed || len(rep.Findings) != 2 || rep.FindingsOmitted != 8 {
		t.Fatalf("exit %d, %d findings, %d omitted; want exit 1, 2 findings, 8 omitted: %v", code, len(rep.Findings), rep.FindingsOmitted, rep.Findings)
	}
}

// TestAnchorSizeBeyondInt64: a checkpoint's size is a uint64; one beyond
// 2^63 (a hostile or corrupt checkpoint, reported as truncated) must be
// reported as that number, not as a negative one.
func TestAnchorSizeBeyondInt64(t *testing.T) {
	s := evidencegen.NewSmall()
	var first struct {
		ChainID string `json:"chain_id"`
	}
	if err := json.Unmarshal(s.Chain[:bytes.IndexByte(s.Chain, '\n')], &first); err != nil {
		t.Fatal(err)
	}
	const size = 1<<63 + 5
	cp, err := chain.SignCheckpoint(chain.Checkpoint{ChainID: first.ChainID, Size: size, Root: s.Head}, evidencegen.LogKey.Signer)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeFiles(t, map[string][]byte{"chain.jsonl": s.Chain, "trust.txt": s.Trust, "big.note": cp})
	var stdout bytes.Buffer
	code := certverifycli.Run(context.Background(), []string{"chain", filepath.Join(dir, "chain.jsonl"), "--checkpoint", filepath.Join(dir, "big.note"),
		"--trust", filepath.Join(dir, "trust.txt"), "--format", "json"},
		certverifycli.Env{Stdout: &stdout, Stderr: &bytes.Buffer{}, Now: func() time.Time { return time.Unix(0, 0) }})
	var rep struct {
		Findings []chain.Finding `json:"findings"`
		Anchors  []struct {
			Kind string          `json:"kind"`
			Size json.RawMessage `json:"size"`
		} `json:"anchors"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if code != certverifycli.ExitFailed || len(rep.Anchors) != 1 || string(rep.Anchors[0].Size) != "9223372036854775813" {
		t.Fatalf("exit %d, anchors %s, findings %v; want exit 1 and size 9223372036854775813", code, stdout.String(), rep.Findings)
	}
}
