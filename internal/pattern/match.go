package pattern

import (
	"regexp"
	"strings"
)

// ArgvSep joins argv tokens into the single string that command patterns
// match: NUL cannot occur inside an argument.
const ArgvSep = "\x00"

// Match is the reference semantics of every grammar: a direct, obviously
// correct (and slow) matcher. s is the normalized value:
//
//   - Path: a clean absolute path for absolute patterns; for relative
//     patterns the path relative to the workspace ("" is the workspace).
//   - Command: argv joined by ArgvSep.
//   - Host: "host:port".
//   - MCP: "server/tool"; MCPResource: "server/resource".
//   - others: the id itself.
//
// Callers that match case-insensitively lowercase both sides. The fast
// matchers of the evaluator and the RE2 expressions of the Rego bundle are
// tested against Match.
func Match(k Kind, p, s string) bool {
	switch k {
	case Path:
		return matchSegments(strings.Split(p, "/"), strings.Split(s, "/"), true)
	case Command:
		return matchTokens(strings.Split(p, " "), strings.Split(s, ArgvSep))
	case Host:
		return matchHost(p, s)
	case MCP:
		return matchSegments(strings.Split(p, "/"), strings.Split(s, "/"), false)
	case Namespace:
		return matchSegments(strings.Split(p, "/"), strings.Split(s, "/"), true)
	case MCPResource:
		ps, pr, _ := strings.Cut(p, "/")
		ss, sr, ok := strings.Cut(s, "/")
		return ok && matchGlob(ps, ss) && matchSegments(strings.Split(pr, "/"), strings.Split(sr, "/"), true)
	}
	return matchGlob(p, s)
}

func matchGlob(p, s string) bool {
	pr, sr := []rune(p), []rune(s)
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		if i == len(pr) {
			return j == len(sr)
		}
		switch pr[i] {
		case '*':
			for k := j; k <= len(sr); k++ {
				if rec(i+1, k) {
					return true
				}
			}
			return false
		case '?':
			return j < len(sr) && rec(i+1, j+1)
		}
		return j < len(sr) && sr[j] == pr[i] && rec(i+1, j+1)
	}
	return rec(0, 0)
}

func matchSegments(p, s []string, doubleStar bool) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	if doubleStar && p[0] == "**" {
		for i := 0; i <= len(s); i++ {
			if matchSegments(p[1:], s[i:], true) {
				return true
			}
		}
		return false
	}
	return len(s) > 0 && matchGlob(p[0], s[0]) && matchSegments(p[1:], s[1:], doubleStar)
}

func matchTokens(p, s []string) bool {
	if len(p) == 1 && p[0] == "*" {
		return true
	}
	if len(p) == 0 {
		return len(s) == 0
	}
	return len(s) > 0 && matchGlob(p[0], s[0]) && matchTokens(p[1:], s[1:])
}

func matchHost(p, s string) bool {
	if p == "*" {
		return true
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 || !Digits(s[i+1:]) {
		return false
	}
	sh, sp := s[:i], s[i+1:]
	ph, pp, _ := SplitHostPort(p)
	if pp != "" && pp != sp {
		return false
	}
	if suffix, ok := strings.CutPrefix(ph, "*."); ok {
		prefix, ok := strings.CutSuffix(sh, "."+suffix)
		return ok && ValidLabels(prefix)
	}
	return sh == ph
}

// ValidLabels reports whether s is one or more non-empty DNS-style labels
// separated by '.', without ':', '[' or ']' — what a leading "*." matches.
func ValidLabels(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	return !strings.ContainsAny(s, ":[]")
}

// Digits reports whether s is a non-empty run of ASCII digits.
func Digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Regexp lowers a valid pattern of grammar k to an anchored RE2 expression
// with the semantics of Match (Go's regexp and OPA's regex.match share RE2).
// The (?s) flag lets '.' match a newline as Match's '*' and '?' do: a
// value holding one (a principal, an environment name) must not be judged
// otherwise by the Rego bundle.
func Regexp(k Kind, p string) string {
	return "(?s)" + regexpBody(k, p)
}

func regexpBody(k Kind, p string) string {
	switch k {
	case Path:
		if strings.HasPrefix(p, "/") {
			segs := strings.Split(p[1:], "/")
			if p == "/" {
				return "^/$"
			}
			// Segments may be empty so that "**" behaves as in Match on any
			// string, clean or not ("/**" matches "/", one empty segment).
			return "^" + segmentsRegexp(segs, "[^/]*", true) + "$"
		}
		return "^" + segmentsRegexp(strings.Split(p, "/"), "[^/]*", false) + "$"
	case Command:
		if p == "*" {
			return "^(?s:.*)$"
		}
		toks := strings.Split(p, " ")
		var b strings.Builder
		b.WriteString("^")
		for i, t := range toks {
			if i == len(toks)-1 && t == "*" && i > 0 {
				b.WriteString(`(?:\x00[^\x00]*)*`)
				break
			}
			if i > 0 {
				b.WriteString(`\x00`)
			}
			b.WriteString(globRegexp(t, `[^\x00]`))
		}
		b.WriteString("$")
		return b.String()
	case Host:
		if p == "*" {
			return "^(?s:.*)$"
		}
		h, port, _ := SplitHostPort(p)
		var b strings.Builder
		b.WriteString("^")
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			b.WriteString(`(?:[^.:\[\]]+\.)+` + regexp.QuoteMeta(suffix))
		} else {
			b.WriteString(regexp.QuoteMeta(h))
		}
		if port != "" {
			b.WriteString(":" + port)
		} else {
			b.WriteString(":[0-9]+")
		}
		b.WriteString("$")
		return b.String()
	case Namespace:
		return "^" + segmentsRegexp(strings.Split(p, "/"), "[^/]*", false) + "$"
	case MCP:
		segs := strings.Split(p, "/")
		parts := make([]string, len(segs))
		for i, s := range segs {
			parts[i] = globRegexp(s, "[^/]")
		}
		return "^" + strings.Join(parts, "/") + "$"
	case MCPResource:
		server, res, _ := strings.Cut(p, "/")
		return "^" + globRegexp(server, "[^/]") + "/" + segmentsRegexp(strings.Split(res, "/"), "[^/]*", false) + "$"
	}
	return "^" + globRegexp(p, ".") + "$"
}

// segmentsRegexp lowers '/'-separated segments where "**" stands for zero or
// more whole segments of the form seg. With absolute, every segment is
// preceded by '/'; otherwise the first is not.
func segmentsRegexp(segs []string, seg string, absolute bool) string {
	var b strings.Builder
	first := !absolute // the next literal segment needs no leading '/'
	for i, s := range segs {
		if s == "**" {
			switch {
			case !first:
				b.WriteString("(?:/" + seg + ")*")
			case i == len(segs)-1:
				b.WriteString("(?:" + seg + "(?:/" + seg + ")*)?")
			default:
				b.WriteString("(?:" + seg + "/)*")
			}
			continue
		}
		if !first {
			b.WriteString("/")
		}
		b.WriteString(globRegexp(s, "[^/]"))
		first = false
	}
	return b.String()
}

// globRegexp lowers a glob where '?' is one char of class and '*' any run.
func globRegexp(g, class string) string {
	var b strings.Builder
	for _, r := range g {
		switch r {
		case '*':
			b.WriteString(class + "*")
		case '?':
			b.WriteString(class)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return b.String()
}
