package diag

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"testing"
)

// TestSARIF checks the log against SARIF 2.1.0's requirements for what it
// uses: version and runs; the driver's name; every result's message, a
// level of error or warning, a ruleIndex naming the rule with its ruleId;
// a location only where the file is known, a region only where the line
// is, and an artifact URI that decodes back to the file.
func TestSARIF(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.Mkdir("dir", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("dir/my file.cue", []byte("package p\n\nx: 1 & 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var l List
	l.Add(Pos{File: "dir/my file.cue", Line: 3, Col: 7}, CodeUnknownField, "unknown field %q", "x")
	l.Warn(Pos{File: "a.yaml", Line: 2}, CodeNoEffect, "no effect")
	l.Add(Pos{File: "/abs/p.json"}, CodeIO, "cannot read")
	l.Add(Pos{}, CodeNoPolicies, "no declarations")
	l.Add(Pos{File: "dir/my file.cue", Line: 1, Col: 1}, CodeUnknownField, "again")
	var buf bytes.Buffer
	if err := Print(&buf, l, FormatSARIF); err != nil {
		t.Fatal(err)
	}
	var log struct {
		Schema  string `json:"$schema"`
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string `json:"name"`
					Rules []struct {
						ID string `json:"id"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				RuleIndex int    `json:"ruleIndex"`
				Level     string `json:"level"`
				Message   struct {
					Text string `json:"text"`
				} `json:"message"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI       string `json:"uri"`
							URIBaseID string `json:"uriBaseId"`
						} `json:"artifactLocation"`
						Region *struct {
							StartLine   int `json:"startLine"`
							StartColumn int `json:"startColumn"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || len(log.Runs) != 1 || log.Runs[0].Tool.Driver.Name != "polc" {
		t.Fatalf("log header: %+v", log)
	}
	run := log.Runs[0]
	if got := len(run.Tool.Driver.Rules); got != 4 {
		t.Errorf("%d rules, want 4 distinct codes", got)
	}
	sorted := l.Sorted()
	if len(run.Results) != len(sorted) {
		t.Fatalf("%d results for %d diagnostics", len(run.Results), len(sorted))
	}
	for i, r := range run.Results {
		d := sorted[i]
		if r.RuleID != d.Code || run.Tool.Driver.Rules[r.RuleIndex].ID != d.Code || r.Message.Text != d.Message {
			t.Errorf("result %d %+v for %v", i, r, d)
		}
		if want := map[Severity]string{Error: "error", Warning: "warning"}[d.Severity]; r.Level != want {
			t.Errorf("result %d level %q, want %q", i, r.Level, want)
		}
		if (len(r.Locations) == 1) != (d.Pos.File != "") {
			t.Errorf("result %d: locations %+v for %v", i, r.Locations, d.Pos)
			continue
		}
		if d.Pos.File == "" {
			continue
		}
		loc := r.Locations[0].PhysicalLocation
		u, err := url.Parse(loc.ArtifactLocation.URI)
		if err != nil || u.Path != d.Pos.File || (u.Scheme == "file") == (loc.ArtifactLocation.URIBaseID == "%SRCROOT%") {
			t.Errorf("result %d: artifact %+v for %q", i, loc.ArtifactLocation, d.Pos.File)
		}
		if (loc.Region != nil) != (d.Pos.Line > 0) || loc.Region != nil && (loc.Region.StartLine != d.Pos.Line || loc.Region.StartColumn != d.Pos.Col) {
			t.Errorf("result %d: region %+v for %v", i, loc.Region, d.Pos)
		}
	}
}

// TestSARIFWindowsAbsolutePath: a file outside the working directory on
// Windows keeps its drive ("C:/x/p.cue" after Rel): a file: URI, not a
// relative reference against %SRCROOT% ("./C:/x/p.cue").
func TestSARIFWindowsAbsolutePath(t *testing.T) {
	for file, want := range map[string]sarifArtifact{
		"C:/Users/me/p.cue": {URI: "file:///C:/Users/me/p.cue"},
		"d:/my dir/p.cue":   {URI: "file:///d:/my%20dir/p.cue"},
		"/abs/p.cue":        {URI: "file:///abs/p.cue"},
		"dir/p.cue":         {URI: "dir/p.cue", URIBaseID: "%SRCROOT%"},
		"a:b/p.cue":         {URI: "./a:b/p.cue", URIBaseID: "%SRCROOT%"},
	} {
		if got := sarifArtifactOf(file); got != want {
			t.Errorf("sarifArtifactOf(%q) = %+v, want %+v", file, got, want)
		}
	}
}

// TestSARIFColumnsUTF16: polc's byte columns become SARIF's UTF-16 code
// units against the file's line (non-ASCII text before the column counts
// one unit per BMP character, two per astral one, one per invalid byte);
// a column the line cannot place (mid-character, past the end, no such
// line, unreadable file) is left out rather than guessed.
func TestSARIFColumnsUTF16(t *testing.T) {
	src := []byte("ascii: x\nname: \"h\u00e9llo \U0001F600\" & y\r\nbad: \xff z\nlast")
	files := map[string][]byte{"p.cue": src}
	read := func(f string) ([]byte, error) {
		if b, ok := files[f]; ok {
			return b, nil
		}
		return nil, os.ErrNotExist
	}
	line2 := "name: \"h\u00e9llo \U0001F600\" & y"
	for _, tc := range []struct {
		name string
		pos  Pos
		want int
	}{
		{"ascii", Pos{File: "p.cue", Line: 1, Col: 8}, 8},
		{"after two- and four-byte characters", Pos{File: "p.cue", Line: 2, Col: len(line2)}, len(line2) - 1 - 2},
		{"on the multibyte character", Pos{File: "p.cue", Line: 2, Col: 9}, 9},
		{"inside the multibyte character", Pos{File: "p.cue", Line: 2, Col: 10}, 0},
		{"after an invalid byte", Pos{File: "p.cue", Line: 3, Col: 8}, 8},
		{"end of the last line", Pos{File: "p.cue", Line: 4, Col: 5}, 5},
		{"past the end of the line", Pos{File: "p.cue", Line: 4, Col: 6}, 0},
		{"no such line", Pos{File: "p.cue", Line: 5, Col: 1}, 0},
		{"unreadable file", Pos{File: "gone.cue", Line: 1, Col: 3}, 0},
	} {
		var l List
		l.Add(tc.pos, CodeUnknownField, "x")
		r := sarifLogFrom(l, read).Runs[0].Results[0].Locations[0].PhysicalLocation.Region
		if r == nil || r.StartLine != tc.pos.Line || r.StartColumn != tc.want {
			t.Errorf("%s: region %+v, want line %d column %d", tc.name, r, tc.pos.Line, tc.want)
		}
	}
}
