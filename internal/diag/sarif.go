package diag

import (
	"net/url"
	"slices"
	"strings"
)

// SARIF 2.1.0 (OASIS, https://docs.oasis-open.org/sarif/sarif/v2.1.0/):
// the subset a diagnostic list needs. One run; its tool's rules are the
// distinct codes, sorted; each result names its rule by id and index, its
// level (error or warning), its message, and its location when the file is
// known: the path relative to the working directory (uriBaseId
// "%SRCROOT%") and, when known, the line and column (1-based, as printed
// in text).
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

// sarifLog is l (sorted) as a SARIF log.
func sarifLog(l List) sarifLogJSON {
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
				loc.PhysicalLocation.Region = &sarifRegion{StartLine: d.Pos.Line, StartColumn: d.Pos.Col}
			}
			r.Locations = []sarifLocation{loc}
		}
		run.Results = append(run.Results, r)
	}
	return sarifLogJSON{Schema: "https://json.schemastore.org/sarif-2.1.0.json", Version: "2.1.0", Runs: []sarifRun{run}}
}
