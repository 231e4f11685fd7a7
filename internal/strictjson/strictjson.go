// Package strictjson decodes JSON into Go structs without the leniency of
// encoding/json: every field a struct declares must be present (a missing key
// is an unset value, which polc formats never contain), no other key may be
// present, null is accepted only for pointer fields, arrays only for slices
// (never null), and numbers only where the field is numeric and integral where
// the field is an integer.
//
// Struct fields are named by their `json` tag; embedded structs without a tag
// contribute their fields, as with encoding/json. Types implementing
// json.Unmarshaler decode themselves (after the null check). The input is
// expected to have been checked for duplicate keys already (polc parsers run
// jcs.Transform first, which rejects them).
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Error names the JSON path of the first problem found, e.g.
// "compiled_rules[3].pattern: missing field".
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Decode decodes data into v, which must be a non-nil pointer.
func Decode(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("strictjson: Decode needs a non-nil pointer")
	}
	return decode(json.RawMessage(data), rv.Elem(), "")
}

// Fields returns the JSON keys a struct type declares, in declaration order.
func Fields(t reflect.Type) []string {
	var keys []string
	for _, f := range fields(t) {
		keys = append(keys, f.name)
	}
	return keys
}

type field struct {
	name  string
	index []int
}

func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
			for _, sub := range fields(sf.Type) {
				out = append(out, field{sub.name, append([]int{i}, sub.index...)})
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, field{name, []int{i}})
	}
	return out
}

// jsonSpace is the whitespace JSON allows around values (RFC 8259 §2);
// bytes.TrimSpace would also strip \v, \f and Unicode spaces, which no
// JSON reader accepts.
const jsonSpace = " \t\n\r"

func isNull(data json.RawMessage) bool {
	return bytes.Equal(bytes.Trim(data, jsonSpace), []byte("null"))
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func decode(data json.RawMessage, v reflect.Value, path string) error {
	data = bytes.Trim(data, jsonSpace)
	if len(data) == 0 {
		return &Error{path, "want a value, found no input"}
	}
	if v.Kind() == reflect.Pointer {
		if isNull(data) {
			v.SetZero()
			return nil
		}
		p := reflect.New(v.Type().Elem())
		if err := decode(data, p.Elem(), path); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	if isNull(data) {
		return &Error{path, "null where a value is required"}
	}
	if reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
		if err := v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(data); err != nil {
			return &Error{path, err.Error()}
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &obj) != nil {
			return &Error{path, "want an object"}
		}
		fs := fields(v.Type())
		for _, f := range fs {
			raw, ok := obj[f.name]
			if !ok {
				return &Error{join(path, f.name), "missing field"}
			}
			if err := decode(raw, v.FieldByIndex(f.index), join(path, f.name)); err != nil {
				return err
			}
		}
		if len(obj) != len(fs) {
			var extra []string
			for k := range obj {
				if !slices.ContainsFunc(fs, func(f field) bool { return f.name == k }) {
					extra = append(extra, k)
				}
			}
			slices.Sort(extra)
			return &Error{join(path, extra[0]), "unknown field"}
		}
		return nil
	case reflect.Slice:
		var arr []json.RawMessage
		if len(data) == 0 || data[0] != '[' || json.Unmarshal(data, &arr) != nil {
			return &Error{path, "want an array"}
		}
		s := reflect.MakeSlice(v.Type(), len(arr), len(arr))
		for i, raw := range arr {
			if err := decode(raw, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		var obj map[string]json.RawMessage
		if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &obj) != nil {
			return &Error{path, "want an object"}
		}
		m := reflect.MakeMapWithSize(v.Type(), len(obj))
		for k, raw := range obj {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := decode(raw, e, join(path, k)); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
		}
		v.Set(m)
		return nil
	case reflect.String:
		if data[0] != '"' {
			return &Error{path, "want a string"}
		}
	case reflect.Bool:
		if data[0] != 't' && data[0] != 'f' {
			return &Error{path, "want a boolean"}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if bytes.ContainsAny(data, ".eE") || (data[0] != '-' && (data[0] < '0' || data[0] > '9')) {
			return &Error{path, "want an integer"}
		}
	case reflect.Interface:
		// Arbitrary JSON: keep as decoded by encoding/json with numbers preserved.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var x any
		if err := dec.Decode(&x); err != nil {
			return &Error{path, err.Error()}
		}
		v.Set(reflect.ValueOf(&x).Elem())
		return nil
	}
	if err := json.Unmarshal(data, v.Addr().Interface()); err != nil {
		return &Error{path, Describe(err).Error()}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
