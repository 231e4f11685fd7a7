package decision

import (
	"slices"
	"strings"
	"unicode/utf8"

	"polc.dev/polc/internal/pattern"
)

// The matchers below are the evaluator's fast paths: each indexes its
// patterns (maps for literals, tries for paths and commands, suffix maps for
// hosts) so that a lookup costs about the length of the value, not the
// number of rules. Each reports matches by setting rule bits. They implement
// pattern.Match exactly; match_test.go checks them against it.

// bits is a rule bitset indexed by rule order.
type bits []uint64

func newBits(n int) bits        { return make(bits, (n+63)/64) }
func (b bits) set(i int32)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bits) has(i int32) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }
func (b bits) clear() {
	for i := range b {
		b[i] = 0
	}
}

// globMatch matches a single-segment glob ('*' any run, '?' one rune).
func globMatch(p, s string) bool {
	// Iterative matching with one backtrack point, over bytes for ASCII
	// and runes otherwise.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		if pi < len(p) {
			switch p[pi] {
			case '*':
				star, mark = pi, si
				pi++
				continue
			case '?':
				_, size := decodeRune(s[si:])
				pi++
				si += size
				continue
			default:
				if p[pi] == s[si] {
					pi++
					si++
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		pi = star + 1
		_, size := decodeRune(s[mark:])
		mark += size
		si = mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }

func hasGlob(p string) bool { return strings.ContainsAny(p, "*?") }

// globIndex holds glob patterns keyed by their literal prefix (the text
// before the first wildcard), so that matching a value only tries the globs
// whose prefix the value starts with: len(value) map lookups instead of a
// scan of every glob.
type globIndex[T any] struct {
	byPrefix map[string][]globEntry[T]
	// lens are the distinct lengths of the prefixes, ascending: a value is
	// looked up only at those (policies have a few, e.g. "agent:").
	lens []int
	n    int
}

type globEntry[T any] struct {
	pat string
	v   T
}

func (g *globIndex[T]) add(pat string, v T) {
	if g.byPrefix == nil {
		g.byPrefix = map[string][]globEntry[T]{}
	}
	lp := pat[:strings.IndexAny(pat, "*?")]
	g.byPrefix[lp] = append(g.byPrefix[lp], globEntry[T]{pat, v})
	if i, found := slices.BinarySearch(g.lens, len(lp)); !found {
		g.lens = slices.Insert(g.lens, i, len(lp))
	}
	g.n++
}

// find returns the entry for exactly pat, if added.
func (g *globIndex[T]) find(pat string) (T, bool) {
	lp := pat[:strings.IndexAny(pat, "*?")]
	for _, e := range g.byPrefix[lp] {
		if e.pat == pat {
			return e.v, true
		}
	}
	var zero T
	return zero, false
}

// each calls f for every glob that matches s; f returns whether to count it.
func (g *globIndex[T]) each(s string, f func(T) bool) bool {
	if g.n == 0 {
		return false
	}
	any := false
	for _, i := range g.lens {
		if i > len(s) {
			break
		}
		for _, e := range g.byPrefix[s[:i]] {
			if globMatch(e.pat, s) && f(e.v) {
				any = true
			}
		}
	}
	return any
}

// globSet matches single-segment patterns (action ids, env names, scopes).
type globSet struct {
	exact map[string][]int32
	globs globIndex[int32]
}

func (g *globSet) add(p string, id int32) {
	if !hasGlob(p) {
		if g.exact == nil {
			g.exact = map[string][]int32{}
		}
		g.exact[p] = append(g.exact[p], id)
		return
	}
	g.globs.add(p, id)
}

func (g *globSet) match(s string, hits bits) bool {
	any := false
	for _, id := range g.exact[s] {
		if hits != nil {
			hits.set(id)
		}
		any = true
	}
	if g.globs.each(s, func(id int32) bool {
		if hits != nil {
			hits.set(id)
		}
		return true
	}) {
		any = true
	}
	return any
}

func (g *globSet) empty() bool { return len(g.exact) == 0 && g.globs.n == 0 }

// segTrie matches '/'-separated patterns with literal, glob and (when the
// grammar has it) "**" segments. Values are split on '/' lazily.
type segTrie struct {
	root  segNode
	count int
	// dstarFrom is the first segment (0-based) where "**" stands for zero
	// or more whole segments, as in pattern.Match: 0 for paths and secret
	// namespaces (the zero value), 1 for MCP resources (the server is one
	// glob segment) and noDStar for MCP tools, whose grammar has no "**".
	// Before it, "**" is a glob within one segment, like "*".
	dstarFrom int
}

// noDStar is a segTrie.dstarFrom for grammars without "**".
const noDStar = int(^uint(0) >> 1)

// litChild returns the trie child under a literal key, creating it.
func litChild[N any](lit *map[string]*N, key string) *N {
	if *lit == nil {
		*lit = map[string]*N{}
	}
	next := (*lit)[key]
	if next == nil {
		next = new(N)
		(*lit)[key] = next
	}
	return next
}

// globChild returns the trie child under a glob pattern, creating it.
func globChild[N any](globs *globIndex[*N], pattern string) *N {
	next, ok := globs.find(pattern)
	if !ok {
		next = new(N)
		globs.add(pattern, next)
	}
	return next
}

type segNode struct {
	lit   map[string]*segNode
	globs globIndex[*segNode]
	dstar *segNode
	ids   []int32
}

func (t *segTrie) add(p string, id int32) {
	n := &t.root
	i := 0
	for seg := range strings.SplitSeq(p, "/") {
		dstar := seg == "**" && i >= t.dstarFrom
		i++
		switch {
		case dstar:
			if n.dstar == nil {
				n.dstar = &segNode{}
			}
			n = n.dstar
		case hasGlob(seg):
			n = globChild(&n.globs, seg)
		default:
			n = litChild(&n.lit, seg)
		}
	}
	n.ids = append(n.ids, id)
	t.count++
}

// match reports whether any pattern matches s and sets the bits of all
// that do.
func (t *segTrie) match(s string, hits bits) bool {
	if t.count == 0 {
		return false
	}
	return t.root.match(s, 0, false, hits)
}

// match matches the segments of s starting at off; done means no segment
// is left (distinct from one empty segment).
func (n *segNode) match(s string, off int, done bool, hits bits) bool {
	any := false
	if n.dstar != nil {
		// "**" consumes zero or more whole segments.
		if n.dstar.match(s, off, done, hits) {
			any = true
		}
		if !done {
			for o := off; ; {
				i := strings.IndexByte(s[o:], '/')
				if i < 0 {
					if n.dstar.match(s, len(s), true, hits) {
						any = true
					}
					break
				}
				o += i + 1
				if n.dstar.match(s, o, false, hits) {
					any = true
				}
			}
		}
	}
	if done {
		for _, id := range n.ids {
			if hits != nil {
				hits.set(id)
			}
			any = true
		}
		return any
	}
	seg, next, last := s[off:], 0, true
	if i := strings.IndexByte(seg, '/'); i >= 0 {
		seg, next, last = seg[:i], off+i+1, false
	}
	if c := n.lit[seg]; c != nil {
		if c.match(s, next, last, hits) {
			any = true
		}
	}
	if n.globs.each(seg, func(c *segNode) bool { return c.match(s, next, last, hits) }) {
		any = true
	}
	return any
}

// cmdTrie matches command patterns against argv token by token; a trailing
// "*" token matches the rest.
type cmdTrie struct {
	root  cmdNode
	count int
}

type cmdNode struct {
	lit   map[string]*cmdNode
	globs globIndex[*cmdNode]
	rest  []int32 // patterns ending in a trailing "*" here
	ids   []int32 // patterns ending exactly here
}

func (t *cmdTrie) add(p string, id int32) {
	n := &t.root
	toks := strings.Split(p, " ")
	for i, tok := range toks {
		if tok == "*" && i == len(toks)-1 {
			n.rest = append(n.rest, id)
			t.count++
			return
		}
		if hasGlob(tok) {
			n = globChild(&n.globs, tok)
			continue
		}
		n = litChild(&n.lit, tok)
	}
	n.ids = append(n.ids, id)
	t.count++
}

// match matches argv; when lower is set each token is lowercased first.
func (t *cmdTrie) match(argv []string, lower bool, hits bits) bool {
	if t.count == 0 {
		return false
	}
	return t.root.match(argv, lower, hits)
}

func (n *cmdNode) match(argv []string, lower bool, hits bits) bool {
	any := false
	for _, id := range n.rest {
		if hits != nil {
			hits.set(id)
		}
		any = true
	}
	if len(argv) == 0 {
		for _, id := range n.ids {
			if hits != nil {
				hits.set(id)
			}
			any = true
		}
		return any
	}
	tok := argv[0]
	if lower {
		tok = strings.ToLower(tok)
	}
	if c := n.lit[tok]; c != nil && c.match(argv[1:], lower, hits) {
		any = true
	}
	if n.globs.each(tok, func(c *cmdNode) bool { return c.match(argv[1:], lower, hits) }) {
		any = true
	}
	return any
}

// hostSet matches "host:port" values.
type hostSet struct {
	any      []int32
	exact    map[string][]int32 // "host:port"
	anyPort  map[string][]int32 // "host"
	suffixes map[string][]hostSuffix
	count    int
}

type hostSuffix struct {
	port string // "" = any
	id   int32
}

func (h *hostSet) add(p string, id int32) {
	h.count++
	if p == "*" {
		h.any = append(h.any, id)
		return
	}
	host, port, _ := pattern.SplitHostPort(p)
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		if h.suffixes == nil {
			h.suffixes = map[string][]hostSuffix{}
		}
		h.suffixes[suffix] = append(h.suffixes[suffix], hostSuffix{port, id})
		return
	}
	if port == "" {
		if h.anyPort == nil {
			h.anyPort = map[string][]int32{}
		}
		h.anyPort[host] = append(h.anyPort[host], id)
		return
	}
	if h.exact == nil {
		h.exact = map[string][]int32{}
	}
	h.exact[p] = append(h.exact[p], id)
}

func (h *hostSet) match(v string, hits bits) bool {
	if h.count == 0 {
		return false
	}
	any := false
	set := func(ids []int32) {
		for _, id := range ids {
			if hits != nil {
				hits.set(id)
			}
			any = true
		}
	}
	set(h.any)
	i := strings.LastIndexByte(v, ':')
	if i < 0 || !pattern.Digits(v[i+1:]) {
		return any // not host:port: only "*" matches
	}
	host, port := v[:i], v[i+1:]
	set(h.exact[v])
	set(h.anyPort[host])
	// "*.s" needs the part before ".s" to be valid labels; a host with an
	// empty label, ':', '[' or ']' can have no such part before any suffix.
	if len(h.suffixes) > 0 && host != "" && host[0] != '.' && !strings.Contains(host, "..") && !strings.ContainsAny(host, ":[]") {
		for j := 1; j < len(host); j++ {
			if host[j] != '.' {
				continue
			}
			for _, s := range h.suffixes[host[j+1:]] {
				if s.port == "" || s.port == port {
					if hits != nil {
						hits.set(s.id)
					}
					any = true
				}
			}
		}
	}
	return any
}

// pathSet matches absolute patterns against paths and workspace-relative
// patterns against the path relative to the workspace.
type pathSet struct {
	abs, rel segTrie
}

func (p *pathSet) add(pat string, id int32) {
	if strings.HasPrefix(pat, "/") {
		p.abs.add(pat, id)
		return
	}
	p.rel.add(pat, id)
}

func (p *pathSet) empty() bool { return p.abs.count == 0 && p.rel.count == 0 }

// match: path is clean and absolute, ws the clean absolute workspace.
func (p *pathSet) match(path, ws string, hits bits) bool {
	any := p.abs.match(path, hits)
	if p.rel.count > 0 {
		if rel, ok := relTo(ws, path); ok && p.rel.match(rel, hits) {
			any = true
		}
	}
	return any
}

// relTo returns path relative to ws ("" for ws itself).
func relTo(ws, path string) (string, bool) {
	switch {
	case path == ws:
		return "", true
	case ws == "/":
		return path[1:], true
	case strings.HasPrefix(path, ws) && len(path) > len(ws) && path[len(ws)] == '/':
		return path[len(ws)+1:], true
	}
	return "", false
}
