package diag

import (
	"bytes"
	"net/url"
	"os"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// SARIF 2.1.0 (OASIS, https://docs.oasis-open.org/sarif/sarif/v2.1.0/):
// the subset a diagnostic list needs. One run; its tool's rules are the
// distinct codes, sorted; each result names its rule by id and index, its
// level (error or warning), its message, and its location when the file is
// known: the path relative to the working directory (uriBaseId
// "%SRCROOT%") and, when known, the line and column. polc's columns count
// bytes; SARIF's (columnKind utf16CodeUnits, its default) count UTF-16
// code units, so the column is converted against the file's line, and
// left out (the region is then the whole line) when the file or line
// cannot be read or the column does not fall between characters.
type sarifLogJSON struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool    sarifTool     `json:"tool"`
	Results []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name  string      `json:"name"`
	Rules []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID string `json:"id"`
}

type sarifResult struct {
	RuleID    string          `json:"ruleId"`
	RuleIndex int             `json:"ruleIndex"`
	Level     string          `json:"level"`
	Message   sarifMessage    `json:"message"`
	Locations []sarifLocation `json:"locations,omitempty"`
}

type sarifMessage struct {
	Text string `json:"text"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifact `json:"artifactLocation"`
	Region           *sarifRegion  `json:"region,omitempty"`
}

type sarifArtifact struct {
	URI       string `json:"uri"`
	URIBaseID string `json:"uriBaseId,omitempty"`
}

// sarifArtifactOf is a diagnostic's file as a SARIF artifact location: a
// relative path is a URI reference against %SRCROOT% (the working
// directory), an absolute one (outside it) a file: URI; both escaped.
func sarifArtifactOf(file string) sarifArtifact {
	if strings.HasPrefix(file, "/") {
		return sarifArtifact{URI: (&url.URL{Scheme: "file", Path: file}).String()}
	}
	if isDrivePath(file) {
		// A Windows path outside the working directory ("C:/x/p.cue",
		// slashed by Rel) is absolute too: file:///C:/x/p.cue, not a
		// path under %SRCROOT%.
		return sarifArtifact{URI: (&url.URL{Scheme: "file", Path: "/" + file}).String()}
	}
	return sarifArtifact{URI: (&url.URL{Path: file}).String(), URIBaseID: "%SRCROOT%"}
}

// isDrivePath reports whether file starts with a drive letter, colon and
// slash. Rel leaves such a path only when it is absolute (Windows); a
// relative first segment "C:" is not worth the ambiguity.
func isDrivePath(file string) bool {
	return len(file) >= 3 && file[1] == ':' && file[2] == '/' &&
		(file[0] >= 'A' && file[0] <= 'Z' || file[0] >= 'a' && file[0] <= 'z')
}

type sarifRegion struct {
	StartLine   int `json:"startLine"`
	StartColumn int `json:"startColumn,omitempty"`
}

// utf16Column converts the 1-based byte column col on the 1-based line of
// src into UTF-16 code units, 1-based. ok is false when src has no such
// line or col is not at a character boundary of it (one past its last
// byte, the end of the line, is). A byte that is not UTF-8 counts as one
// unit: U+FFFD, as an editor decodes it.
func utf16Column(src []byte, line, col int) (int, bool) {
	for range line - 1 {
		i := bytes.IndexByte(src, '\n')
		if i < 0 {
			return 0, false
		}
		src = src[i+1:]
	}
	if i := bytes.IndexByte(src, '\n'); i >= 0 {
		src = src[:i]
	}
	if col < 1 || col-1 > len(src) || col-1 < len(src) && !utf8.RuneStart(src[col-1]) {
		return 0, false
	}
	n := 1
	for prefix := src[:col-1]; len(prefix) > 0; {
		r, size := utf8.DecodeRune(prefix)
		n += utf16.RuneLen(r)
		prefix = prefix[size:]
	}
	return n, true
}

// sarifLog is l (sorted) as a SARIF log, its columns converted against
// the files os.ReadFile reads.
func sarifLog(l List) sarifLogJSON {
	return sarifLogFrom(l, os.ReadFile)
}

// sarifLogFrom is sarifLog reading each file once with read.
func sarifLogFrom(l List, read func(string) ([]byte, error)) sarifLogJSON {
	type source struct {
		b  []byte
		ok bool
	}
	sources := map[string]source{}
	column := func(p Pos) int {
		src, seen := sources[p.File]
		if !seen {
			b, err := read(p.File)
			src = source{b, err == nil}
			sources[p.File] = src
		}
		if !src.ok || p.Col < 1 {
			return 0
		}
		c, _ := utf16Column(src.b, p.Line, p.Col)
		return c
	}
	var codes []string
	for _, d := range l {
		codes = append(codes, d.Code)
	}
	slices.Sort(codes)
	codes = slices.Compact(codes)
	run := sarifRun{
		Tool:    sarifTool{Driver: sarifDriver{Name: "polc", Rules: []sarifRule{}}},
		Results: []sarifResult{},
	}
	for _, c := range codes {
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{ID: c})
	}
	for _, d := range l {
		i, _ := slices.BinarySearch(codes, d.Code)
		r := sarifResult{RuleID: d.Code, RuleIndex: i, Level: "error", Message: sarifMessage{Text: d.Message}}
		if d.Severity == Warning {
			r.Level = "warning"
		}
		if d.Pos.File != "" && !strings.HasPrefix(d.Pos.File, "<") {
			loc := sarifLocation{PhysicalLocation: sarifPhysical{ArtifactLocation: sarifArtifactOf(d.Pos.File)}}
			if d.Pos.Line > 0 {
				loc.PhysicalLocation.Region = &sarifRegion{StartLine: d.Pos.Line, StartColumn: column(d.Pos)}
			}
			r.Locations = []sarifLocation{loc}
		}
		run.Results = append(run.Results, r)
	}
	return sarifLogJSON{Schema: "https://json.schemastore.org/sarif-2.1.0.json", Version: "2.1.0", Runs: []sarifRun{run}}
}
