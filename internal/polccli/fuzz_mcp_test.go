package polccli

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzMCPToolArguments: the decoder of a tool call's arguments never
// panics, and what it accepts is one JSON object (or nothing, or null:
// {}) that encoding/json decodes to the same value; an object with a
// member given twice is refused, at any depth.
func FuzzMCPToolArguments(f *testing.F) {
	for _, s := range []string{`{"command":"ls"}`, `{}`, ``, `null`, ` `, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `[]`, `"x"`, `1`,
		`{"path":"a"} {}`, `{"n":1e400}`, "{\"s\":\"\xff\"}", `{"a":[1,{"b":null}],"c":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := toolArguments(raw)
		if err != nil {
			return
		}
		if args == nil {
			t.Fatalf("accepted %q as nil", raw)
		}
		trimmed := bytes.TrimSpace(raw)
		if len(trimmed) == 0 || string(trimmed) == "null" {
			if len(args) != 0 {
				t.Fatalf("%q: %v", raw, args)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.UseNumber()
		var again map[string]any
		if err := dec.Decode(&again); err != nil || dec.More() {
			t.Fatalf("accepted %q, which is not one JSON object: %v", raw, err)
		}
		if !reflect.DeepEqual(args, again) {
			t.Fatalf("accepted %q as %v; encoding/json: %v", raw, args, again)
		}
		if err := checkDuplicates(trimmed); err != nil {
			t.Fatalf("accepted %q: %v", raw, err)
		}
	})
}

// TestMCPToolArgumentsRefused: the refusals name the problem and its
// position.
func TestMCPToolArgumentsRefused(t *testing.T) {
	for raw, want := range map[string]string{
		`{"path":"a","path":"b"}`: `1:13: member "path" given twice`,
		`[1]`:                     "an array, want an object",
		`"x"`:                     "a string, want an object",
		`{"path":`:                "1:9",
	} {
		if _, err := toolArguments(json.RawMessage(raw)); err == nil || !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}
