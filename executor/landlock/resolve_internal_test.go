package landlock

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// absentLiteral: an absent literal prefix is passed (spelled as on disk up
// to the first absent name), an existing one or a wildcard-led pattern adds
// nothing.
func TestAbsentLiteral(t *testing.T) {
	ws := filepath.Join(t.TempDir(), "WS")
	os.MkdirAll(filepath.Join(ws, "Present", "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, ".env"), nil, 0o644)
	cases := map[string][]string{
		"secrets/**":       {ws + "/secrets"},
		"a/b/**":           {ws + "/a/b"},
		"present/sub/**":   nil,
		"present/x/*.key":  {ws + "/Present/x"},
		"present/*/x":      nil,
		".env":             nil,
		"**/.env":          nil,
		"present/new.txt":  {ws + "/Present/new.txt"},
		"PRESENT/SUB/KEYS": {ws + "/Present/sub/keys"},
	}
	for pat, want := range cases {
		var r resolver
		got, err := r.absentLiteral(strings.ToLower(absPattern(pat, ws)))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: got %q %v, want %q", pat, got, err, want)
		}
	}
}
