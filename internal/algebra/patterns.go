package algebra

import (
	"strings"

	"polc.dev/polc/internal/pattern"
)

// Of returns the automaton of the strings pattern.Match(k, p, ·) accepts:
// exactly that language, over every string (not only the values a request
// can hold), so that Of can be checked against Match by brute force. For
// commands the string is the argv joined by pattern.ArgvSep.
func Of(k pattern.Kind, p string) *NFA {
	switch k {
	case pattern.Path, pattern.Namespace:
		return segments(strings.Split(p, "/"), true)
	case pattern.MCP:
		return segments(strings.Split(p, "/"), false)
	case pattern.MCPResource:
		server, res, _ := strings.Cut(p, "/")
		return Concat(glob(server, Not('/')), Literal("/"), segments(strings.Split(res, "/"), true))
	case pattern.Command:
		return command(p)
	case pattern.Host:
		return host(p)
	}
	return glob(p, Any)
}

// glob is the automaton of a glob whose '*' matches any run of runes of
// cls and '?' one rune of cls; other runes match themselves.
func glob(g string, cls Class) *NFA {
	b := &builder{}
	start := b.add(false)
	cur := start
	for _, r := range g {
		next := b.add(false)
		switch r {
		case '*':
			b.edge(cur, cur, cls)
			b.eps(cur, next)
		case '?':
			b.edge(cur, next, cls)
		default:
			b.edge(cur, next, Lit(r))
		}
		cur = next
	}
	b.s[cur].accept = true
	return b.done(start)
}

// segments is the automaton of pattern.Match's segment matching: the
// string split on '/' must match segs one glob per segment, where (with
// dstar) a "**" segment matches zero or more whole segments. State B[i]
// begins a segment with segs[i] to match it; a "**" may also be skipped
// (ε to B[i+1]) or consume the segment (L[i], back to B[i] on '/'). A
// segment may end the string only when every segment after it is "**".
func segments(segs []string, dstar bool) *NFA {
	n := len(segs)
	isDStar := func(i int) bool { return dstar && segs[i] == "**" }
	restDStar := make([]bool, n) // every segment after i is "**"
	all := true
	for i := n - 1; i >= 0; i-- {
		restDStar[i] = all
		all = all && isDStar(i)
	}
	b := &builder{}
	B := make([]int32, n+1)
	for i := range B {
		B[i] = b.add(false)
	}
	for i := range n {
		if isDStar(i) {
			L := b.add(restDStar[i])
			b.eps(B[i], L)
			b.eps(B[i], B[i+1])
			b.edge(L, L, Not('/'))
			b.edge(L, B[i], Lit('/'))
			continue
		}
		g := glob(segs[i], Not('/'))
		off := b.embed(g)
		b.eps(B[i], g.start+off)
		for j, s := range g.states {
			if s.accept {
				f := int32(j) + off
				b.s[f].accept = restDStar[i]
				b.edge(f, B[i+1], Lit('/'))
			}
		}
	}
	return b.done(B[0])
}

// command is pattern.Match's token matching: tokens separated by
// ArgvSep, each a glob within one token; a trailing "*" token matches zero
// or more remaining tokens, and "*" alone every string.
func command(p string) *NFA {
	sep := []rune(pattern.ArgvSep)[0]
	toks := strings.Split(p, " ")
	if len(toks) == 1 && toks[0] == "*" {
		return Star(Any)
	}
	trailing := len(toks) > 1 && toks[len(toks)-1] == "*"
	if trailing {
		toks = toks[:len(toks)-1]
	}
	parts := []*NFA{}
	for i, t := range toks {
		if i > 0 {
			parts = append(parts, One(Lit(sep)))
		}
		parts = append(parts, glob(t, Not(sep)))
	}
	n := Concat(parts...)
	if trailing {
		n = Concat(n, Opt(Concat(One(Lit(sep)), Star(Any))))
	}
	return n
}

// host is pattern.Match's host matching of "host:port" strings.
func host(p string) *NFA {
	if p == "*" {
		return Star(Any)
	}
	h, port, _ := pattern.SplitHostPort(p)
	var hn *NFA
	if suffix, ok := strings.CutPrefix(h, "*."); ok {
		label := Plus(Not('.', ':', '[', ']'))
		hn = Concat(label, Repeat(Concat(Literal("."), label)), Literal("."+suffix))
	} else {
		hn = Literal(h)
	}
	pn := Concat(Literal(":"), Plus(Digit))
	if port != "" {
		pn = Literal(":" + port)
	}
	return Concat(hn, pn)
}

// Digit is the class of the ASCII digits.
var Digit = Lit('0', '1', '2', '3', '4', '5', '6', '7', '8', '9')

// Glob is the automaton of a single glob whose '*' and '?' range over the
// runes of cls.
func Glob(g string, cls Class) *NFA { return glob(g, cls) }

// Segments is the automaton of '/'-separated segment patterns as
// pattern.Match matches them ("**" a whole-segment wildcard when dstar).
func Segments(p string, dstar bool) *NFA { return segments(strings.Split(p, "/"), dstar) }
