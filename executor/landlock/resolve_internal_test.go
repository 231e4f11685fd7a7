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

// literal: a protected path is itself, plus each spelling on disk in
// another case (as spelled there, the absent rest as written), never a
// pattern: '*' and '?' match only themselves.
func TestLiteral(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "Keys"), 0o755)
	os.WriteFile(filepath.Join(dir, "Keys", "K.key"), nil, 0o600)
	os.WriteFile(filepath.Join(dir, "axb"), nil, 0o600)
	os.Symlink(filepath.Join(dir, "Keys"), filepath.Join(dir, "KEYS"))
	cases := map[string][]string{
		// Existing, in another case too (the link KEYS is not walked).
		dir + "/keys/k.key": {dir + "/keys/k.key", dir + "/Keys/K.key"},
		// Absent below an existing directory of another case.
		dir + "/keys/cert.json": {dir + "/keys/cert.json", dir + "/Keys/cert.json"},
		// Absent from its first component on.
		dir + "/ev/x": {dir + "/ev/x", dir + "/ev/x"},
		// Wildcard characters are literal: axb is not a*b.
		dir + "/a*b":   {dir + "/a*b", dir + "/a*b"},
		dir + "/a?b/c": {dir + "/a?b/c", dir + "/a?b/c"},
		"/":            {"/"},
	}
	for p, want := range cases {
		var r resolver
		got, err := r.literal(p)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: got %q %v, want %q", p, got, err, want)
		}
	}
}
