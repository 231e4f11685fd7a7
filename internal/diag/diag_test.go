package diag_test

import (
	"strings"
	"testing"

	"polc.dev/polc/internal/diag"
)

// TestGitHubEscapes: in a workflow command, ':' and ',' delimit the
// properties, so a file name holding them must be escaped or the
// annotation lands on another line or file; '%', CR and LF are escaped in
// both the properties and the message.
func TestGitHubEscapes(t *testing.T) {
	var l diag.List
	l.Add(diag.Pos{File: "a,line=9:b%.cue", Line: 3, Col: 4}, "schema_violation", "two\nlines 100%%")
	l.Warn(diag.Pos{File: "w.cue", Line: 1, Col: 1}, "expiry_clamped", "plain")
	var b strings.Builder
	if err := diag.Print(&b, l, diag.FormatGitHub); err != nil {
		t.Fatal(err)
	}
	want := "::error file=a%2Cline=9%3Ab%25.cue,line=3,col=4::schema_violation: two%0Alines 100%25\n" +
		"::warning file=w.cue,line=1,col=1::expiry_clamped: plain\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestGitHubUnknownPosition: properties not known are left out, not
// printed empty or zero (GitHub would look for a file named "" or line 0);
// a line without a file is meaningless to GitHub and is dropped too.
func TestGitHubUnknownPosition(t *testing.T) {
	var l diag.List
	l.Add(diag.Pos{}, "no_policies", "nothing")
	l.Add(diag.Pos{File: "f.yaml"}, "invalid_input", "file only")
	l.Add(diag.Pos{File: "g.yaml", Line: 3}, "syntax_error", "line only")
	l.Warn(diag.Pos{Line: 2, Col: 1}, "expiry_clamped", "no file")
	var b strings.Builder
	if err := diag.Print(&b, l, diag.FormatGitHub); err != nil {
		t.Fatal(err)
	}
	want := "::error::no_policies: nothing\n" +
		"::warning::expiry_clamped: no file\n" +
		"::error file=f.yaml::invalid_input: file only\n" +
		"::error file=g.yaml,line=3::syntax_error: line only\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
