package pattern

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestOverlapsNamespace(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a/*", "a/x", true},
		{"a/x", "a/y", false},
		{"a/**", "b/**", false},
		{"a/**", "**/x", true},
		{"a/*/x", "a/b/*", true},
		{"a/*/x", "a/b/y", false},
		{"*x", "y*", true},
		{"a/x*", "a/*y", true},
		{"a/?", "a/xy", false},
		{"a/**/b", "a", false},
		{"**", "x/y/z", true},
		{"a/b", "a/b/**", true},
		{"a/b", "a/b/*", false},
	} {
		if got := Overlaps(Namespace, c.a, c.b); got != c.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := Overlaps(Namespace, c.b, c.a); got != c.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v (symmetry)", c.b, c.a, got, c.want)
		}
	}
	if !Overlaps(Path, "/a", "/b") {
		t.Error("grammars without an exact test must answer true")
	}
}

// TestOverlapsAgreesWithMatch checks Overlaps against a search for a
// witness: every namespace of up to three segments of up to four letters
// over {a, b}, which bounds a witness for patterns of up to three segments
// of up to two symbols.
func TestOverlapsAgreesWithMatch(t *testing.T) {
	var segs []string
	var grow func(s string)
	grow = func(s string) {
		if s != "" {
			segs = append(segs, s)
		}
		if len(s) < 4 {
			grow(s + "a")
			grow(s + "b")
		}
	}
	grow("")
	var names []string
	var build func(prefix string, n int)
	build = func(prefix string, n int) {
		for _, s := range segs {
			name := s
			if prefix != "" {
				name = prefix + "/" + s
			}
			names = append(names, name)
			if n > 1 {
				build(name, n-1)
			}
		}
	}
	build("", 3)
	rng := rand.New(rand.NewPCG(1, 2))
	symbols := []string{"a", "b", "*", "?"}
	gen := func() string {
		n := 1 + rng.IntN(3)
		parts := make([]string, n)
		for i := range parts {
			if rng.IntN(4) == 0 {
				parts[i] = "**"
				continue
			}
			l := 1 + rng.IntN(2)
			for range l {
				parts[i] += symbols[rng.IntN(len(symbols))]
			}
		}
		return strings.Join(parts, "/")
	}
	found := 0
	for range 300 {
		a, b := gen(), gen()
		witness := ""
		for _, s := range names {
			if Match(Namespace, a, s) && Match(Namespace, b, s) {
				witness = s
				break
			}
		}
		if witness != "" {
			found++
		}
		if got := Overlaps(Namespace, a, b); got != (witness != "") {
			t.Errorf("Overlaps(%q, %q) = %v, witness %q", a, b, got, witness)
		}
	}
	t.Logf("%d of 300 pairs overlap", found)
	if found < 50 || found > 250 {
		t.Errorf("%d of 300 pairs overlap: the generator no longer tests both answers", found)
	}
}

// TestOverlapsAction checks Overlaps for action globs against a search
// for a witness among every id of up to six letters over {a, b}, which
// bounds a witness for two globs of up to three symbols each.
func TestOverlapsAction(t *testing.T) {
	var ids []string
	var grow func(s string)
	grow = func(s string) {
		if s != "" {
			ids = append(ids, s)
		}
		if len(s) < 6 {
			grow(s + "a")
			grow(s + "b")
		}
	}
	grow("")
	var globs []string
	var gen func(s string)
	gen = func(s string) {
		if s != "" {
			globs = append(globs, s)
		}
		if len(s) < 3 {
			for _, c := range []string{"a", "b", "*", "?"} {
				gen(s + c)
			}
		}
	}
	gen("")
	found := 0
	for _, a := range globs {
		for _, b := range globs {
			witness := ""
			for _, s := range ids {
				if Match(Action, a, s) && Match(Action, b, s) {
					witness = s
					break
				}
			}
			if witness != "" {
				found++
			}
			if got := Overlaps(Action, a, b); got != (witness != "") {
				t.Errorf("Overlaps(Action, %q, %q) = %v, witness %q", a, b, got, witness)
			}
		}
	}
	if found == 0 || found == len(globs)*len(globs) {
		t.Errorf("%d of %d pairs overlap: the test no longer tests both answers", found, len(globs)*len(globs))
	}
	if Overlaps(Action, "bash", "read_file") || !Overlaps(Action, "read_*", "*_file") {
		t.Error("examples")
	}
}

// FuzzOverlapsNamespace: Overlaps is symmetric and never says disjoint
// when a namespace matches both.
func FuzzOverlapsNamespace(f *testing.F) {
	f.Add("a/*/x", "a/b/*", "a/b/x")
	f.Add("**", "a/**/b", "a/b")
	f.Fuzz(func(t *testing.T, a, b, s string) {
		if Validate(Namespace, a) != nil || Validate(Namespace, b) != nil || len(a)+len(b) > 64 {
			return
		}
		got := Overlaps(Namespace, a, b)
		if got != Overlaps(Namespace, b, a) {
			t.Fatalf("Overlaps(%q, %q) is not symmetric", a, b)
		}
		if !got && Match(Namespace, a, s) && Match(Namespace, b, s) {
			t.Fatalf("Overlaps(%q, %q) = false, but both match %q", a, b, s)
		}
		if Covers(Namespace, a, b) && !got {
			t.Fatalf("%q covers %q but Overlaps is false", a, b)
		}
	})
}
