package strictjson

import (
	"encoding/json"

	"polc.dev/polc/internal/jcs"
)

// Value decodes one I-JSON text (jcs.Check: no duplicate member names,
// valid UTF-8, no lone surrogates, numbers within a double, nesting within
// jcs.MaxDepth) into map[string]any, []any, string, json.Number, bool and
// nil, as encoding/json decodes into an any with UseNumber. The error is
// jcs.Check's *jcs.SyntaxError, with the line and column of the first
// problem.
//
// It reads data in place: encoding/json's Decoder copies its input into a
// buffer it grows by doubling (three times the input, for a 16 MiB request
// body) and its Token walk allocates every string a second time. Each
// value here is built once, and a string without escapes is one copy of
// its bytes.
func Value(data []byte) (any, error) {
	if _, err := jcs.Check(data); err != nil {
		return nil, err
	}
	b := builder{in: data}
	return b.value(), nil
}

// builder decodes input that jcs.Check accepted: it checks nothing.
type builder struct {
	in  []byte
	pos int
}

func (b *builder) ws() {
	for b.pos < len(b.in) {
		switch b.in[b.pos] {
		case ' ', '\t', '\n', '\r':
			b.pos++
		default:
			return
		}
	}
}

func (b *builder) value() any {
	b.ws()
	switch c := b.in[b.pos]; c {
	case '{':
		b.pos++
		m := map[string]any{}
		b.ws()
		if b.in[b.pos] == '}' {
			b.pos++
			return m
		}
		for {
			b.ws()
			k := b.str()
			b.ws()
			b.pos++ // ':'
			m[k] = b.value()
			b.ws()
			c := b.in[b.pos]
			b.pos++ // ',' or '}'
			if c == '}' {
				return m
			}
		}
	case '[':
		b.pos++
		s := []any{}
		b.ws()
		if b.in[b.pos] == ']' {
			b.pos++
			return s
		}
		for {
			s = append(s, b.value())
			b.ws()
			c := b.in[b.pos]
			b.pos++ // ',' or ']'
			if c == ']' {
				return s
			}
		}
	case '"':
		return b.str()
	case 't':
		b.pos += len("true")
		return true
	case 'f':
		b.pos += len("false")
		return false
	case 'n':
		b.pos += len("null")
		return nil
	}
	start := b.pos
	for b.pos < len(b.in) {
		switch b.in[b.pos] {
		case '-', '+', '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			b.pos++
			continue
		}
		break
	}
	return json.Number(b.in[start:b.pos])
}

// str decodes the string at b.pos (its opening quote).
func (b *builder) str() string {
	start := b.pos
	b.pos++
	escaped := false
	for {
		switch b.in[b.pos] {
		case '\\':
			escaped = true
			b.pos += 2
			continue
		case '"':
			b.pos++
			if !escaped {
				return string(b.in[start+1 : b.pos-1])
			}
			// Escapes are rare in requests: encoding/json decodes them,
			// reading the string in place.
			var s string
			json.Unmarshal(b.in[start:b.pos], &s)
			return s
		}
		b.pos++
	}
}
