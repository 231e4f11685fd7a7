package normalize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// compileGeneral compiles a schema the way Catalog.Add does.
func compileGeneral(raw []byte) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("args.json", bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return c.Compile("args.json")
}

// decodeArgs decodes an argument object as cloneJSON leaves it.
func decodeArgs(raw string) (map[string]any, bool) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || dec.More() || m == nil {
		return nil, false
	}
	return m, true
}

// repoSchemas are the argument schemas the repository ships: the built-in
// descriptors and the executor tests' schemas.
func repoSchemas() map[string][]byte {
	out := map[string][]byte{
		"test_obj":   []byte(`{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`),
		"test_any":   []byte(`{"type":"object"}`),
		"annotated":  []byte(`{"type":"object","title":"t","description":"d","properties":{"a":{"type":"array","description":"x"},"n":{"type":"null"},"b":{"type":"boolean"}},"required":["a"],"additionalProperties":true}`),
		"impossible": []byte(`{"type":"object","properties":{"a":{"type":"string"}},"required":["b"],"additionalProperties":false}`),
	}
	for _, d := range BuiltinDescriptors() {
		out["builtin_"+d.ID] = d.Arguments
	}
	return out
}

// genValue is a random decoded JSON value of a random kind.
func genValue(rng *rand.Rand, depth int) any {
	switch rng.IntN(9) {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return json.Number([]string{"0", "1", "-3", "1.5", "1e3", "1.0"}[rng.IntN(6)])
	case 3:
		return ""
	case 4:
		return []string{"x", "/tmp/a", "ls -la", "github"}[rng.IntN(4)]
	case 5:
		if depth > 1 {
			return []any{}
		}
		return []any{genValue(rng, depth+1)}
	case 6, 7:
		if depth > 1 {
			return map[string]any{}
		}
		return genArgs(rng, depth+1)
	}
	return "€\u2028"
}

var argNames = []string{"text", "command", "path", "content", "old", "new", "url", "server", "tool", "resource", "arguments", "a", "b", "n", "extra"}

// genArgs is a random argument object over argNames.
func genArgs(rng *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for range rng.IntN(5) {
		m[argNames[rng.IntN(len(argNames))]] = genValue(rng, depth)
	}
	return m
}

// genSchema is a random schema; about one in five has a member the fast
// path does not understand.
func genSchema(rng *rand.Rand) []byte {
	types := []string{"string", "object", "array", "boolean", "null", "number", "integer"}
	props := map[string]any{}
	for range rng.IntN(4) {
		p := map[string]any{"type": types[rng.IntN(len(types))]}
		if rng.IntN(6) == 0 {
			p["description"] = "d"
		}
		if rng.IntN(12) == 0 {
			p["minLength"] = 1
		}
		if rng.IntN(12) == 0 {
			p["type"] = []any{"string", "null"}
		}
		props[argNames[rng.IntN(len(argNames))]] = p
	}
	s := map[string]any{"type": "object", "properties": props}
	if rng.IntN(10) == 0 {
		delete(s, "type")
	}
	var req []string
	for range rng.IntN(3) {
		req = append(req, argNames[rng.IntN(len(argNames))])
	}
	if req != nil {
		s["required"] = req
	}
	switch rng.IntN(3) {
	case 0:
		s["additionalProperties"] = false
	case 1:
		s["additionalProperties"] = true
	}
	if rng.IntN(15) == 0 {
		s["additionalProperties"] = map[string]any{"type": "string"}
	}
	if rng.IntN(15) == 0 {
		s["minProperties"] = 1
	}
	raw, _ := json.Marshal(s)
	return raw
}

// checkFast compares the fast path with the general validator on one
// schema and argument object; accepted says the fast path accepted.
func checkFast(t testing.TB, fast *fastSchema, general *jsonschema.Schema, schema []byte, args map[string]any) (accepted bool) {
	t.Helper()
	fastOK, generalOK := fast.accepts(args), general.Validate(any(args)) == nil
	if fastOK && !generalOK {
		a, _ := json.Marshal(args)
		t.Fatalf("schema %s: the fast path accepts %s, the validator rejects it", schema, a)
	}
	if fastOK != generalOK {
		a, _ := json.Marshal(args)
		t.Fatalf("schema %s: the fast path rejects %s, which the validator accepts (a needless slow path)", schema, a)
	}
	return fastOK
}

// TestFastSchemaMatchesValidator is the differential test of the fast
// path: on the repository's schemas and on generated ones, with generated
// arguments, it accepts exactly what santhosh-tekuri/jsonschema accepts
// (accepting more would let invalid arguments through stage 2), and the
// schemas it does not understand have no fast form.
func TestFastSchemaMatchesValidator(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	schemas := repoSchemas()
	for name, raw := range schemas {
		if compileFastSchema(raw) == nil {
			t.Errorf("repository schema %s has no fast form", name)
		}
	}
	for i := range 400 {
		schemas[fmt.Sprintf("gen%d", i)] = genSchema(rng)
	}
	// Schemas the fast path must leave to the validator.
	for i, raw := range []string{
		`{"type":"object","properties":{"a":{"type":"integer"}}}`,
		`{"type":"object","properties":{"a":{"type":"number"}}}`,
		`{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
		`{"type":"object","properties":{"a":{"type":"string","minLength":1}}}`,
		`{"type":"object","properties":{"a":true}}`,
		`{"type":"object","properties":{"a":{}}}`,
		`{"type":"object","additionalProperties":{"type":"string"}}`,
		`{"type":"object","patternProperties":{"^x":{"type":"string"}}}`,
		`{"type":"object","$ref":"#/$defs/x","$defs":{"x":{"required":["a"]}}}`,
		`{"type":"object","$schema":"http://json-schema.org/draft-04/schema#"}`,
		`{"properties":{"a":{"type":"string"}}}`,
		`{"type":"object","required":"a"}`,
		`{"type":"object","title":1}`,
		`{"type":"object"} {}`,
		`true`,
	} {
		if compileFastSchema([]byte(raw)) != nil {
			t.Errorf("%d: %s has a fast form", i, raw)
		}
		schemas[fmt.Sprintf("fallback%d", i)] = []byte(raw)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range schemas {
			if !yield(k) {
				return
			}
		}
	})
	fastSchemas, accepted, rejected := 0, 0, 0
	for _, name := range names {
		raw := schemas[name]
		general, err := compileGeneral(raw)
		fast := compileFastSchema(raw)
		if err != nil {
			if fast != nil && !strings.HasPrefix(name, "fallback") {
				t.Fatalf("%s: %s does not compile (%v) but has a fast form", name, raw, err)
			}
			continue
		}
		if fast == nil {
			continue
		}
		fastSchemas++
		for range 300 {
			if checkFast(t, fast, general, raw, genArgs(rng, 0)) {
				accepted++
			} else {
				rejected++
			}
		}
	}
	// The comparison means something only if both answers occurred often.
	if fastSchemas < 100 || accepted < 5000 || rejected < 5000 {
		t.Fatalf("%d fast schemas, %d accepted, %d rejected: the generator no longer exercises the fast path", fastSchemas, accepted, rejected)
	}
}

// FuzzFastSchema compares the fast path with the validator on any schema
// with a fast form and any argument object.
func FuzzFastSchema(f *testing.F) {
	for _, raw := range repoSchemas() {
		f.Add(string(raw), `{}`)
		f.Add(string(raw), `{"text":"x","path":"/a","command":"ls","server":"s","tool":"t"}`)
	}
	f.Add(`{"type":"object","properties":{"a":{"type":"null"},"b":{"type":"array"}},"required":["a"]}`, `{"a":null,"b":[1]}`)
	f.Add(`{"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":true}`, `{"a":1,"z":{}}`)
	f.Fuzz(func(t *testing.T, schema, args string) {
		fast := compileFastSchema([]byte(schema))
		if fast == nil {
			return
		}
		general, err := compileGeneral([]byte(schema))
		if err != nil {
			// A schema with a fast form must be one Catalog.Add accepts.
			t.Fatalf("%s has a fast form but does not compile: %v", schema, err)
		}
		m, ok := decodeArgs(args)
		if !ok {
			return
		}
		checkFast(t, fast, general, []byte(schema), m)
	})
}

// TestFastSchemaDenialsUnchanged checks that arguments the fast path
// rejects are still denied with the validator's words.
func TestFastSchemaDenialsUnchanged(t *testing.T) {
	e := BuiltinCatalog().Lookup("read_file")
	if e.fast == nil {
		t.Fatal("read_file has no fast schema")
	}
	for _, args := range []map[string]any{{}, {"path": json.Number("1")}, {"path": "/a", "extra": "x"}} {
		fast := e.validate(args, true)
		saved := e.fast
		e.fast = nil
		general := e.validate(args, true)
		e.fast = saved
		if fast == nil || general == nil || *fast != *general {
			t.Errorf("%v: with the fast path %v, without %v", args, fast, general)
		}
	}
	if err := e.validate(map[string]any{"path": "/a"}, true); err != nil {
		t.Errorf("valid arguments denied: %v", err)
	}
}
