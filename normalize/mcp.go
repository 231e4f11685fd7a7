package normalize

import (
	"maps"
	"strings"
)

// MCPShorthand resolves "mcp:<server>/<tool>", shorthand for the mcp
// action with those arguments: it returns a copy of args with server and
// tool set (args itself is never written), or nil for any other action.
func MCPShorthand(action string, args map[string]any) (map[string]any, *NormalizeError) {
	rest, ok := strings.CutPrefix(action, "mcp:")
	if !ok {
		return nil, nil
	}
	server, tool, ok := strings.Cut(rest, "/")
	if !ok || server == "" || tool == "" {
		return nil, Errorf(ReasonInvalidRequest, "action %q: want mcp:<server>/<tool>", action)
	}
	args = maps.Clone(args)
	if args == nil {
		args = map[string]any{}
	}
	for _, kv := range [2][2]string{{"server", server}, {"tool", tool}} {
		if prev, dup := args[kv[0]]; dup && prev != kv[1] {
			return nil, Errorf(ReasonInvalidRequest, "action %q conflicts with argument %s=%v", action, kv[0], prev)
		}
		args[kv[0]] = kv[1]
	}
	return args, nil
}

func mcpFacets(args map[string]string, _ string, out *Normalized) *NormalizeError {
	server, tool := args["server"], args["tool"]
	if server == "" || tool == "" || strings.Contains(server, "/") || strings.Contains(tool, "/") {
		return Errorf(ReasonInvalidRequest, "mcp needs a server and a tool without '/'")
	}
	t := &MCPTarget{Server: server, Tool: tool}
	if r, ok := args["resource"]; ok {
		if r == "" {
			return Errorf(ReasonInvalidRequest, "empty mcp resource")
		}
		// Resource patterns match '/'-separated segments ("repo/*"), so
		// "repo/.." matched what was meant to be one repository's entries,
		// and a server that resolves it reaches beyond the resource judged.
		// Servers decode URIs: the segments are checked as written and as
		// percent-decoded (repeatedly: %252e), with '\' a separator too.
		if seg, ok := dotSegment(r); ok {
			return Errorf(ReasonInvalidRequest, "mcp resource %q has a %q segment (as written, or percent-decoded, or with '\\' as a separator): a server may resolve it outside the resource the policy judged", r, seg)
		}
		// The policy judges the text as written; a server opens what it
		// decodes to, which must be text too (%ff, %00: no resource the
		// policy could name).
		if err := decodedText(r); err != nil {
			return err
		}
		t.Resource = &r
	}
	out.MCP = t
	return nil
}

// dotSegment returns a "." or ".." segment of r, as written, percent-
// decoded (up to four times, for %25 within %2e) or with '\' read as '/'.
// Decoding is lenient, as many servers' is: valid %XX escapes are decoded
// and any other '%' is kept, so one malformed escape ("100%") does not
// hide the %2e%2e after it.
func dotSegment(r string) (string, bool) {
	for range 5 {
		for _, seg := range strings.FieldsFunc(r, func(c rune) bool { return c == '/' || c == '\\' }) {
			if seg == "." || seg == ".." {
				return seg, true
			}
		}
		d := percentDecode(r)
		if d == r {
			break
		}
		r = d
	}
	return "", false
}

// decodedText is the invalid_encoding error for an MCP resource whose
// percent-decoding, as dotSegment repeats it, is not text (invalid UTF-8,
// or NUL: a server in C ends the name there), or nil.
func decodedText(r string) *NormalizeError {
	written := r
	for range 5 {
		d := percentDecode(r)
		if d == r {
			return nil
		}
		if off, problem := badText(d); problem != "" {
			return Errorf(ReasonInvalidEncoding, "mcp resource %q percent-decodes to %s at byte %d", written, problem, off)
		}
		r = d
	}
	return nil
}

// percentDecode decodes the valid %XX escapes of s and keeps the rest.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
