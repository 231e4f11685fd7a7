package harness_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"polc.dev/polc/harness"
)

var (
	testCitationRE = regexp.MustCompile(`^harness/([a-z_]+_test\.go) (Test[A-Za-z0-9_]+)(?:/(.+))?$`)
	docCitationRE  = regexp.MustCompile(`^(docs/[a-z0-9-]+\.md) (\S.*)$`)
)

// citationProblems returns what is wrong with an evidence string: every
// "; "-separated citation must name a test function that exists in the
// named harness test file (a TestRealEnforcedRows case that exists), or a
// heading that exists in the named doc. Evidence reaches users (`polc
// harness plan --format json`), so it may point at nothing outside the
// repository.
func citationProblems(evidence string) []string {
	if strings.TrimSpace(evidence) == "" {
		return []string{"no evidence"}
	}
	cases := map[string]bool{}
	for _, c := range rowCases {
		cases[c.name] = true
	}
	var out []string
	for _, cite := range strings.Split(evidence, "; ") {
		if m := testCitationRE.FindStringSubmatch(cite); m != nil {
			src, err := os.ReadFile(m[1])
			switch {
			case err != nil:
				out = append(out, fmt.Sprintf("%q: %v", cite, err))
			case !strings.Contains(string(src), "\nfunc "+m[2]+"("):
				out = append(out, fmt.Sprintf("%q: no func %s in harness/%s", cite, m[2], m[1]))
			case m[3] != "" && (m[2] != "TestRealEnforcedRows" || !cases[m[3]]):
				out = append(out, fmt.Sprintf("%q: no subtest %q (only TestRealEnforcedRows cases may be cited)", cite, m[3]))
			}
			continue
		}
		if m := docCitationRE.FindStringSubmatch(cite); m != nil {
			src, err := os.ReadFile(filepath.Join("..", m[1]))
			if err != nil {
				out = append(out, fmt.Sprintf("%q: %v", cite, err))
				continue
			}
			found := false
			for _, line := range strings.Split(string(src), "\n") {
				if strings.HasPrefix(line, "#") && strings.TrimSpace(strings.TrimLeft(line, "#")) == m[2] {
					found = true
					break
				}
			}
			if !found {
				out = append(out, fmt.Sprintf("%q: %s has no heading %q", cite, m[1], m[2]))
			}
			continue
		}
		out = append(out, fmt.Sprintf("%q is neither a test (harness/FILE_test.go TestName) nor a doc section (docs/FILE.md Heading)", cite))
	}
	return out
}

// TestEveryRowCitationResolves: each capability-table row's evidence
// resolves inside this repository, to a test that exists and a doc
// section that exists.
func TestEveryRowCitationResolves(t *testing.T) {
	for _, table := range harness.Tables {
		for _, r := range table.Rows {
			for _, p := range citationProblems(r.Evidence) {
				t.Errorf("%s %s (when %b unless %b): %s", table.Provider, r.Capability, r.When, r.Unless, p)
			}
		}
	}
}

// TestReportCitationsResolve: the evidence Compile writes itself, for a
// version without a table and for a required control the spec leaves
// open, resolves too.
func TestReportCitationsResolve(t *testing.T) {
	dir := t.TempDir()
	s := specFrom(t, dir, fmt.Sprintf(lockedDown, "codex"))
	p := fakeProbe("codex", false)
	p.Version, p.Supported = "0.170.0", false
	_, rep, err := harness.Compile(s, p)
	var uv *harness.UnsupportedVersionError
	if !errors.As(err, &uv) {
		t.Fatalf("Compile = %v", err)
	}
	results := rep.All()
	_, rep = compileFor(t, `package h
harnesses: h: {
	provider: %q
	workspace: root: "ws"
	tools: allow: ["read_file"]
	network: mode: "on"
	required_capabilities: ["net.egress/v1"]
}
`, "codex", false)
	results = append(results, rep.All()...)
	for _, r := range results {
		for _, p := range citationProblems(r.Evidence) {
			t.Errorf("%s: %s", r.Capability, p)
		}
	}
}

// TestCitationProblemsRejects: the checker itself refuses what the
// tables used to cite.
func TestCitationProblemsRejects(t *testing.T) {
	for _, bad := range []string{
		"",
		"notes.md §8 Claude 3",
		"docs/agent-clis.md",
		"../notes/agent-clis.md Codex: the sandbox",
		"Claude Code 2.1.328 rule matcher; harness/review_harness_test.go",
		"harness/review_harness_test.go TestNoSuchTest",
		"harness/real_rows_test.go TestRealEnforcedRows/claude-code/no-such-case",
		"docs/agent-clis.md No such heading",
		"docs/no-such-doc.md Codex: the sandbox",
	} {
		if len(citationProblems(bad)) == 0 {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{
		"harness/real_rows_test.go TestRealEnforcedRows/codex/shell",
		"docs/agent-clis.md Codex: the sandbox; harness/review_harness_test.go TestReviewRealDenyEnvPrefix",
	} {
		if p := citationProblems(good); len(p) != 0 {
			t.Errorf("%q refused: %v", good, p)
		}
	}
}
