package prove

import (
	"strings"
	"sync"

	"polc.dev/polc/internal/algebra"
	"polc.dev/polc/internal/pattern"
)

// mkind is what a matcher reads and in which grammar.
type mkind int

const (
	mAction mkind = iota
	mPrincipal
	mPath
	mCommand
	mHost
	mEnv
	mMCPTool
	mMCPResource
)

// matcher is a pattern as one part of a request is matched against it:
// fold lowercases the part first (deny and approval patterns).
type matcher struct {
	kind    mkind
	pattern string
	fold    bool
}

// cache holds the automaton of every matcher a prover used: policies
// share patterns (a child inherits its parent's denies), and one automaton
// serves them all, in every question. budget is the work bound of the
// question being answered, which every search of it charges (nil: each
// search its own algebra.DefaultBudget).
type cache struct {
	m      sync.Map // matcher → *algebra.NFA
	budget *algebra.Budget
}

func (c *cache) nfa(m matcher) *algebra.NFA {
	if n, ok := c.m.Load(m); ok {
		return n.(*algebra.NFA)
	}
	var n *algebra.NFA
	switch m.kind {
	case mAction:
		n = algebra.Of(pattern.Action, m.pattern)
		if m.fold {
			n = n.Fold()
		}
	case mPrincipal:
		n = algebra.Of(pattern.Principal, m.pattern)
	case mPath:
		n = pathMatcher(m.pattern, m.fold)
	case mCommand:
		n = commandMatcher(m.pattern, m.fold)
	case mHost:
		n = hostMatcher(m.pattern, m.fold)
	case mEnv:
		n = envMatcher(m.pattern, m.fold)
	case mMCPTool:
		n = mcpToolMatcher(m.pattern, m.fold)
	case mMCPResource:
		n = mcpResourceMatcher(m.pattern)
	}
	actual, _ := c.m.LoadOrStore(m, n)
	return actual.(*algebra.NFA)
}

// grammar is the pattern grammar of the matcher's pattern.
func (m matcher) grammar() pattern.Kind {
	return [...]pattern.Kind{mAction: pattern.Action, mPrincipal: pattern.Principal, mPath: pattern.Path, mCommand: pattern.Command,
		mHost: pattern.Host, mEnv: pattern.Env, mMCPTool: pattern.MCP, mMCPResource: pattern.MCPResource}[m.kind]
}

// covers reports that every string b accepts, a accepts: a structural
// proof (pattern.Covers), used only to drop work whose result is known,
// never to answer. A case-sensitive pattern is within a folded one when
// its lowercase is: lowercasing a string that matches a glob yields one
// that matches the lowercased glob.
func covers(a, b matcher) bool {
	if a.kind != b.kind || (b.fold && !a.fold) {
		return false
	}
	if a.kind == mPath && strings.HasPrefix(a.pattern, "/") != strings.HasPrefix(b.pattern, "/") {
		return false
	}
	bp := b.pattern
	if a.fold && !b.fold {
		bp = strings.ToLower(bp)
	}
	return pattern.Covers(a.grammar(), a.pattern, bp)
}

// minfo is a matcher with what the search's pruning reads of it,
// computed once: its literal prefix, and its anchoring class and prefix
// (prefixOf).
type minfo struct {
	matcher
	lp, class, lower string
	// A host pattern's host part as a suffix of the hosts it matches
	// (".example.com" for "*.example.com", the host itself when exact),
	// and its port ("" for any); hostAny for "*".
	hostSuffix, port string
	hostAny          bool
}

func newInfo(m matcher) *minfo {
	in := &minfo{matcher: m, lp: pattern.LiteralPrefix(m.grammar(), m.pattern)}
	in.class, in.lower = m.prefixOf()
	if m.kind == mHost {
		if m.pattern == "*" {
			in.hostAny = true
		} else {
			h, port, _ := pattern.SplitHostPort(strings.ToLower(m.pattern))
			in.hostSuffix, in.port = strings.TrimPrefix(h, "*"), port
		}
	}
	return in
}

// compatible reports whether two matchers of one class may accept one
// string: their prefixes (and, for hosts, their host suffixes and ports)
// must agree.
func compatible(a, b *minfo) bool {
	if !prefixCompatible(a.lower, b.lower) {
		return false
	}
	if a.kind == mHost && !a.hostAny && !b.hostAny {
		if a.port != "" && b.port != "" && a.port != b.port {
			return false
		}
		return strings.HasSuffix(a.hostSuffix, b.hostSuffix) || strings.HasSuffix(b.hostSuffix, a.hostSuffix)
	}
	return true
}

// term is one automaton of a condition: a rule's matcher, or an automaton
// of its own (a domain, a property's pattern).
type term struct {
	m *minfo
	n *algebra.NFA
}

func (t term) nfa(c *cache) *algebra.NFA {
	if t.m != nil {
		return c.nfa(t.m.matcher)
	}
	return t.n
}

func mt(m matcher) term      { return term{m: newInfo(m)} }
func nt(n *algebra.NFA) term { return term{n: n} }
func terms(rs []*rule) []term {
	out := make([]term, len(rs))
	for i, r := range rs {
		out[i] = term{m: r.info()}
	}
	return out
}

// coverIndex finds, among matchers, one that covers a given matcher,
// trying only those whose literal prefix is a prefix of its own (no other
// can cover it).
type coverIndex struct {
	byPrefix map[string][]matcher
	memo     map[*minfo]bool
}

func newCoverIndex(ts []term) *coverIndex {
	ix := &coverIndex{byPrefix: map[string][]matcher{}, memo: map[*minfo]bool{}}
	for _, t := range ts {
		if t.m != nil {
			ix.byPrefix[t.m.lp] = append(ix.byPrefix[t.m.lp], t.m.matcher)
		}
	}
	return ix
}

func (ix *coverIndex) covered(mi *minfo) bool {
	if len(ix.byPrefix) == 0 {
		return false
	}
	if v, ok := ix.memo[mi]; ok {
		return v
	}
	v := ix.lookup(mi)
	ix.memo[mi] = v
	return v
}

func (ix *coverIndex) lookup(mi *minfo) bool {
	m := mi.matcher
	lp := mi.lp
	if m.fold {
		lp = strings.ToLower(lp)
	}
	for i := 0; i <= len(lp); i++ {
		for _, c := range ix.byPrefix[lp[:i]] {
			if covers(c, m) {
				return true
			}
		}
	}
	// A folded cover's prefix is lowercase: try the lowercased prefix too.
	if low := strings.ToLower(lp); low != lp {
		for i := 0; i <= len(low); i++ {
			for _, c := range ix.byPrefix[low[:i]] {
				if covers(c, m) {
					return true
				}
			}
		}
	}
	return false
}

// prefixOf is a matcher's literal prefix, lowercased (so that it bounds
// what a folded matcher accepts too), and its anchoring class: matchers
// of different kinds, or a relative and an absolute path pattern, can
// accept one string whatever their prefixes.
func (m matcher) prefixOf() (class string, prefix string) {
	class = string(rune('0' + m.kind))
	if m.kind == mPath && !strings.HasPrefix(m.pattern, "/") {
		class += "rel"
	}
	return class, strings.ToLower(pattern.LiteralPrefix(m.grammar(), m.pattern))
}

// prefixCompatible reports whether one prefix extends the other: two
// matchers of one class whose prefixes do not accept no string in common.
func prefixCompatible(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }

// anchors summarize a group of required terms by their prefixes, so that
// a term no member of the group can share a string with is dropped before
// its automaton is built: a witness must be accepted by a member.
type anchors struct {
	open    bool                // a member whose strings cannot be bounded
	members map[string][]*minfo // by class
}

func newAnchors(g []term) anchors {
	a := anchors{members: map[string][]*minfo{}}
	for _, t := range g {
		if t.m == nil {
			a.open = true
			continue
		}
		a.members[t.m.class] = append(a.members[t.m.class], t.m)
	}
	return a
}

// excludes reports that no member of the group accepts a string m
// accepts.
func (a anchors) excludes(m *minfo) bool {
	if a.open || len(a.members) != 1 {
		return false // members of several classes: not bounded here
	}
	ms, ok := a.members[m.class]
	if !ok {
		return false
	}
	for _, q := range ms {
		if compatible(m, q) {
			return false
		}
	}
	return true
}
