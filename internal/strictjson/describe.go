package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Describe returns err, from encoding/json's decoding, in JSON's terms: a
// value of the wrong type names the member by its JSON path and the JSON
// types ("member \"action\": a number, want a string"), a number that does
// not fit an integer member says so ("number 1e30 out of range for an
// integer"), never the decoder's Go types ("cannot unmarshal number into Go
// struct field ActionRequest.action of type string"). Other errors lose
// encoding/json's "json: " prefix.
func Describe(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil {
		if err == nil {
			return nil
		}
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	msg := typeMismatch(te.Type.Kind(), te.Value)
	if te.Field != "" {
		return fmt.Errorf("member %q: %s", te.Field, msg)
	}
	return errors.New(msg)
}

// typeMismatch says why a JSON value (encoding/json's description of it:
// "number", "number 1e30", "string", "bool", "array", "object") does not
// decode into a Go value of kind k.
func typeMismatch(k reflect.Kind, value string) string {
	if num, ok := strings.CutPrefix(value, "number "); ok {
		switch {
		case isInt(k) && !strings.ContainsAny(num, ".eE"):
			return fmt.Sprintf("number %s out of range for %s", clip(num), wantOf(k))
		case isInt(k):
			return fmt.Sprintf("number %s is not %s", clip(num), wantOf(k))
		}
		value = "number"
	}
	got := "a " + value
	if strings.HasPrefix(value, "a") || strings.HasPrefix(value, "o") {
		got = "an " + value // array, object
	}
	return fmt.Sprintf("%s, want %s", got, wantOf(k))
}

func isInt(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Uint64
}

// wantOf names the JSON values a Go kind decodes from.
func wantOf(k reflect.Kind) string {
	switch {
	case k >= reflect.Uint && k <= reflect.Uint64:
		return "a non-negative integer"
	case isInt(k):
		return "an integer"
	}
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a bool"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another type"
}

// clip shortens a number quoted in a message (see jcs: at most 40
// characters and the length).
func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	return fmt.Sprintf("%s… (%d characters)", s[:40], len(s))
}
