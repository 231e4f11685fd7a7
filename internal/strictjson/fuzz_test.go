package strictjson_test

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"

	"polc.dev/polc/certificate"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// targets are struct types polc actually decodes with strictjson, chosen to
// cover its branches: normalize.Normalized (strings, bool, int64, nested
// struct, pointer to struct, slices of structs and of slices), a
// certificate body (integers in a nested struct) and a snapshot expansion
// ([]any, decoded with numbers kept as json.Number).
var targets = []func() any{
	func() any { return new(normalize.Normalized) },
	func() any { return new(certificate.Certificate) },
	func() any { return new(snapshot.Expansion) },
}

func target(sel uint8) any { return targets[int(sel)%len(targets)]() }

func addSeeds(f *testing.F) {
	res := "r"
	seeds := []any{
		&normalize.Normalized{Principal: "agent:a", Tenant: "t", Action: "bash", Workspace: "/ws",
			Time: "2026-11-30T12:00:00.000000Z", Paths: []normalize.PathAccess{{Path: "/ws/a", Access: "read"}},
			Commands: [][]string{{"ls", "-la"}}, ShellControl: true, Hosts: []string{"example.com:443"},
			Env: []string{}, Secrets: []string{}, MCP: &normalize.MCPTarget{Server: "s", Tool: "t", Resource: &res},
			Usage: normalize.Usage{Calls: 1, Tokens: -2, CostMicrounits: 1 << 60}},
		&certificate.Certificate{TreeSize: 3, GateSummary: certificate.GateSummary{HardAllow: 2}},
		&snapshot.Expansion{Path: "p", Values: []any{1, "x", false, true, map[string]any{"a": []any{1.5}}}, Authority: "a", Evidence: "e"},
	}
	for i, v := range seeds {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
		f.Add(uint8(i), []byte("\v"+string(b)))
		f.Add(uint8(i), bytes.Replace(b, []byte(`"`), []byte(`"x":1,"`), 1))
		first := b[1 : bytes.IndexByte(b, ':')+1] // `"key":`
		f.Add(uint8(i), bytes.Replace(b, []byte("{"), []byte("{"+string(first)+"null,"), 1))
	}
	f.Add(uint8(0), []byte(`{"mcp":null}`))
	f.Add(uint8(2), []byte(`{"path":"p","values":[1e400,-0,"\ud800"],"authority":"a","evidence":"e"} `))
}

// FuzzDecodeAgreesWithEncodingJSON checks that strictjson is only ever
// stricter than encoding/json, never different: whenever Decode accepts an
// input into one of the project's types, encoding/json (unknown fields
// disallowed, numbers kept, no trailing data) accepts it too and yields a
// deeply equal value. A divergence would mean polc reads a document
// differently from every other JSON reader. Decode must never panic.
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		got := target(sel)
		if strictjson.Decode(data, got) != nil {
			return
		}
		want := target(sel)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		dec.UseNumber()
		if err := dec.Decode(want); err != nil {
			t.Fatalf("strictjson accepts %q into %T, encoding/json rejects it: %v", data, got, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Fatalf("strictjson accepts %q into %T, encoding/json finds trailing data", data, got)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("%q into %T: strictjson and encoding/json differ (-encoding/json +strictjson):\n%s", data, got, d)
		}
	})
}

// FuzzDecodeReencodes checks the package's promise that every declared
// member is present, no other member is, null appears only for pointers and
// arrays are never null: for I-JSON input (the precondition: polc parsers
// run jcs.Transform first, which rejects duplicate keys), an accepted
// document's canonical form equals the canonical encoding of the decoded
// value, so nothing in the input was dropped, defaulted or invented.
func FuzzDecodeReencodes(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		v := target(sel)
		if strictjson.Decode(data, v) != nil {
			return
		}
		canon, err := jcs.Transform(data)
		if err != nil {
			return // not I-JSON: outside Decode's precondition
		}
		re, err := jcs.Marshal(v)
		if err != nil {
			t.Fatalf("%q accepted into %T does not re-encode: %v", data, v, err)
		}
		if !bytes.Equal(canon, re) {
			t.Fatalf("%q accepted into %T re-encodes differently:\n in: %s\nout: %s", data, v, canon, re)
		}
	})
}

// TestDecodeNoInput: input that is empty or only whitespace is an error
// for every target kind; it used to index past the end for scalars.
func TestDecodeNoInput(t *testing.T) {
	for _, in := range []string{"", " \n", "\v"} {
		var s string
		var n int64
		var b bool
		var p *string
		for _, v := range []any{&s, &n, &b, &p} {
			if err := strictjson.Decode([]byte(in), v); err == nil {
				t.Errorf("Decode(%q, %T) accepted", in, v)
			}
		}
	}
}
