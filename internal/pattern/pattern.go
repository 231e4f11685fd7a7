// Package pattern defines the grammars of polc's patterns and decides, for
// each, whether one pattern covers another (every string the child matches,
// the parent matches too). Coverage is conservative: Covers returning false
// means "not proven", which the compiler treats as an expansion.
//
// Grammars (docs/policies.md "Pattern grammars"):
//
//   - Action:    an action id glob, [A-Za-z0-9_.-] plus '*' and '?'.
//   - Path:      '/'-separated segments, absolute or workspace-relative;
//     '*' and '?' within a segment, '**' alone as a segment (zero or
//     more whole segments); no empty, '.' or '..' segments.
//   - Command:   space-separated argv tokens (globs within a token); a
//     trailing '*' token matches zero or more remaining tokens.
//   - Host:      '*' (any host), or host[:port] where host is exact or
//     starts with '*.' (one or more labels); lowercase; a missing port
//     matches any port.
//   - MCP:       server/tool, each a glob segment.
//   - MCPResource: server/resource, the resource a '/'-separated URI
//     path whose segments may be empty (file:///x) but not '.' or '..';
//     '**' as in paths.
//   - Env:       environment variable name glob.
//   - Namespace: secret namespace, '/'-separated glob segments; "**" as a
//     whole segment matches zero or more segments (as in paths).
//   - Principal: principal or tenant id glob (no whitespace).
//   - Qualified: <action>:<target>, the target in the grammar of the
//     action's target kind (TargetKindOf).
//
// Within a segment or token, '*' matches any run of characters and '?' one
// character; there are no classes, braces or escapes.
package pattern

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind names a pattern grammar.
type Kind string

// Pattern grammars.
const (
	Action  Kind = "action"
	Path    Kind = "path"
	Command Kind = "command"
	Host    Kind = "host"
	MCP     Kind = "mcp"
	// MCPResource is server/resource where the resource is a URI-like
	// path: '/'-separated segments (empty ones allowed, as in file:///x,
	// so a leading '/' is too; '.' and '..' are not), '*' and '?' within
	// a segment and '**' for zero or more segments.
	MCPResource Kind = "mcp_resource"
	Env         Kind = "env"
	Namespace   Kind = "namespace"
	Principal   Kind = "principal"
)

// TargetKindOf returns the grammar of the target of a qualified action
// pattern whose action part is action, or "" if that action has no target.
func TargetKindOf(action string) Kind {
	switch action {
	case "bash":
		return Command
	case "read_file", "write_file", "edit_file":
		return Path
	case "http_get":
		return Host
	case "mcp":
		return MCP
	}
	return ""
}

// Validate checks p against the grammar of kind k. Every grammar is
// text: valid UTF-8 without NUL. The value a pattern is matched against
// never holds either (requests holding them are refused before any
// engine), and the engines would read them differently: OPA sees U+FFFD
// for invalid UTF-8, and the native command matcher joins argv words
// with NUL (ArgvSep).
func Validate(k Kind, p string) error {
	if p == "" {
		return errors.New("empty pattern")
	}
	if !utf8.ValidString(p) {
		return errors.New("invalid UTF-8 in pattern")
	}
	if strings.ContainsRune(p, 0) {
		return errors.New("NUL in pattern")
	}
	switch k {
	case Action:
		if action, _, ok := strings.Cut(p, ":"); ok {
			// Not "character ':' not allowed": the author meant a
			// qualified action, valid only where targets are.
			return fmt.Errorf("an action id pattern has no target; qualified actions (%s:<target>) are for deny and approval patterns, and the target's own section (filesystem, network, subprocess, mcp) allows it", action)
		}
		return validChars(p, isActionChar, "an action id pattern")
	case Path:
		return validatePath(p)
	case Command:
		return validateCommand(p)
	case Host:
		return validateHost(p)
	case MCP:
		server, tool, ok := strings.Cut(p, "/")
		if !ok || strings.Contains(tool, "/") {
			return errors.New("want <server>/<tool>")
		}
		if err := validChars(server, isNameChar, "an MCP server pattern"); err != nil {
			return err
		}
		return validChars(tool, isNameChar, "an MCP tool pattern")
	case MCPResource:
		server, res, ok := strings.Cut(p, "/")
		if !ok || res == "" {
			return errors.New("want <server>/<resource>")
		}
		if err := validChars(server, isNameChar, "an MCP server pattern"); err != nil {
			return err
		}
		if strings.ContainsAny(res, " \t\r\n") {
			return errors.New("whitespace in MCP resource pattern")
		}
		for seg := range strings.SplitSeq(res, "/") {
			switch {
			case seg == "." || seg == "..":
				// Matching is literal, so such a pattern matches only a
				// resource that names its way out of (or around) a
				// directory, which a server may resolve elsewhere: never
				// what an author means.
				return fmt.Errorf("resource segment %q; patterns are clean paths", seg)
			case seg != "**" && strings.Contains(seg, "**"):
				return errors.New("'**' must be a whole resource segment")
			}
		}
		return nil
	case Env:
		return validChars(p, func(r rune) bool { return r == '_' || isAlnum(r) || isGlob(r) }, "an environment variable pattern")
	case Namespace:
		for seg := range strings.SplitSeq(p, "/") {
			if seg == "" {
				return errors.New("empty namespace segment")
			}
			if err := validChars(seg, isNameChar, "a secret namespace pattern"); err != nil {
				return err
			}
			if seg != "**" && strings.Contains(seg, "**") {
				return errors.New("'**' must be a whole namespace segment")
			}
		}
		return nil
	case Principal:
		if strings.ContainsAny(p, " \t\r\n") {
			return errors.New("whitespace in principal or tenant pattern")
		}
		return nil
	}
	return fmt.Errorf("unknown pattern kind %q", k)
}

// ValidateQualified checks an action pattern that may be qualified
// (<action>:<target>) and returns the action part, the target kind and the
// target ("" and "" when unqualified).
func ValidateQualified(p string) (action string, tk Kind, target string, err error) {
	action, target, qualified := strings.Cut(p, ":")
	if err := Validate(Action, action); err != nil {
		return "", "", "", err
	}
	if !qualified {
		return action, "", "", nil
	}
	tk = TargetKindOf(action)
	if tk == "" {
		return "", "", "", fmt.Errorf("action %q has no target to qualify; qualified actions are bash:<command>, read_file|write_file|edit_file:<path>, http_get:<host>, mcp:<server>/<tool>", action)
	}
	if err := Validate(tk, target); err != nil {
		return "", "", "", fmt.Errorf("target of %s: %w", action, err)
	}
	return action, tk, target, nil
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
func isGlob(r rune) bool       { return r == '*' || r == '?' }
func isActionChar(r rune) bool { return isAlnum(r) || isGlob(r) || r == '_' || r == '-' || r == '.' }
func isNameChar(r rune) bool   { return isActionChar(r) || r == '@' || r == '+' || r == '~' }

func validChars(s string, ok func(rune) bool, what string) error {
	if s == "" {
		return fmt.Errorf("empty %s", what)
	}
	for _, r := range s {
		if !ok(r) {
			return fmt.Errorf("character %q not allowed in %s", r, what)
		}
	}
	return nil
}

func validatePath(p string) error {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		return nil // "/" is the file system root
	}
	for seg := range strings.SplitSeq(rel, "/") {
		switch {
		case seg == "":
			return errors.New("empty path segment (double or trailing '/')")
		case seg == "." || seg == "..":
			return fmt.Errorf("path segment %q; patterns are clean paths", seg)
		case seg != "**" && strings.Contains(seg, "**"):
			return errors.New("'**' must be a whole path segment")
		case strings.ContainsRune(seg, 0):
			return errors.New("NUL in path pattern")
		}
	}
	return nil
}

func validateCommand(p string) error {
	if strings.TrimSpace(p) != p || strings.Contains(p, "  ") || strings.ContainsAny(p, "\t\r\n") {
		return errors.New("command patterns are tokens separated by single spaces")
	}
	return nil
}

func validateHost(p string) error {
	if p == "*" {
		return nil
	}
	if strings.Contains(p, "://") {
		// Split as host:port, "https://x" is host "https" with port
		// "//x": say what the author wrote instead.
		return urlNotHost(p)
	}
	host, port, err := SplitHostPort(p)
	if err != nil {
		return err
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return fmt.Errorf("invalid port %q", port)
		}
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") || len(host) < 3 {
			return errors.New("invalid bracketed IPv6 literal")
		}
		for _, r := range host[1 : len(host)-1] {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r == ':' || r == '.') {
				return fmt.Errorf("character %q not allowed in an IPv6 literal (lowercase hex)", r)
			}
		}
		return nil
	}
	name := strings.TrimPrefix(host, "*.")
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return errors.New("empty host label")
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				if r >= 'A' && r <= 'Z' {
					return errors.New("host patterns must be lowercase (hosts are normalized to lowercase)")
				}
				return fmt.Errorf("character %q not allowed in a host; only a leading '*.' is a wildcard", r)
			}
		}
	}
	return nil
}

// urlNotHost is the error for a URL where a host pattern is expected,
// suggesting the host[:port] the URL reaches when it has one.
func urlNotHost(p string) error {
	// The caller names p: the message does not repeat it.
	const want = "a URL, not a host pattern: write host[:port], without scheme or path"
	// Parsed by hand, not with net/url: certverify links this package
	// (through snapshot) and may link nothing of the network.
	scheme, rest, _ := strings.Cut(p, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	host, port, err := SplitHostPort(rest)
	if err != nil || host == "" {
		return errors.New(want)
	}
	host = strings.ToLower(host) // an IPv6 host keeps its brackets
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(scheme)]
	}
	if port == "" {
		return fmt.Errorf("%s (here %q)", want, host)
	}
	return fmt.Errorf("%s (here %q, or %q for any port)", want, host+":"+port, host)
}

// SplitHostPort splits "host", "host:port", "[v6]" or "[v6]:port".
func SplitHostPort(p string) (host, port string, err error) {
	if strings.HasPrefix(p, "[") {
		end := strings.IndexByte(p, ']')
		if end < 0 {
			return "", "", errors.New("unterminated '['")
		}
		host, rest := p[:end+1], p[end+1:]
		if rest == "" {
			return host, "", nil
		}
		if rest[0] != ':' || len(rest) == 1 {
			return "", "", errors.New("want [ipv6]:port")
		}
		return host, rest[1:], nil
	}
	host, port, ok := strings.Cut(p, ":")
	if ok && (port == "" || strings.Contains(port, ":")) {
		return "", "", errors.New("want host[:port]")
	}
	if host == "" {
		return "", "", errors.New("empty host")
	}
	return host, port, nil
}

// MatchGlob reports whether s matches the single-segment glob p, where '*'
// matches any run of characters (including '/' and ':') and '?' exactly one.
// It is used for gate selectors over rule ids.
func MatchGlob(p, s string) bool {
	pr, sr := []rune(p), []rune(s)
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(sr) {
		switch {
		case pi < len(pr) && pr[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(pr) && (pr[pi] == '?' || pr[pi] == sr[si]):
			pi++
			si++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(pr) && pr[pi] == '*' {
		pi++
	}
	return pi == len(pr)
}

// LiteralPrefix returns the characters of p before its first wildcard,
// minus a trailing separator. A pattern can only cover another whose literal
// prefix extends its own; the separator goes because "/a/**" covers "/a" and
// "git *" covers "git".
func LiteralPrefix(k Kind, p string) string {
	i := strings.IndexAny(p, "*?")
	if i < 0 {
		i = len(p)
	}
	lp := p[:i]
	switch k {
	case Path, MCPResource:
		lp = strings.TrimSuffix(lp, "/")
	case Command:
		lp = strings.TrimSuffix(lp, " ")
	}
	return lp
}
