package prove_test

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"polc.dev/polc/internal/diag"
	. "polc.dev/polc/internal/prove"
)

func lint(t *testing.T, policies map[string]any, name, parent string) []string {
	t.Helper()
	pr := prover(t, compileDecls(t, policies))
	var pp *Policy
	if parent != "" {
		pp = pr.Policies[parent]
	}
	fs, err := pr.Lint(pr.Policies[name], pp)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.Code+" "+f.RuleID+f.Facet+": "+f.Message)
	}
	sort.Strings(out)
	return out
}

func has(findings []string, code, subject, by string) bool {
	for _, f := range findings {
		if strings.HasPrefix(f, code+" "+subject+":") && strings.Contains(f, by) {
			return true
		}
	}
	return false
}

// TestLintApprovalShadowed: an approval every request of which a deny
// refuses can never escalate.
func TestLintApprovalShadowed(t *testing.T) {
	got := lint(t, map[string]any{"p": base(map[string]any{
		"actions": map[string]any{"allow": []string{"bash"}, "deny": []string{"bash:git push --force *"},
			"approve": []any{map[string]any{"pattern": "bash:git push --force *", "approver": "lead", "expires_after": "1h"}}},
		"subprocess": map[string]any{"mode": "allowlist", "allow": []string{"git *"}},
	})}, "p", "")
	if !has(got, "rule_never_effective", "approval[lead]:bash:git push --force *", "action.deny:bash:git push --force *") {
		t.Errorf("approval not reported: %q", got)
	}
}

// TestLintUnion: a write grant that two denies cover together, which no
// single one does (so the compiler's allow_shadowed cannot say it).
func TestLintUnion(t *testing.T) {
	got := lint(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file"}},
		"filesystem": map[string]any{"write": []string{"/srv/*"}, "deny": []string{"/srv/a*", "/srv/?*"}},
	})}, "p", "")
	// /srv/* matches "/srv/" and one segment: "/srv/?*" denies every
	// non-empty one, and a clean path has no empty segment.
	if !has(got, "rule_never_effective", "filesystem.write:/srv/*", "filesystem.deny:/srv/?*") {
		t.Errorf("got %q", got)
	}
}

// TestLintUnmatchable: a program path with a ".." segment is refused by
// the normalizer, and a host whose last label is a number is no name: no
// request carries either.
func TestLintUnmatchable(t *testing.T) {
	got := lint(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"bash", "http_get"}},
		"subprocess": map[string]any{"mode": "allowlist", "allow": []string{"../bin/x *", "ls *"}},
		"network":    map[string]any{"mode": "allowlist", "allow": []string{"*.0x1f", "example.com"}},
	})}, "p", "")
	for _, id := range []string{"subprocess.allow:../bin/x *", "network.allow:*.0x1f"} {
		if !has(got, "rule_unmatchable", id, "") {
			t.Errorf("%s not reported unmatchable: %q", id, got)
		}
	}
	if len(got) != 2 {
		t.Errorf("got %q", got)
	}
}

// TestLintRedundant: a grant inside another, a deny inside another, a
// qualified deny inside an unqualified one; never the covering rule.
func TestLintRedundant(t *testing.T) {
	got := lint(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file", "bash"}, "deny": []string{"write_file:/srv/x/**"}},
		"filesystem": map[string]any{"write": []string{"/srv/**", "/srv/a/**"}, "deny": []string{"/srv/x/**", "/srv/x/y/**"}},
		"subprocess": map[string]any{"mode": "allowlist", "allow": []string{"git *", "git status *"}},
	})}, "p", "")
	for _, c := range [][2]string{
		{"filesystem.write:/srv/a/**", "filesystem.write:/srv/**"},
		{"filesystem.deny:/srv/x/y/**", "filesystem.deny:/srv/x/**"},
		{"subprocess.allow:git status *", "subprocess.allow:git *"},
	} {
		if !has(got, "rule_redundant", c[0], c[1]) {
			t.Errorf("%s not reported redundant by %s: %q", c[0], c[1], got)
		}
	}
	if has(got, "rule_redundant", "filesystem.deny:/srv/x/**", "") || has(got, "rule_redundant", "filesystem.write:/srv/**", "") {
		t.Errorf("a covering rule reported: %q", got)
	}
}

// TestLintFacetEmptied: a child that keeps write_file but denies every
// path it may write empties the facet; one that drops the actions that
// write narrows its actions instead, and is not reported.
func TestLintFacetEmptied(t *testing.T) {
	policies := map[string]any{
		"org": base(map[string]any{"actions": map[string]any{"allow": []string{"write_file", "read_file"}},
			"filesystem": map[string]any{"read": []string{"/srv/**"}, "write": []string{"/srv/**"}}}),
		"team":   map[string]any{"version": "1", "extends": "org", "filesystem": map[string]any{"write": []string{"/srv/t/**"}, "deny": []string{"/srv/t/**"}}},
		"reader": map[string]any{"version": "1", "extends": "org", "actions": map[string]any{"allow": []string{"read_file"}}},
	}
	if got := lint(t, policies, "team", "org"); !has(got, "facet_emptied", "path_write", `allows no path_write value, which its parent "org"`) {
		t.Errorf("got %q", got)
	}
	if got := lint(t, policies, "reader", "org"); len(got) != 0 {
		t.Errorf("got %q", got)
	}
}

// TestLintRedundantDeclaredOrder: of rules that make each other
// removable, the first declared is kept (Policy.Declared) and the later
// ones reported, naming a minimal set of rules that cover them: "/z/*",
// declared last, is matched by "/z/?" and "/z/??*" together (a clean
// path has no empty segment); "/**/b" overlaps it and is not named. By
// id, "/z/*" comes first and is kept.
func TestLintRedundantDeclaredOrder(t *testing.T) {
	denies := []string{"/z/?", "/**/b", "/z/??*", "/z/*"}
	snaps := compileDecls(t, map[string]any{"p": base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file"}},
		"filesystem": map[string]any{"write": []string{"/**"}, "deny": denies},
	})})
	redundant := func(declared map[string]int) []string {
		pr := prover(t, snaps)
		pr.Policies["p"].Declared = declared
		fs, err := pr.Lint(pr.Policies["p"], nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fs {
			if f.Code == CodeRedundant {
				out = append(out, f.Message)
			}
		}
		sort.Strings(out)
		return out
	}
	pos := map[string]diag.Pos{}
	for i, d := range denies {
		pos["filesystem.deny:"+d] = diag.Pos{File: "p.cue", Line: 7, Col: 10 + 8*i}
	}
	got := redundant(DeclaredOrder(pos))
	want := []string{"filesystem.deny:/z/* is redundant: every value it matches is matched by filesystem.deny:/z/?, filesystem.deny:/z/??*"}
	if !slices.Equal(got, want) {
		t.Errorf("declared order: got %q, want %q", got, want)
	}
	got = redundant(nil)
	want = []string{"filesystem.deny:/z/? is redundant: every value it matches is matched by filesystem.deny:/z/*",
		"filesystem.deny:/z/??* is redundant: every value it matches is matched by filesystem.deny:/z/*"}
	if !slices.Equal(got, want) {
		t.Errorf("by id: got %q, want %q", got, want)
	}
}
