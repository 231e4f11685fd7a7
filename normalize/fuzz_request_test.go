package normalize

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/internal/jcs"
)

// sameNumber compares json.Numbers by the double they denote, which is all
// the canonical form (RFC 8785) keeps: "1.0" and "1" are the same value.
var sameNumber = cmp.Comparer(func(a, b json.Number) bool {
	fa, erra := strconv.ParseFloat(string(a), 64)
	fb, errb := strconv.ParseFloat(string(b), 64)
	return erra == nil && errb == nil && fa == fb
})

// roundTrip checks one fuzz input against a parser: a refusal says
// something, and an accepted value encodes and parses back to a value
// equal to it (under opts).
func roundTrip[T any](t *testing.T, data []byte, parse func([]byte) (T, error), encode func(any) ([]byte, error), opts ...cmp.Option) {
	t.Helper()
	v, err := parse(data)
	if err != nil {
		if err.Error() == "" {
			t.Fatalf("%q: empty error", data)
		}
		return
	}
	enc, err := encode(v)
	if err != nil {
		t.Fatalf("%q accepted but does not encode: %v", data, err)
	}
	back, err := parse(enc)
	if err != nil {
		t.Fatalf("%q accepted, its encoding %s is not: %v", data, enc, err)
	}
	if d := cmp.Diff(v, back, opts...); d != "" {
		t.Fatalf("%q: encoding %s parses to a different value (-first +second):\n%s", data, enc, d)
	}
}

func addActionRequestSeeds(f *testing.F) {
	for _, s := range []string{
		`{"action":"bash","arguments":{"command":"ls -la"},"principal":"agent:a","tenant":"t","workspace":"/ws"}`,
		`{"action":"read_file","arguments":{"path":"a","n":[1.0,-0,1e21,{"k":null}]},"principal":"","tenant":"","workspace":"/ws","time":"2026-11-30T12:00:00Z","usage":{"calls":1,"tokens":2,"cost_microunits":3,"wall_microseconds":4}}`,
		`{"action":"mcp:github/list","workspace":"/ws"}`,
		`{"action":"bash","workspace":"/ws","argumnts":{}}`,
		`{"action":"bash","workspace":"/ws","Principal":"p"}`,
		`{"action":"bash","workspace":"/ws","arguments":{"a":1},"arguments":{"b":2}}`,
		`{"action":"bash","workspace":"/ws","arguments":{"a":1e400}}`,
		`{"action":"bash","workspace":"/ws","usage":{"calls":1}} {}`,
		// Text that is not UTF-8: encoding/json would make each U+FFFD.
		"{\"action\":\"bash\",\"workspace\":\"/ws\",\"arguments\":{\"command\":\"cat \xff\"}}",
		"{\"action\":\"bash\",\"workspace\":\"/ws\",\"principal\":\"\xc0\x80\"}",
		"{\"action\":\"bash\",\"workspace\":\"/ws\",\"arguments\":{\"\xed\xa0\x80\":1}}",
		`{"action":"bash","workspace":"/ws","arguments":{"command":"cat \ud800"}}`,
		`{"action":"bash","workspace":"/ws","arguments":{"command":"cat $'\\xff'"},"tenant":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
}

// FuzzParseActionRequest: no input panics the parser, and an accepted
// request survives the canonical encoding polc hashes it with (jcs): it
// encodes, and the encoding parses back to the same request (numbers
// compared by value, which is what the canonical form keeps).
func FuzzParseActionRequest(f *testing.F) {
	addActionRequestSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, ParseActionRequest, jcs.Marshal, sameNumber)
		if _, err := ParseActionRequest(data); err == nil && !utf8.Valid(data) {
			t.Fatalf("%q accepted: not UTF-8", data)
		}
	})
}

// FuzzParseActionRequestMembers: unknown members are errors, and a member
// that is named differently from its declaration (encoding/json matches
// names case-insensitively) or given twice (encoding/json keeps the last,
// or merges objects) is one. Whenever the parser accepts, every object in
// the input has distinct member names, and the request and its usage use
// exactly the declared names.
func FuzzParseActionRequestMembers(f *testing.F) {
	addActionRequestSeeds(f)
	declared := map[string]bool{"action": true, "arguments": true, "principal": true, "tenant": true, "workspace": true, "time": true, "usage": true}
	usage := map[string]bool{"calls": true, "tokens": true, "cost_microunits": true, "wall_microseconds": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ParseActionRequest(data); err != nil {
			return
		}
		if err := distinctMembers(data); err != nil {
			t.Fatalf("%q accepted: %v", data, err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			t.Fatalf("%q accepted but is not an object: %v", data, err)
		}
		for k := range top {
			if !declared[k] {
				t.Fatalf("%q accepted with undeclared member %q", data, k)
			}
		}
		var u map[string]json.RawMessage
		if raw, ok := top["usage"]; ok && json.Unmarshal(raw, &u) == nil {
			for k := range u {
				if !usage[k] {
					t.Fatalf("%q accepted with undeclared usage member %q", data, k)
				}
			}
		}
	})
}

// distinctMembers reports an object in the JSON text data that names a
// member twice.
func distinctMembers(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object  bool
		wantKey bool
		seen    map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k := tok.(string)
			if top.seen[k] {
				return errors.New("member " + strconv.Quote(k) + " given twice")
			}
			top.seen[k] = true
			top.wantKey = false
			continue
		}
		if top != nil && top.object {
			top.wantKey = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantKey: true, seen: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// FuzzParseNormalized: no input panics the parser, and an accepted
// normalized request re-encodes, the way polc writes it (encoding/json:
// `polc normalize`, the OPA input), to a document that parses back to the
// same request, so every member and value survives. (jcs is not its
// encoder: it would round integers beyond 2^53 in usage.)
func FuzzParseNormalized(f *testing.F) {
	res := "r"
	good := &Normalized{Principal: "agent:a", Tenant: "t", Action: "bash", Workspace: "/ws",
		Time: "2026-11-30T12:00:00.000000Z", Paths: []PathAccess{{Path: "/ws/a", Access: "read"}},
		Commands: [][]string{{"ls", "-la"}}, ShellControl: true, Hosts: []string{"example.com:443", "[::1]:80"},
		Env: []string{"FOO"}, Secrets: []string{}, MCP: &MCPTarget{Server: "s", Tool: "t", Resource: &res},
		Usage: Usage{Calls: 1, Tokens: 2, CostMicrounits: 1 << 60}}
	b, err := json.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(bytes.Replace(b, []byte(`"mcp":{"server":"s","tool":"t","resource":"r"}`), []byte(`"mcp":null`), 1))
	f.Add(bytes.Replace(b, []byte(`{"principal"`), []byte(`{"extra":1,"principal"`), 1))
	f.Add(bytes.Replace(b, []byte(`{"principal"`), []byte(`{"principal":"x","principal"`), 1))
	f.Add([]byte(`{}`))
	// Text that is no text: raw bytes, an escaped lone surrogate, a NUL.
	f.Add(bytes.Replace(b, []byte(`"-la"`), []byte("\"-l\xff\""), 1))
	f.Add(bytes.Replace(b, []byte(`"-la"`), []byte(`"-l\udcff"`), 1))
	f.Add(bytes.Replace(b, []byte(`"/ws/a"`), []byte(`"/ws/a\u0000"`), 1))
	f.Add(bytes.Replace(b, []byte(`"resource":"r"`), []byte(`"resource":"\u0000"`), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, ParseNormalized, json.Marshal)
		if n, err := ParseNormalized(data); err == nil {
			if err := n.CheckText(); err != nil || !utf8.Valid(data) {
				t.Fatalf("%q accepted: %v", data, err)
			}
		}
	})
}

// FuzzParseNormalizedMembers: strictjson, which ParseNormalized decodes
// with, expects duplicate member names to have been rejected already; an
// accepted normalized request names no member twice in any object.
func FuzzParseNormalizedMembers(f *testing.F) {
	b := []byte(`{"principal":"agent:a","tenant":"t","action":"bash","workspace":"/ws","time":"2026-11-30T12:00:00.000000Z","paths":[],"commands":[["ls"]],"shell_control":false,"hosts":[],"env":[],"secrets":[],"mcp":{"server":"s","tool":"t","resource":null},"usage":{"calls":0,"tokens":0,"cost_microunits":0,"wall_microseconds":0}}`)
	f.Add(b)
	f.Add(bytes.Replace(b, []byte(`"tool":"t"`), []byte(`"tool":"t","tool":"u"`), 1))
	f.Add(bytes.Replace(b, []byte(`{"principal"`), []byte(`{"principal":"x","principal"`), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ParseNormalized(data); err != nil {
			return
		}
		if err := distinctMembers(data); err != nil {
			t.Fatalf("%q accepted: %v", data, err)
		}
	})
}
