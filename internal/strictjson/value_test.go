package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"polc.dev/polc/internal/jcs"
)

// checkValue compares Value with encoding/json (UseNumber) on in: Value
// accepts exactly what jcs.Check accepts, and decodes it to what
// encoding/json decodes.
func checkValue(t *testing.T, in []byte) {
	t.Helper()
	got, err := Value(in)
	if _, cerr := jcs.Check(in); (err == nil) != (cerr == nil) {
		t.Fatalf("Value(%q): %v; jcs.Check: %v", in, err, cerr)
	}
	if err != nil {
		var se *jcs.SyntaxError
		if !errors.As(err, &se) {
			t.Fatalf("Value(%q): %v is not a *jcs.SyntaxError", in, err)
		}
		return
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("Value accepted %q, which encoding/json refuses: %v", in, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Value(%q)\n got %#v\nwant %#v", in, got, want)
	}
}

func TestValue(t *testing.T) {
	for _, s := range []string{
		`{"action":"bash","arguments":{"command":"ls","n":[1,-2.5e3,0,{"a":null}],"t":true,"f":false},"timeout":"1s"}`,
		` {"a" : [ ] , "b" : { } } `, `"\u00e9\n\"\\\/\ud83d\ude00"`, `[]`, `{}`, `-0`, `1E+2`, `null`,
		`{"a":1,"a":2}`, `{"a":1e400}`, `{"a":`, `[1,]`, "\"\xff\"", `"\ud800"`, `{} {}`, ``,
	} {
		checkValue(t, []byte(s))
	}
}

func FuzzValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",{"b":null}]}`, `"\u0041\ud83d\ude00"`, `[1e400]`, `{"a":1,"a":2}`, ` [ true , false ] `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkValue(t, in) })
}
