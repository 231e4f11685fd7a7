package executor

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// cloneDirect is cloneJSON's result for the values it can copy without
// the JSON round trip: it returns exactly what json.Marshal followed by a
// UseNumber decode returns, or ok=false for anything it is not sure of (a
// Go type other than the ones below, invalid UTF-8 that Marshal would
// rewrite, a number Marshal would refuse, nesting deeper than
// maxCloneDepth, which also stops cycles), and then the round trip runs.
// TestCloneDirectMatchesRoundTrip and FuzzCloneJSON check the equivalence.
func cloneDirect(m map[string]any) (map[string]any, bool) {
	v, ok := cloneValue(m, 0)
	if !ok {
		return nil, false
	}
	return v.(map[string]any), true
}

// maxCloneDepth bounds cloneValue's recursion; deeper values (or cycles)
// take the round trip, which reports cycles as errors.
const maxCloneDepth = 64

func cloneValue(v any, depth int) (any, bool) {
	if depth > maxCloneDepth {
		return nil, false
	}
	switch v := v.(type) {
	case nil:
		return nil, true
	case bool:
		return v, true
	case string:
		if !utf8.ValidString(v) {
			return nil, false // Marshal replaces invalid bytes
		}
		return v, true
	case json.Number:
		if v == "" {
			return json.Number("0"), true // Marshal writes an empty Number as 0
		}
		if !validNumber(string(v)) {
			return nil, false // Marshal refuses it
		}
		return v, true
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, false
		}
		return json.Number(formatFloatJSON(v)), true
	case int:
		return json.Number(strconv.FormatInt(int64(v), 10)), true
	case int64:
		return json.Number(strconv.FormatInt(v, 10)), true
	case []any:
		if v == nil {
			return nil, true // null
		}
		out := make([]any, len(v))
		for i, e := range v {
			c, ok := cloneValue(e, depth+1)
			if !ok {
				return nil, false
			}
			out[i] = c
		}
		return out, true
	case map[string]any:
		if v == nil {
			return nil, true // null
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			if !utf8.ValidString(k) {
				return nil, false // Marshal replaces invalid bytes (keys may then collide)
			}
			c, ok := cloneValue(e, depth+1)
			if !ok {
				return nil, false
			}
			out[k] = c
		}
		return out, true
	}
	return nil, false
}

// formatFloatJSON formats f as encoding/json does (ES6 number to string).
func formatFloatJSON(f float64) string {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(make([]byte, 0, 32), f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json does.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}

// validNumber reports whether s is a JSON number (RFC 8259 §6), the check
// json.Marshal applies to a json.Number.
func validNumber(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	switch {
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		s = s[1:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	default:
		return false
	}
	if len(s) >= 2 && s[0] == '.' && '0' <= s[1] && s[1] <= '9' {
		s = s[2:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s[0] == '+' || s[0] == '-' {
			s = s[1:]
			if s == "" {
				return false
			}
		}
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	return s == ""
}
