package chain_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

// TestFirstRecordChangedIsOneFinding: one changed character in the first
// record's chain_id (or hash_algorithm) makes every later record differ
// from it. That is one change: the first record's own finding and one
// chain_id_mismatch (algorithm_changed) for the run of records after it,
// which says how many they are and that they agree with each other.
// Before, a chain of 64,000 records gave 64,000 findings (100 listed, the
// rest counted as omitted).
func TestFirstRecordChangedIsOneFinding(t *testing.T) {
	var buf bytes.Buffer
	if _, _, err := evidencegen.WriteLargeChain(&buf, 1<<20, "repeat"); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	records := bytes.Count(data, []byte("\n"))
	first := data[:bytes.IndexByte(data, '\n')]
	for name, c := range map[string]struct {
		edit       func([]byte) []byte
		lineCode   chain.Code
		repeatCode chain.Code
	}{
		"chain_id": {func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"chain_id":"`)) + len(`"chain_id":"`)
			b[i] ^= 1 // a hex digit stays a hex digit
			return b
		}, chain.CodeContentMismatch, chain.CodeChainIDMismatch},
		"hash_algorithm": {func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"sha256-v1"`), []byte(`"sha256-v2"`), 1)
		}, chain.CodeUnsupportedAlgorithm, chain.CodeAlgorithmChanged},
	} {
		changed := append(c.edit(bytes.Clone(first)), data[len(first):]...)
		res, err := chain.Verify(bytes.NewReader(changed), chain.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("(and the %d records after it, to line %d); every record but the first has this value", records-2, records)
		if len(res.Findings) != 3 || res.Omitted != 0 || res.Findings[0].Code != c.lineCode || *res.Findings[0].Line != 1 ||
			res.Findings[1].Code != c.repeatCode || *res.Findings[1].Line != 2 || !strings.Contains(res.Findings[1].Message, want) ||
			res.Findings[2].Code != chain.CodeTaskNotClosed && res.Findings[2].Code != chain.CodeMissingTerminal {
			t.Errorf("%s: %d records, findings (%d omitted):\n%v", name, records, res.Omitted, res.Findings)
		}
	}
	// A chain read as another chain's (the file store's Verify names the
	// chain it expects): one finding for all its records.
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{ChainID: "00000000-0000-4000-8000-000000000000"})
	if err != nil {
		t.Fatal(err)
	}
	f := res.First(chain.CodeChainIDMismatch)
	if n := len(res.Findings); n > 2 || f == nil || *f.Line != 1 || !strings.HasSuffix(f.Message, fmt.Sprintf("(and the %d records after it, to line %d)", records-1, records)) {
		t.Errorf("another chain's records: %v", res.Findings)
	}
	// Records changed in the middle are each their own finding (their
	// hashes no longer recompute).
	lines := bytes.SplitAfter(bytes.Clone(data), []byte("\n"))
	for _, i := range []int{5, 6, 7, 20} {
		j := bytes.Index(lines[i], []byte(`"chain_id":"`)) + len(`"chain_id":"`)
		lines[i][j] ^= 1
	}
	res, err = chain.Verify(bytes.NewReader(bytes.Join(lines, nil)), chain.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Findings {
		got = append(got, fmt.Sprintf("%d %s", *f.Line, f.Code))
	}
	if fmt.Sprint(got) != "[6 content_mismatch 7 content_mismatch 8 content_mismatch 21 content_mismatch]" {
		t.Errorf("records changed in the middle: %v", res.Findings)
	}
}
