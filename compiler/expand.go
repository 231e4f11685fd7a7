package compiler

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

// coverIndex answers "is child covered by some pattern of this set" in time
// proportional to the child's literal prefix plus the candidates sharing it,
// not to the size of the set.
type coverIndex struct {
	kind     pattern.Kind
	set      set
	byPrefix map[string][]string
}

func newCoverIndex(k pattern.Kind, s set) *coverIndex {
	if k == "qualified" {
		k = pattern.Action
	}
	ix := &coverIndex{kind: k, set: s, byPrefix: make(map[string][]string, len(s))}
	for _, p := range s.sorted() {
		lp := pattern.LiteralPrefix(k, p)
		ix.byPrefix[lp] = append(ix.byPrefix[lp], p)
	}
	return ix
}

// coveringAll returns every pattern of the set that covers child, sorted.
func (ix *coverIndex) coveringAll(child string) []string {
	var out []string
	if _, ok := ix.set[child]; ok {
		out = append(out, child)
	}
	lp := pattern.LiteralPrefix(ix.kind, child)
	for i := 0; i <= len(lp); i++ {
		for _, p := range ix.byPrefix[lp[:i]] {
			if p != child && pattern.Covers(ix.kind, p, child) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// coveredBy returns a pattern of the set that covers child.
func (ix *coverIndex) coveredBy(child string) (string, bool) {
	if _, ok := ix.set[child]; ok {
		return child, true
	}
	// A parent can only cover child if the parent's literal prefix is a
	// prefix of the child's literal prefix.
	lp := pattern.LiteralPrefix(ix.kind, child)
	for i := 0; i <= len(lp); i++ {
		for _, p := range ix.byPrefix[lp[:i]] {
			if pattern.Covers(ix.kind, p, child) {
				return p, true
			}
		}
	}
	return "", false
}

func (ix *coverIndex) covers(child string) bool {
	_, ok := ix.coveredBy(child)
	return ok
}

// describe summarizes the set for error messages.
func (ix *coverIndex) describe() string {
	if len(ix.set) == 0 {
		return "parent allows nothing here"
	}
	keys := ix.set.sorted()
	var quoted []string
	for _, k := range keys[:min(len(keys), 4)] {
		quoted = append(quoted, strconv.Quote(k))
	}
	s := "parent allows " + strings.Join(quoted, ", ")
	if len(keys) > 4 {
		s += fmt.Sprintf(" and %d more", len(keys)-4)
	}
	return s
}

// expansionPaths are the declaration paths an expansion may name.
var expansionPaths = []string{
	"actions.allow", "actions.approve", "budgets.calls", "budgets.cost_microunits", "budgets.tokens",
	"budgets.wall_microseconds", "budgets.window", "environment.inject", "environment.read",
	"extends", "filesystem.execute", "filesystem.read", "filesystem.write", "gates",
	"mcp.servers.resources", "mcp.servers.tools", "network.allow", "network.mode",
	"principals", "secrets.inject", "secrets.reference_only", "subprocess.allow",
	"subprocess.mode", "subprocess.shell", "tenants",
}

// expansionAuth matches detected expansions against a policy's declared
// `expansions` entries and remembers which values were used.
type expansionAuth struct {
	p     *Policy
	decls []ExpansionDecl
	used  [][]bool
}

func newExpansionAuth(p *Policy) *expansionAuth {
	a := &expansionAuth{p: p}
	if p.Decl.Expansions != nil {
		a.decls = *p.Decl.Expansions
	}
	a.used = make([][]bool, len(a.decls))
	for i, e := range a.decls {
		a.used[i] = make([]bool, len(e.Values))
	}
	return a
}

// valueKey makes declared values (json.Number, string) and detected values
// (string, int64) comparable: 5 and "5" differ.
func valueKey(v any) string {
	switch v := v.(type) {
	case json.Number:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case string:
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%#v", v)
}

// authorize reports whether an entry names path and value, with a
// non-empty authority and evidence (the schema requires both).
func (a *expansionAuth) authorize(path string, value any) bool {
	key := valueKey(value)
	ok := false
	for i, e := range a.decls {
		if e.Path != path || strings.TrimSpace(e.Authority) == "" || strings.TrimSpace(e.Evidence) == "" {
			continue
		}
		for j, v := range e.Values {
			if valueKey(v) == key {
				a.used[i][j] = true
				ok = true
			}
		}
	}
	return ok
}

// check reports unknown expansion paths (errors) and unused values
// (warnings). A root policy has no parent to expand, so its declared
// expansions record intentional grants for polc diff instead: all of them
// are kept and none is reported unused.
func (a *expansionAuth) check(diags *diag.List, root bool) {
	for i, e := range a.decls {
		path := fmt.Sprintf("expansions[%d]", i)
		if !slices.Contains(expansionPaths, e.Path) {
			diags.Add(a.p.PosOf(path+".path"), diag.CodeInvalidValue, "policy %q: expansion path %q is not one of %s", a.p.Name, e.Path, strings.Join(expansionPaths, ", "))
			continue
		}
		for j, v := range e.Values {
			if root {
				a.used[i][j] = true
				continue
			}
			if !a.used[i][j] {
				b, _ := json.Marshal(v)
				if e.Path == "extends" {
					diags.Warn(a.p.PosOf(fmt.Sprintf("%s.values[%d]", path, j)), diag.CodeExpansionUnused, "policy %q: expansion extends %s names neither the name nor the policy_id of the parent this policy extends", a.p.Name, b)
					continue
				}
				diags.Warn(a.p.PosOf(fmt.Sprintf("%s.values[%d]", path, j)), diag.CodeExpansionUnused, "policy %q: expansion %s %s grants nothing the parent does not already allow", a.p.Name, e.Path, b)
			}
		}
	}
}

// recorded returns the used expansions for the snapshot, sorted.
func (a *expansionAuth) recorded() []snapshot.Expansion {
	out := []snapshot.Expansion{}
	for i, e := range a.decls {
		var values []any
		for j, v := range e.Values {
			if !a.used[i][j] {
				continue
			}
			if n, ok := v.(json.Number); ok {
				iv, err := n.Int64()
				if err == nil {
					v = iv
				}
			}
			values = append(values, v)
		}
		if len(values) > 0 {
			out = append(out, snapshot.Expansion{Path: e.Path, Values: values, Authority: e.Authority, Evidence: e.Evidence})
		}
	}
	slices.SortStableFunc(out, func(x, y snapshot.Expansion) int {
		if c := strings.Compare(x.Path, y.Path); c != 0 {
			return c
		}
		bx, _ := json.Marshal(x.Values)
		by, _ := json.Marshal(y.Values)
		return strings.Compare(string(bx), string(by))
	})
	return out
}
