package normalize

import (
	"bytes"
	"encoding/json"
	"slices"
)

// fastSchema is an argument schema of the shape most descriptors use,
// checked without the general JSON Schema validator: an object whose
// properties each have one simple type, a required list, and
// additionalProperties true or false. It only ever accepts: anything it
// rejects goes to the general validator, which decides and words the
// error. compileFastSchema returns nil for every schema it does not
// understand completely, and those always take the general path.
// TestFastSchemaMatchesValidator and FuzzFastSchema check that it accepts
// exactly what the general validator accepts.
type fastSchema struct {
	props    map[string]jsonKind
	required []string
	closed   bool // additionalProperties: false
}

// jsonKind is a JSON Schema simple type the fast path checks.
type jsonKind uint8

const (
	kindString jsonKind = iota + 1
	kindObject
	kindArray
	kindBoolean
	kindNull
)

var fastKinds = map[string]jsonKind{
	"string": kindString, "object": kindObject, "array": kindArray, "boolean": kindBoolean, "null": kindNull,
}

// compileFastSchema returns the fast form of a draft 2020-12 schema, or
// nil. It accepts only these members, with these values (anything else,
// including numeric types, whose integer rules are subtle, is nil):
//
//	root:     "type": "object" (required), "properties", "required",
//	          "additionalProperties": true|false, "title", "description"
//	property: "type": one of fastKinds (required), "title", "description"
func compileFastSchema(raw []byte) *fastSchema {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil || dec.More() {
		return nil
	}
	root, ok := doc.(map[string]any)
	if !ok || root["type"] != "object" {
		return nil
	}
	f := &fastSchema{props: map[string]jsonKind{}}
	for k, v := range root {
		switch k {
		case "type":
		case "title", "description":
			if _, ok := v.(string); !ok {
				return nil
			}
		case "additionalProperties":
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			f.closed = !b
		case "required":
			list, ok := v.([]any)
			if !ok {
				return nil
			}
			for _, r := range list {
				name, ok := r.(string)
				if !ok || slices.Contains(f.required, name) {
					return nil // the meta-schema wants unique names
				}
				f.required = append(f.required, name)
			}
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			for name, p := range props {
				kind := propertyKind(p)
				if kind == 0 {
					return nil
				}
				f.props[name] = kind
			}
		default:
			return nil
		}
	}
	return f
}

// propertyKind is the kind of a property schema {"type": <simple type>}
// (with annotations), or 0.
func propertyKind(p any) jsonKind {
	m, ok := p.(map[string]any)
	if !ok {
		return 0
	}
	var kind jsonKind
	for k, v := range m {
		switch k {
		case "type":
			s, ok := v.(string)
			if !ok {
				return 0
			}
			kind = fastKinds[s]
		case "title", "description":
			if _, ok := v.(string); !ok {
				return 0
			}
		default:
			return 0
		}
	}
	return kind
}

// accepts reports whether args (decoded JSON: nil, bool, string,
// json.Number, []any, map[string]any) certainly satisfy the schema. False
// means "ask the general validator", not "invalid".
func (f *fastSchema) accepts(args map[string]any) bool {
	if args == nil {
		return false
	}
	for _, name := range f.required {
		if _, ok := args[name]; !ok {
			return false
		}
	}
	for k, v := range args {
		kind, ok := f.props[k]
		if !ok {
			if f.closed {
				return false
			}
			continue
		}
		if !kind.matches(v) {
			return false
		}
	}
	return true
}

func (k jsonKind) matches(v any) bool {
	switch v.(type) {
	case string:
		return k == kindString
	case map[string]any:
		return k == kindObject
	case []any:
		return k == kindArray
	case bool:
		return k == kindBoolean
	case nil:
		return k == kindNull
	}
	return false // json.Number or anything unexpected: the general path
}
