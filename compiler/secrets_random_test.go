package compiler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

// Effective exposure of one namespace, as the evaluator and docs/decisions.md decide
// it: a matching forbid entry denies (forbid patterns are lowercased and
// matched against the lowercased namespace), otherwise the most
// restrictive matching grant wins, and nothing matching exposes nothing.
const (
	effForbid = iota
	effNone
	effReference
	effInject
)

var effNames = []string{"forbid", "none", "reference_only", "inject"}

func effectiveExposure(secrets map[string]*secret, ns string) int {
	eff := -1
	for _, s := range secrets {
		if s.exposure == "forbid" {
			if pattern.Match(pattern.Namespace, s.namespace, strings.ToLower(ns)) {
				return effForbid
			}
			continue
		}
		if pattern.Match(pattern.Namespace, s.namespace, ns) {
			e := map[string]int{"reference_only": effReference, "inject": effInject}[s.exposure]
			if eff < 0 || e < eff {
				eff = e
			}
		}
	}
	if eff < 0 {
		return effNone
	}
	return eff
}

// secretUniverse is every namespace of up to four segments of up to two
// letters over {a, b}: it holds a witness for any two of the generated
// patterns that share a namespace.
func secretUniverse() []string {
	segs := []string{"a", "b", "aa", "ab", "ba", "bb"}
	var out []string
	var build func(prefix string, n int)
	build = func(prefix string, n int) {
		for _, s := range segs {
			name := s
			if prefix != "" {
				name = prefix + "/" + s
			}
			out = append(out, name)
			if n > 1 {
				build(name, n-1)
			}
		}
	}
	build("", 4)
	return out
}

func randNamespace(rng *rand.Rand) string {
	n := 1 + rng.IntN(3)
	parts := make([]string, n)
	symbols := []string{"a", "b", "*", "?", "a", "b"}
	for i := range parts {
		if rng.IntN(5) == 0 {
			parts[i] = "**"
			continue
		}
		for range 1 + rng.IntN(2) {
			parts[i] += symbols[rng.IntN(len(symbols))]
		}
	}
	return strings.Join(parts, "/")
}

// narrowNamespace returns a pattern that p likely covers: a segment made
// literal, or a segment appended under a trailing "**".
func narrowNamespace(rng *rand.Rand, p string) string {
	parts := strings.Split(p, "/")
	i := rng.IntN(len(parts))
	switch {
	case parts[i] == "**" && rng.IntN(2) == 0:
		parts[i] = []string{"a", "*", "**/b", "a/**"}[rng.IntN(4)]
	case strings.ContainsAny(parts[i], "*?"):
		parts[i] = strings.NewReplacer("*", "a", "?", "b").Replace(parts[i])
	default:
		parts = append(parts, "a")
	}
	return strings.Join(parts, "/")
}

func randExposure(rng *rand.Rand) string {
	return []string{"forbid", "reference_only", "inject", "inject"}[rng.IntN(4)]
}

func randSecrets(rng *rand.Rand, from []SecretDecl) []SecretDecl {
	n := 1 + rng.IntN(4)
	var out []SecretDecl
	for range n {
		var s SecretDecl
		if len(from) > 0 && rng.IntN(4) != 0 {
			s = from[rng.IntN(len(from))]
			if rng.IntN(2) == 0 {
				s.Namespace = narrowNamespace(rng, s.Namespace)
			}
			if rng.IntN(3) == 0 {
				s.Exposure = randExposure(rng)
			}
		} else {
			s = SecretDecl{Namespace: randNamespace(rng), Exposure: randExposure(rng)}
		}
		if pattern.Validate(pattern.Namespace, s.Namespace) == nil {
			out = append(out, s)
		}
	}
	return out
}

func resolveSecrets(t *testing.T, name string, parent *resolved, secrets []SecretDecl) (*resolved, diag.List) {
	t.Helper()
	d := PolicyDecl{Version: "1", Secrets: &secrets}
	if parent != nil {
		d.Extends = &parent.name
	}
	r, auth, diags := resolve(Config{Dir: t.TempDir()}.withDefaults(), &Policy{Name: name, Decl: d}, parent)
	auth.check(&diags, parent == nil)
	r.expansions = auth.recorded()
	return r, diags
}

func lowerSecrets(t *testing.T, r *resolved, parent *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	l, err := lower(r, parent)
	if err != nil {
		t.Fatal(err)
	}
	return l.snap
}

func fmtSecrets(ss []SecretDecl) string {
	var b []string
	for _, s := range ss {
		b = append(b, s.Namespace+"="+s.Exposure)
	}
	return "[" + strings.Join(b, " ") + "]"
}

// TestSecretInheritanceNeverWidens: a child whose secrets compile without
// an expansion gives no namespace more exposure than its parent does,
// through chains of three policies, and compiles to the same snapshot with
// its parent in the set or given as a snapshot.
func TestSecretInheritanceNeverWidens(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	universe := secretUniverse()
	accepted := 0
	for iter := range 400 {
		gp := randSecrets(rng, nil)
		root, _ := resolveSecrets(t, "gp", nil, gp)
		rootSnap := lowerSecrets(t, root, nil)
		chain := []string{"gp " + fmtSecrets(gp)}
		parent, parentSnap := inheritable(root), rootSnap
		parentDecl := gp
		for level := range 2 {
			decl := randSecrets(rng, parentDecl)
			name := fmt.Sprintf("c%d", level)
			chain = append(chain, name+" "+fmtSecrets(decl))
			child, diags := resolveSecrets(t, name, parent, decl)
			if diags.HasErrors() {
				break
			}
			accepted++
			for _, ns := range universe {
				if c, p := effectiveExposure(child.secrets, ns), effectiveExposure(parent.secrets, ns); c > p {
					t.Fatalf("iteration %d: %s: %q is %s, parent has %s\nchain: %s", iter, name, ns, effNames[c], effNames[p], strings.Join(chain, " → "))
				}
			}
			snap := lowerSecrets(t, child, parentSnap)
			// The same child against its parent's snapshot (--parent).
			apart, _ := resolveSecrets(t, name, raise(parentSnap, nil), decl)
			if got, want := snapshotRuleIDs(lowerSecrets(t, apart, parentSnap)), snapshotRuleIDs(snap); !slices.Equal(got, want) {
				t.Fatalf("iteration %d: in-set parent gives %v, --parent gives %v\nchain: %s", iter, want, got, strings.Join(chain, " → "))
			}
			parent, parentSnap, parentDecl = inheritable(child), snap, decl
		}
	}
	t.Logf("%d children compiled without expansions", accepted)
	if accepted < 100 {
		t.Errorf("only %d children compiled: the generator no longer exercises inheritance", accepted)
	}
}

func snapshotRuleIDs(s *snapshot.Snapshot) []string {
	var ids []string
	for _, r := range s.CompiledRules {
		ids = append(ids, r.Base().RuleID)
	}
	slices.Sort(ids)
	return ids
}

// TestSecretDiffReportsWidening: polc diff reports a secrets widening
// whenever some namespace's exposure increased from one version to the
// next, and no widening when none did.
func TestSecretDiffReportsWidening(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	universe := secretUniverse()
	widenings, falseReports := 0, 0
	for iter := range 600 {
		oldDecl := randSecrets(rng, nil)
		newDecl := randSecrets(rng, oldDecl)
		o, _ := resolveSecrets(t, "p", nil, oldDecl)
		n, _ := resolveSecrets(t, "p", nil, newDecl)
		widened := ""
		for _, ns := range universe {
			if a, b := effectiveExposure(o.secrets, ns), effectiveExposure(n.secrets, ns); b > a {
				widened = fmt.Sprintf("%q: %s → %s", ns, effNames[a], effNames[b])
				break
			}
		}
		reported := false
		for _, c := range Diff(lowerSecrets(t, o, nil), lowerSecrets(t, n, nil)) {
			if c.Kind == "widened" && strings.HasPrefix(c.Path, "secrets.") {
				reported = true
			}
		}
		if widened != "" {
			widenings++
			if !reported {
				t.Errorf("iteration %d: %s → %s widens %s; diff reports no widening", iter, fmtSecrets(oldDecl), fmtSecrets(newDecl), widened)
			}
		} else if reported {
			falseReports++
		}
	}
	t.Logf("%d of 600 version pairs widen; %d others reported widened (conservative)", widenings, falseReports)
}
