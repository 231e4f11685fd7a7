package compiler

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cuelang.org/go/cue/ast"

	"polc.dev/polc/internal/diag"
)

// loadOne writes data to a file named name in a new directory and loads
// it, counting the calls to CUE's JSON extraction.
func loadOne(t testing.TB, name string, data []byte) (diag.List, int) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	calls := 0
	old := extractJSON
	extractJSON = func(path string, b []byte) (ast.Expr, error) {
		calls++
		return old(path, b)
	}
	defer func() { extractJSON = old }()
	_, d := Load(Config{Dir: dir}, []string{name})
	return d, calls
}

// TestInvalidJSONNeverReachesCUE: JSON that does not parse is refused at
// its first bad byte, in one pass, and never handed to CUE, whose parser
// reports every bad byte and checks each new error against all the
// earlier ones: 64 KiB of random bytes named .json took 9.5 s, 1 MiB did
// not finish, and a 1 MiB string of invalid UTF-8 was as slow. Each input
// here is 1 MiB; the error is where the input first goes wrong.
func TestInvalidJSONNeverReachesCUE(t *testing.T) {
	const notText = "invalid_encoding: invalid UTF-8 (byte 0xff): a declaration file must be UTF-8 text without NUL bytes"
	// Random text (printable ASCII): bytes that are not UTF-8 are refused
	// before any JSON is read (invalid_encoding, below).
	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(0x20 + rng.Uint32()%95)
	}
	random[0] = '%' // never a JSON value's first byte
	long := strings.Repeat("a", 1<<20)
	for name, c := range map[string]struct {
		in        string
		line, col int
		msg       string
	}{
		"random":       {string(random), 1, 1, "syntax_error: invalid character '%' looking for a value"},
		"invalid UTF8": {`{"policies": {}, "x": "` + strings.Repeat("\xff", 1<<20) + `"}`, 1, 24, notText},
		"late byte":    {"{\"policies\": {},\n \"x\": \"" + long + "\xff\"}", 2, 8 + len(long), notText},
		"random bytes": {"\xe3" + string(random), 1, 1, "invalid_encoding: invalid UTF-8 (byte 0xe3): a declaration file must be UTF-8 text without NUL bytes"},
		"truncated":    {`{"policies": {}, "x": "` + long, 1, 24 + len(long), "syntax_error: unterminated string"},
		"duplicate":    {`{"policies": {}, "policies": {}}`, 1, 18, `syntax_error: duplicate member name "policies"`},
		"overflow":     {`{"policies": {}, "x": 1e400}`, 1, 23, "syntax_error: number 1e400 out of range (beyond a finite IEEE 754 double)"},
	} {
		d, calls := loadOne(t, "in.json", []byte(c.in))
		want := fmt.Sprintf("in.json:%d:%d: %s", c.line, c.col, c.msg)
		if len(d) != 1 || d[0].Error() != want || calls != 0 {
			t.Errorf("%s: %d CUE extractions, diagnostics %.300v, want one: %s", name, calls, d, want)
		}
	}
}

// TestLiteralSizesBounded: CUE's evaluator searches a list's or struct's
// earlier elements for each new one (n² for n elements: an array of
// 64,000 zeros, 128 KiB, took half a minute), so a literal beyond
// MaxLiteralElements, or a file beyond MaxSourceElements, is refused on
// its syntax tree before evaluation, in JSON, YAML and CUE alike.
func TestLiteralSizesBounded(t *testing.T) {
	list := func(n int) string { return "[" + strings.Repeat("0,", n-1) + "0]" }
	over := fmt.Sprintf("schema_violation: a list of %d elements: at most %d are accepted in one list or struct", MaxLiteralElements+1, MaxLiteralElements)
	for name, c := range map[string]struct{ in, want string }{
		"in.json": {`{"policies": {}, "x": ` + list(MaxLiteralElements+1) + `}`, "in.json:1:23: " + over},
		"in.yaml": {"policies: {}\nx: " + list(MaxLiteralElements+1) + "\n", "in.yaml:2:4: " + over},
		"in.cue":  {"package p\n\nx: " + list(MaxLiteralElements+1) + "\n", "in.cue:3:4: " + over},
	} {
		d, _ := loadOne(t, name, []byte(c.in))
		if len(d) != 1 || d[0].Error() != c.want {
			t.Errorf("%s: %.300v, want %s", name, d, c.want)
		}
	}
	var lists []string
	for i := range MaxSourceElements/MaxLiteralElements + 1 {
		lists = append(lists, fmt.Sprintf(`"x%d": %s`, i, list(MaxLiteralElements)))
	}
	d, _ := loadOne(t, "in.json", []byte(`{"policies": {}, `+strings.Join(lists, ", ")+`}`))
	if len(d) != 1 || !strings.Contains(d[0].Error(), fmt.Sprintf("schema_violation: more than %d list elements and fields in one file", MaxSourceElements)) {
		t.Errorf("a file beyond MaxSourceElements: %.300v", d)
	}
	// At the bound, the literal is evaluated (and here refused for its
	// unknown field, not its size).
	d, calls := loadOne(t, "in.json", []byte(`{"policies": {}, "x": `+list(MaxLiteralElements)+`}`))
	if calls != 1 || len(d) != 1 || d[0].Code != diag.CodeUnknownField {
		t.Errorf("a list at the bound: %d extractions, %.300v", calls, d)
	}
}

// BenchmarkLoadRandomJSON: refusing random bytes named .json costs time
// linear in their size (compare the sizes' ns/op).
func BenchmarkLoadRandomJSON(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			data := make([]byte, size)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			// A long valid prefix, so that the whole input is read.
			copy(data, `["`)
			for i := 2; i < size-2; i++ {
				data[i] = 'a'
			}
			data[size-2] = 0xff
			dir := b.TempDir()
			os.WriteFile(filepath.Join(dir, "in.json"), data, 0o644)
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, d := Load(Config{Dir: dir}, []string{"in.json"}); len(d) != 1 {
					b.Fatalf("%v", d)
				}
			}
		})
	}
}

// TestYAMLProblemSearchBounded: finding the line of a YAML syntax error
// parses prefixes of the file; they add up to at most yamlSearchFactor
// times the file (or minYAMLSearchBytes). The search was bounded only in
// lines: 200 parses of the whole file, half a minute for 1 MiB, when the
// decoder named a block's first line and the problem was further down.
func TestYAMLProblemSearchBounded(t *testing.T) {
	var b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&b, "k%d: v%d\n", i, i)
	}
	b.WriteString("top:\n")
	for i := range 250 {
		fmt.Fprintf(&b, "  a%d:\n", i)
	}
	b.WriteString("   - x\n  - y\n")
	data := []byte(b.String())
	parsed := 0
	old := extractYAMLPrefix
	extractYAMLPrefix = func(path string, src any) (*ast.File, error) {
		parsed += len(src.([]byte))
		return old(path, src)
	}
	defer func() { extractYAMLPrefix = old }()
	d, _ := loadOne(t, "in.yaml", data)
	if len(d) != 1 || d[0].Code != diag.CodeSyntax {
		t.Fatalf("%v", d)
	}
	if limit := max(yamlSearchFactor*len(data), minYAMLSearchBytes); parsed > limit {
		t.Errorf("the search for the line of the error in %d bytes parsed %d bytes, more than %d", len(data), parsed, limit)
	}
}
