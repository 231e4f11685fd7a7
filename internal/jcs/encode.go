package jcs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Appender is implemented by types that write their own canonical form.
type Appender interface {
	AppendCanonical(dst []byte) ([]byte, error)
}

// Append appends the canonical JSON of v to dst without an intermediate
// encoding/json round trip. It follows encoding/json's mapping of Go values
// (json tags, omitempty, embedded structs flattened, nil slices and maps as
// null, json.Number verbatim after canonicalization) and produces exactly
// Transform(json.Marshal(v)) for every value whose strings are valid UTF-8.
// Types implementing Appender encode themselves; other json.Marshaler types
// are encoded with MarshalJSON and canonicalized.
func Append(dst []byte, v any) ([]byte, error) {
	return appendAny(dst, v, 0)
}

// errInvalidUTF8 is the error for a string with no canonical form.
var errInvalidUTF8 = errors.New("jcs: invalid UTF-8 in string")

// AppendValidString appends s as a canonical JSON string, or fails when s
// is not valid UTF-8 (which has no canonical form). AppendString is the
// unchecked form for strings known to be valid.
func AppendValidString(dst []byte, s string) ([]byte, error) {
	if plainASCII(s) { // one pass for most strings
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"'), nil
	}
	if !utf8.ValidString(s) {
		return nil, errInvalidUTF8
	}
	return AppendString(dst, s), nil
}

// appendAny handles the dynamic JSON types (what encoding/json decodes
// into) without reflection, and falls back to appendValue for the rest.
func appendAny(dst []byte, v any, depth int) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return AppendValidString(dst, v)
	case bool:
		return strconv.AppendBool(dst, v), nil
	case int:
		return AppendInt(dst, int64(v)), nil
	case int64:
		return AppendInt(dst, v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("jcs: %v is not a JSON number", v)
		}
		return AppendNumber(dst, v)
	case json.Number:
		return appendJSONNumber(dst, string(v))
	case []any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		if depth++; depth > MaxDepth {
			return nil, errTooDeep
		}
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendAny(dst, e, depth); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		if depth++; depth > MaxDepth {
			return nil, errTooDeep
		}
		var small [16]string
		keys := small[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, CompareKeys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			if !utf8.ValidString(k) {
				return nil, fmt.Errorf("jcs: invalid UTF-8 in key")
			}
			dst = AppendString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendAny(dst, v[k], depth); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	}
	return appendValue(dst, reflect.ValueOf(v), depth)
}

// appendJSONNumber appends the canonical form of a json.Number. Like
// json.Marshal it writes the empty Number as 0 and refuses text that is not
// a JSON number: strconv.ParseFloat alone would also read "+1", "01",
// "1_0", "0x10" and "Inf".
func appendJSONNumber(dst []byte, s string) ([]byte, error) {
	if s == "" {
		return append(dst, '0'), nil
	}
	if !isJSONNumber(s) {
		return nil, fmt.Errorf("jcs: invalid json.Number %q", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("jcs: json.Number %q is not representable as a finite IEEE 754 double", s)
	}
	return AppendNumber(dst, f)
}

// isJSONNumber reports whether s matches RFC 8259's number grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	start := i
	switch n := digits(); {
	case n == 0, n > 1 && s[start] == '0':
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// errTooDeep refuses values nested deeper than MaxDepth, which is also
// what a cyclic value (a map or slice that contains itself) looks like:
// without the bound its encoding would never end.
var errTooDeep = fmt.Errorf("jcs: nesting deeper than %d (a cyclic value?)", MaxDepth)

// AppendInt appends n as RFC 8785 writes it: exact digits within ±2^53,
// the shortest round-tripping double beyond (what ECMAScript prints).
func AppendInt(dst []byte, n int64) []byte {
	if n > 1<<53 || n < -(1<<53) {
		b, _ := AppendNumber(dst, float64(n)) // finite: cannot fail
		return b
	}
	return strconv.AppendInt(dst, n, 10)
}

var (
	appenderType  = reflect.TypeFor[Appender]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	numberType    = reflect.TypeFor[json.Number]()
)

// AppendOmit is Append for a struct (or pointer to one) whose top-level
// members named in omit are left out; it lets a digest cover "the object
// without its digest" without building a second type.
func AppendOmit(dst []byte, v any, omit map[string]bool) ([]byte, error) {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil, fmt.Errorf("jcs: AppendOmit needs a struct, got %s", rv.Kind())
	}
	return appendStruct(dst, rv, omit, 0)
}

func appendValue(dst []byte, v reflect.Value, depth int) ([]byte, error) {
	if !v.IsValid() {
		return append(dst, "null"...), nil
	}
	t := v.Type()
	if t.Implements(appenderType) && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		return v.Interface().(Appender).AppendCanonical(dst)
	}
	if t == numberType {
		return appendJSONNumber(dst, v.String())
	}
	if t.Implements(marshalerType) && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		b, err := v.Interface().(json.Marshaler).MarshalJSON()
		if err != nil {
			return nil, err
		}
		c, err := Transform(b)
		if err != nil {
			return nil, err
		}
		return append(dst, c...), nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		return appendValue(dst, v.Elem(), depth)
	case reflect.Interface:
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		return appendAny(dst, v.Elem().Interface(), depth)
	case reflect.String:
		return AppendValidString(dst, v.String())
	case reflect.Bool:
		return strconv.AppendBool(dst, v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return AppendInt(dst, v.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n := v.Uint()
		if n > 1<<53 {
			return AppendNumber(dst, float64(n))
		}
		return strconv.AppendUint(dst, n, 10), nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("jcs: %v is not a JSON number", f)
		}
		if v.Kind() == reflect.Float32 {
			// encoding/json writes a float32 with the shortest digits
			// that round-trip at 32 bits ("0.1", not the float64
			// 0.10000000149011612); the canonical form is that text
			// read as a double.
			f, _ = strconv.ParseFloat(strconv.FormatFloat(f, 'g', -1, 32), 64)
		}
		return AppendNumber(dst, f)
	case reflect.Slice:
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		if t.Elem().Kind() == reflect.Uint8 {
			b, err := json.Marshal(v.Interface()) // base64, as encoding/json
			if err != nil {
				return nil, err
			}
			return append(dst, b...), nil
		}
		fallthrough
	case reflect.Array:
		if depth++; depth > MaxDepth {
			return nil, errTooDeep
		}
		dst = append(dst, '[')
		for i := range v.Len() {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendValue(dst, v.Index(i), depth); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case reflect.Map:
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("jcs: map key type %s is not a string", t.Key())
		}
		if depth++; depth > MaxDepth {
			return nil, errTooDeep
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.SortFunc(keys, CompareKeys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = AppendValidString(dst, k); err != nil {
				return nil, err
			}
			dst = append(dst, ':')
			if dst, err = appendValue(dst, v.MapIndex(reflect.ValueOf(k).Convert(t.Key())), depth); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case reflect.Struct:
		return appendStruct(dst, v, nil, depth)
	}
	return nil, fmt.Errorf("jcs: cannot encode %s", t)
}

func appendStruct(dst []byte, v reflect.Value, omit map[string]bool, depth int) ([]byte, error) {
	if depth++; depth > MaxDepth {
		return nil, errTooDeep
	}
	{
		dst = append(dst, '{')
		first := true
		for _, f := range structFields(v.Type()) {
			fv, ok := fieldByIndex(v, f.index)
			if !ok || (f.omitEmpty && isEmpty(fv)) || omit[f.name] {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = AppendString(dst, f.name)
			dst = append(dst, ':')
			var err error
			if dst, err = appendValue(dst, fv, depth); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	}
}

type encField struct {
	name      string
	index     []int
	omitEmpty bool
}

var fieldCache sync.Map // reflect.Type → []encField

// structFields lists t's JSON fields sorted canonically, with embedded
// structs flattened by encoding/json's rules (typeFields): embedded structs
// are explored breadth first; of the fields sharing a name, those at the
// shallowest depth win, a tagged one over untagged ones, and when that
// leaves more than one, the name is dropped altogether.
func structFields(t reflect.Type) []encField {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]encField)
	}
	type candidate struct {
		encField
		tagged bool
	}
	type pending struct {
		t     reflect.Type
		index []int
	}
	var fields []candidate
	var current []pending
	next := []pending{{t, nil}}
	count, nextCount := map[reflect.Type]int{}, map[reflect.Type]int{}
	visited := map[reflect.Type]bool{}
	for len(next) > 0 {
		current, next = next, current[:0]
		count, nextCount = nextCount, map[reflect.Type]int{}
		for _, p := range current {
			if visited[p.t] {
				continue
			}
			visited[p.t] = true
			for i := range p.t.NumField() {
				sf := p.t.Field(i)
				if sf.Anonymous {
					ft := sf.Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !isValidTag(name) {
					name = ""
				}
				index := append(slices.Clone(p.index), i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					tagged := name != ""
					if name == "" {
						name = sf.Name
					}
					f := candidate{encField{name: name, index: index, omitEmpty: hasOption(opts, "omitempty")}, tagged}
					fields = append(fields, f)
					if count[p.t] > 1 {
						// The struct is embedded twice at this depth:
						// its fields collide with themselves.
						fields = append(fields, f)
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, pending{ft, index})
				}
			}
		}
	}
	slices.SortStableFunc(fields, func(a, b candidate) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := len(a.index) - len(b.index); c != 0 {
			return c
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return 1
		}
		return slices.Compare(a.index, b.index)
	})
	var out []encField
	for i := 0; i < len(fields); {
		j := i + 1
		for j < len(fields) && fields[j].name == fields[i].name {
			j++
		}
		// fields[i] dominates unless another field ties with it in depth
		// and taggedness.
		if j == i+1 || len(fields[i+1].index) > len(fields[i].index) || fields[i+1].tagged != fields[i].tagged {
			out = append(out, fields[i].encField)
		}
		i = j
	}
	slices.SortFunc(out, func(a, b encField) int { return CompareKeys(a.name, b.name) })
	fieldCache.Store(t, out)
	return out
}

// hasOption reports whether the comma-separated tag options contain opt.
func hasOption(opts, opt string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == opt {
			return true
		}
	}
	return false
}

// fieldByIndex follows index through embedded pointers; ok is false when a
// nil embedded pointer hides the field (encoding/json omits it).
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// isValidTag mirrors encoding/json: a tag name that is not valid is ignored
// in favour of the Go field name.
func isValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
