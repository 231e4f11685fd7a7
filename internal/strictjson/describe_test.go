package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestErrorsSayJSONTypes: a value of the wrong type, or a number that
// does not fit an integer, is described in JSON's terms, never with the
// decoder's Go types ("cannot unmarshal number 99999999999999999999 into
// Go value of type int64").
func TestErrorsSayJSONTypes(t *testing.T) {
	type inner struct {
		N int64  `json:"n"`
		U uint32 `json:"u"`
	}
	type outer struct {
		S  string `json:"s"`
		In inner  `json:"in"`
	}
	for in, want := range map[string]string{
		`{"s":"x","in":{"n":99999999999999999999,"u":0}}`:             "in.n: number 99999999999999999999 out of range for an integer",
		`{"s":"x","in":{"n":0,"u":-1}}`:                               "in.u: number -1 out of range for a non-negative integer",
		`{"s":"x","in":{"n":0,"u":4294967296}}`:                       "in.u: number 4294967296 out of range for a non-negative integer",
		`{"s":"x","in":{"n":1` + strings.Repeat("0", 50) + `,"u":0}}`: "in.n: number 1" + strings.Repeat("0", 39) + "… (51 characters) out of range for an integer",
	} {
		var v outer
		if err := Decode([]byte(in), &v); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", in, err, want)
		}
	}
	for in, want := range map[string]string{
		`{"s":1}`:               `member "s": a number, want a string`,
		`{"in":[]}`:             `member "in": an array, want an object`,
		`{"in":{"n":1.5}}`:      `member "in.n": number 1.5 is not an integer`,
		`{"in":{"n":"1"}}`:      `member "in.n": a string, want an integer`,
		`{"in":{"u":1e30}}`:     `member "in.u": number 1e30 is not a non-negative integer`,
		`{"s":"x","in":{"n":1}`: `unexpected end of JSON input`,
	} {
		var v outer
		if err := Describe(json.Unmarshal([]byte(in), &v)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", in, err, want)
		}
	}
}
