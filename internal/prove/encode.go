package prove

import (
	"strings"

	"polc.dev/polc/internal/algebra"
	"polc.dev/polc/internal/pattern"
)

// A request is decided on a few independent parts: its principal, its
// tenant, its action id, and (in the requests this package reasons about,
// see shape) one target value: a path, an argv, a host, an environment
// name or an MCP target. Each part is a string, and every rule that reads
// a part is an automaton over that string's encoding:
//
//   - principal, tenant, action: the string itself;
//   - path: 'O' then the path, for a path outside the workspace (the
//     workspace is then chosen so that no relative rule applies: see
//     pathMatcher); 'R' then the path relative to the workspace "/"; 'U',
//     the workspace, NUL and the path relative to it ("" for the workspace
//     itself);
//   - argv: the words joined by NUL (pattern.ArgvSep);
//   - host: "host:port" as the normalizer writes it;
//   - environment name: the name;
//   - MCP: "server/tool", then NUL and the resource when there is one.
//
// NUL separates because no request text holds one (requests holding NUL
// are refused before any engine).
const (
	sep       = '\x00'
	outsideWS = 'O'
	rootWS    = 'R'
	underWS   = 'U'
)

var (
	nul      = algebra.One(algebra.Lit(sep))
	text     = algebra.Star(algebra.Not(sep))      // any text
	textPlus = algebra.Plus(algebra.Not(sep))      // any non-empty text
	seg      = algebra.Plus(algebra.Not('/', sep)) // a path segment, '.' and '..' included
)

func lit(s string) *algebra.NFA { return algebra.Literal(s) }

// dotSegs are the segments a clean path never has.
var dotSegs = algebra.Union(lit("."), lit(".."))

// outsideDomain is the encoded paths outside the workspace alone: what an
// absolute pattern matches depends on the path alone, so a question about
// absolute patterns only is decided there, with no workspace to search.
func outsideDomain() (require *algebra.NFA, forbid []*algebra.NFA) {
	abs := algebra.Concat(lit("/"), seg, algebra.Repeat(algebra.Concat(lit("/"), seg)))
	_, forbid = pathDomain(false)
	return algebra.Concat(lit(string(outsideWS)), algebra.Union(lit("/"), abs)), forbid
}

// pathDomain is every encoded (workspace, path) pair a request can hold:
// clean absolute paths and workspaces (without root, none under the
// workspace "/"). Its Forbid part rules out the "." and ".." segments.
func pathDomain(root bool) (require *algebra.NFA, forbid []*algebra.NFA) {
	abs := algebra.Concat(lit("/"), seg, algebra.Repeat(algebra.Concat(lit("/"), seg)))
	absOrRoot := algebra.Union(lit("/"), abs)
	rel := algebra.Opt(algebra.Concat(seg, algebra.Repeat(algebra.Concat(lit("/"), seg))))
	cases := []*algebra.NFA{
		algebra.Concat(lit(string(outsideWS)), absOrRoot),
		algebra.Concat(lit(string(underWS)), abs, nul, rel),
	}
	if root {
		cases = append(cases, algebra.Concat(lit(string(rootWS)), rel))
	}
	require = algebra.Union(cases...)
	// A "." or ".." segment anywhere: after a marker, '/', or NUL and
	// before '/', NUL or the end.
	before := algebra.Union(lit(string(outsideWS)+"/"), lit(string(rootWS)), lit(string(underWS)+"/"))
	anyText := algebra.Star(algebra.Any)
	dot := algebra.Union(
		algebra.Concat(before, dotSegs, algebra.Opt(algebra.Concat(algebra.One(algebra.Lit('/', sep)), anyText))),
		algebra.Concat(algebra.One(algebra.Lit(outsideWS, rootWS, underWS)), anyText, algebra.One(algebra.Lit('/', sep)), dotSegs, algebra.Opt(algebra.Concat(algebra.One(algebra.Lit('/', sep)), anyText))),
	)
	return require, []*algebra.NFA{dot}
}

// pathMatcher is the automaton of the encoded (workspace, path) pairs a
// path pattern matches as the engines match it: an absolute pattern
// against the path, a relative one against the path relative to the
// workspace (never one outside it); fold lowercases both first, as deny
// and approval patterns match.
//
// A path outside the workspace is encoded without the workspace: relative
// patterns match none. That is exact because the workspace is the
// request's to choose: when the lowercased path falls under the
// lowercased workspace although the path is not under the workspace
// (/W and /w/x), every answer is also reached by a request with the
// workspace spelled as the path spells it (more grants, the same
// lowercased matches), or with an unrelated one.
func pathMatcher(p string, fold bool) *algebra.NFA {
	a := algebra.Of(pattern.Path, p)
	if fold {
		a = a.Fold()
	}
	if len(p) > 0 && p[0] == '/' {
		return algebra.Union(
			algebra.Concat(lit(string(outsideWS)), a),
			algebra.Concat(lit(string(rootWS)), a.After('/')),
			algebra.Concat(lit(string(underWS)), a.Joined(sep, '/')),
		)
	}
	return algebra.Union(
		algebra.Concat(lit(string(rootWS)), a),
		algebra.Concat(lit(string(underWS)), text, nul, a),
	)
}

// argvDomain is every argv a request can hold: one or more words; a
// program path with a ".." segment is refused by the normalizer.
func argvDomain() (require *algebra.NFA, forbid []*algebra.NFA) {
	word := text
	require = algebra.Concat(word, algebra.Repeat(algebra.Concat(nul, word)))
	rest := algebra.Opt(algebra.Concat(nul, algebra.Star(algebra.Any)))
	bad := algebra.Union(
		algebra.Concat(lit("../"), text, rest),
		algebra.Concat(text, lit("/.."), algebra.Opt(algebra.Concat(lit("/"), text)), rest),
	)
	return require, []*algebra.NFA{bad}
}

func commandMatcher(p string, fold bool) *algebra.NFA {
	a := algebra.Of(pattern.Command, p)
	if fold {
		a = a.Fold()
	}
	return a
}

// hostChars are the characters a host name's labels may hold in a host
// facet: printable ASCII, lowercase, without the separators.
var hostChars = func() algebra.Class {
	var rs []rune
	for r := rune(0x21); r < 0x7f; r++ {
		switch {
		case r >= 'A' && r <= 'Z', r == ':', r == '[', r == ']', r == '/', r == '.':
			continue
		}
		rs = append(rs, r)
	}
	return algebra.Lit(rs...)
}()

// tightHostChars are the characters of the host names witnesses use.
var tightHostChars = func() algebra.Class {
	var rs []rune
	for r := 'a'; r <= 'z'; r++ {
		rs = append(rs, r)
	}
	for r := '0'; r <= '9'; r++ {
		rs = append(rs, r)
	}
	return algebra.Lit(append(rs, '-')...)
}()

// lastLabel is a host's last label that is no number: the normalizer
// refuses a name whose last label is decimal digits or "0x" and hex
// digits (an IPv4 address to the resolver); net.ParseIP takes the
// canonical addresses first.
func lastLabel(chars algebra.Class) *algebra.NFA {
	digit := algebra.Digit
	hex := algebra.Lit('0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f')
	// States: start; zero ("0"); digits (all digits); hexp ("0x" and
	// hex digits); other (accepting: no number).
	b := algebra.NewBuilder()
	start, zero, digits, hexp, other := b.State(false), b.State(false), b.State(false), b.State(false), b.State(true)
	b.Edge(start, zero, algebra.Lit('0'))
	b.Edge(start, digits, minus(digit, '0'))
	b.Edge(start, other, minusClass(chars, digit))
	b.Edge(zero, hexp, algebra.Lit('x'))
	b.Edge(zero, digits, digit)
	b.Edge(zero, other, minusClass(minusClass(chars, digit), algebra.Lit('x')))
	b.Edge(digits, digits, digit)
	b.Edge(digits, other, minusClass(chars, digit))
	b.Edge(hexp, hexp, hex)
	b.Edge(hexp, other, minusClass(chars, hex))
	b.Edge(other, other, chars)
	return b.Build(start)
}

// hostDomain is every host facet "host:port": names, IPv4 and bracketed
// IPv6 literals, ports 1 to 99999 without leading zeros (over the valid
// range: the normalizer refuses more, which confirmation finds). tight
// restricts names to letters, digits and '-', and IPv6 literals to hex
// digits and ':', what witnesses are made of.
func hostDomain(tight bool) *algebra.NFA {
	chars := hostChars
	if tight {
		chars = tightHostChars
	}
	label := algebra.Plus(chars)
	name := algebra.Concat(algebra.Repeat(algebra.Concat(label, lit("."))), lastLabel(chars))
	nz := minus(algebra.Digit, '0')
	octet := algebra.Union(lit("0"), algebra.Concat(algebra.One(nz), upTo(algebra.Digit, 2)))
	ipv4 := algebra.Concat(octet, lit("."), octet, lit("."), octet, lit("."), octet)
	v6 := algebra.Lit('0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f', ':')
	if !tight {
		v6 = algebra.Lit(append(v6.Runes, '.')...)
	}
	hosts := []*algebra.NFA{name, ipv4, algebra.Concat(lit("["), algebra.Plus(v6), lit("]"))}
	port := algebra.Concat(algebra.One(nz), upTo(algebra.Digit, 4))
	return algebra.Concat(algebra.Union(hosts...), lit(":"), port)
}

// upTo is between zero and n runes of c.
func upTo(c algebra.Class, n int) *algebra.NFA {
	out := algebra.Epsilon()
	for range n {
		out = algebra.Opt(algebra.Concat(algebra.One(c), out))
	}
	return out
}

func hostMatcher(p string, fold bool) *algebra.NFA {
	a := algebra.Of(pattern.Host, p)
	if fold {
		a = a.Fold()
	}
	return a
}

// envDomain is the environment names a request can hold: those a bash
// command assigns, declares or reads into. tight is shell identifiers
// (what a witness's NAME=x assigns); the history variables are refused.
func envDomain(tight bool) (require *algebra.NFA, forbid []*algebra.NFA) {
	if tight {
		var first []rune
		for r := 'a'; r <= 'z'; r++ {
			first = append(first, r, r-'a'+'A')
		}
		first = append(first, '_')
		rest := append(append([]rune{}, first...), '0', '1', '2', '3', '4', '5', '6', '7', '8', '9')
		require = algebra.Concat(algebra.One(algebra.Lit(first...)), algebra.Star(algebra.Lit(rest...)))
	} else {
		require = textPlus
	}
	return require, []*algebra.NFA{lit("HISTFILE"), lit("HISTFILESIZE"), lit("HISTSIZE")}
}

func envMatcher(p string, fold bool) *algebra.NFA {
	a := algebra.Of(pattern.Env, p)
	if fold {
		a = a.Fold()
	}
	return a
}

// mcpDomain is "server/tool" (neither empty nor holding '/'), then with
// resource NUL and a non-empty resource. tight resources have no '.' or
// '..' segment, '%' or '\' (the normalizer refuses dot segments as
// written, percent-decoded or with '\' as a separator).
func mcpDomain(resource, tight bool) (require *algebra.NFA, forbid []*algebra.NFA) {
	name := algebra.Plus(algebra.Not('/', sep))
	st := algebra.Concat(name, lit("/"), name)
	if !resource {
		return st, nil
	}
	res := textPlus
	if tight {
		res = algebra.Plus(algebra.Not(sep, '%', '\\'))
	}
	require = algebra.Concat(st, nul, res)
	// A dot segment of the resource as written ('/' or '\' separating).
	sepc := algebra.Lit('/', '\\')
	anyRes := algebra.Star(algebra.Not(sep))
	dot := algebra.Concat(st, nul,
		algebra.Opt(algebra.Concat(anyRes, algebra.One(sepc))), dotSegs,
		algebra.Opt(algebra.Concat(algebra.One(sepc), anyRes)))
	return require, []*algebra.NFA{dot}
}

// mcpToolMatcher matches the "server/tool" part of an MCP value.
func mcpToolMatcher(p string, fold bool) *algebra.NFA {
	a := algebra.Of(pattern.MCP, p)
	if fold {
		a = a.Fold()
	}
	return algebra.Concat(a, algebra.Opt(algebra.Concat(nul, algebra.Star(algebra.Any))))
}

// mcpResourceMatcher matches "server/resource" of an MCP value with a
// resource: the server, then (past the tool) the resource.
func mcpResourceMatcher(p string) *algebra.NFA {
	server, res, _ := strings.Cut(p, "/")
	return algebra.Concat(algebra.Glob(server, algebra.Not('/')), lit("/"), algebra.Star(algebra.Not('/', sep)), nul, algebra.Segments(res, true))
}

// actionIDChars are the characters of an action id (normalize's
// validActionID).
var actionIDChars = func() algebra.Class {
	var rs []rune
	for r := 'a'; r <= 'z'; r++ {
		rs = append(rs, r, r-'a'+'A')
	}
	for r := '0'; r <= '9'; r++ {
		rs = append(rs, r)
	}
	return algebra.Lit(append(rs, '_', '-', '.')...)
}()

// minus is c without the runes given.
func minus(c algebra.Class, rs ...rune) algebra.Class { return minusClass(c, algebra.Lit(rs...)) }

// minusClass is c \ d for a literal d.
func minusClass(c, d algebra.Class) algebra.Class {
	if d.Neg {
		panic("prove: minusClass of a negated class")
	}
	if c.Neg {
		return algebra.Not(append(append([]rune{}, c.Runes...), d.Runes...)...)
	}
	var out []rune
	for _, r := range c.Runes {
		if !d.Has(r) {
			out = append(out, r)
		}
	}
	return algebra.Lit(out...)
}
