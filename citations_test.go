package polc_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// externalCitationRE matches references to documents this repository does
// not contain: the developers' design notes, research and seed folders,
// and the decision records they summarise. The project must stand on its
// own: code, docs, tests, goldens and program output cite its own docs
// (docs/) and tests instead. This file is the one place allowed to spell
// the patterns.
var externalCitationRE = regexp.MustCompile(strings.Join([]string{
	`\.\./shared\b`,
	`\bshared[/](?:DESIGN|seed|research|hooks)`,
	`\bDESIGN\b`,
	`\bproviders\.md\b`,
	`\bopa-perf\.md\b`,
	`\baesthetics\.md\b`,
	`\bresearch/`,
	`\bseed/`,
	`(?i)\badr-?\d{3,4}`,
}, "|"))

// citationSkipDirs are not checked: version control and build output.
var citationSkipDirs = map[string]bool{".git": true, "out": true}

// TestNoExternalCitations walks the repository's files and fails on any
// reference to a document outside it.
func TestNoExternalCitations(t *testing.T) {
	self := "citations_test.go"
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && citationSkipDirs[path] {
				return filepath.SkipDir
			}
			return nil
		}
		if path == self || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > 8<<20 {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return nil // binary
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			if m := externalCitationRE.FindString(line); m != "" {
				t.Errorf("%s:%d: %q cites a document outside the repository: %s", path, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("checked only %d files: not run from the module root?", n)
	}
}

// TestExternalCitationPatterns: the patterns catch each way the
// repository used to cite outside documents, and pass innocent text.
func TestExternalCitationPatterns(t *testing.T) {
	for _, bad := range []string{
		"see ../" + "shared" + "/DESIGN.md", // split: the repository holds no such path, even here
		"(DESIGN §4)",
		"Evidence: \"providers.md §8 Claude 3\"",
		"// The legacy mapping (adr0087-notes §7)",
		"(ADR-0121 D7)",
		"ADR-0087's duplicate chain_hash",
		"research/opa-perf.md shows",
		"aesthetics.md",
		"seed/000_383307d1230a7e40.txt",
	} {
		if !externalCitationRE.MatchString(bad) {
			t.Errorf("%q passes", bad)
		}
	}
	for _, ok := range []string{
		"the seed, or POLC_DIFF_SEED",
		"ids derived from the seed and a counter",
		"a shared lease",
		"docs/agent-clis.md Codex: the sandbox",
		"design notes (docs/design-notes.md)",
	} {
		if externalCitationRE.MatchString(ok) {
			t.Errorf("%q refused", ok)
		}
	}
}
