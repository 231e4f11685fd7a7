package polccli

import (
	"errors"
	"strings"
	"testing"

	"polc.dev/polc/internal/jcs"
)

// FuzzRequestErrorPos: for any I-JSON text and any member path an error
// may name, finding the position neither panics nor loops, and it is
// 0, 0 (not found) or a valid line and column; a member memberOffset
// finds starts with its key's quote.
func FuzzRequestErrorPos(f *testing.F) {
	f.Add([]byte(`{"a": 1, "usage": {"tokens": "x"}}`), "usage.tokens")
	f.Add([]byte("\n {\"a\":\n[{\"a\": 2}], \"b\": {}}"), "a")
	f.Add([]byte(`{"a.b": 1}`), "a.b")
	f.Fuzz(func(t *testing.T, data []byte, path string) {
		if len(data) > 1<<12 {
			return
		}
		if _, err := jcs.Check(data); err != nil {
			return
		}
		for _, msg := range []string{`member "` + path + `": a number, want a string`, `missing "` + path + `"`, `unknown field "` + path + `"`} {
			line, col := requestErrorPos(data, errors.New(msg))
			if line == 0 && col == 0 {
				continue
			}
			if line < 1 || col < 1 {
				t.Fatalf("%q %q: position %d:%d", data, msg, line, col)
			}
		}
		if off := memberOffset(data, strings.Split(path, ".")); off >= 0 && (off >= len(data) || data[off] != '"') {
			t.Fatalf("%q %q: member offset %d is no key", data, path, off)
		}
	})
}
