package chain

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"polc.dev/polc/internal/jcs"
)

// TestPayloadAppendersMatchReflection checks every payload type's
// hand-written AppendCanonical against the naive form: encoding/json of the
// same value, canonicalized by jcs.Transform. Values are random, with
// strings that need escaping, non-ASCII text, nil and empty lists and
// pointers, and extreme integers.
func TestPayloadAppendersMatchReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "deny", `quo"te`, `back\slash`, "tab\tnl\n", "\x01\x1f", "é", "日本", "\u2028", "😀", "</script>", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	str := func() string { return strs[rng.IntN(len(strs))] + strs[rng.IntN(len(strs))] }
	ptr := func() *string {
		if rng.IntN(3) == 0 {
			return nil
		}
		s := str()
		return &s
	}
	list := func() []string {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		out := make([]string, 1+rng.IntN(4))
		for i := range out {
			out[i] = str()
		}
		return out
	}
	ints := []int64{0, 1, -1, 1<<53 - 1, -(1 << 53), 1<<63 - 1, -1 << 63, 42}
	num := func() int64 { return ints[rng.IntN(len(ints))] }
	gen := []func() Payload{
		func() Payload { return PolicyBoundPayload{str(), str(), str(), str()} },
		func() Payload { return OperationStartedPayload{ptr(), str(), ptr(), str(), ptr(), str()} },
		func() Payload { return GateEvaluatedPayload{str(), str(), str(), str(), str(), str(), list()} },
		func() Payload { return ExceptionGrantedPayload{str(), str(), str(), str(), str(), str()} },
		func() Payload { return ApprovalGrantedPayload{str(), str(), str(), str(), str(), str(), str()} },
		func() Payload { return OperationDeniedPayload{ptr(), str(), ptr(), str()} },
		func() Payload { return CallableCompletedPayload{num(), str()} },
		func() Payload { return CallableFailedPayload{num(), str()} },
		func() Payload { return OperationCancelledPayload{num()} },
		func() Payload { return OperationTimedOutPayload{num()} },
		func() Payload { return ExternalResultAmbiguousPayload{num(), str()} },
		func() Payload { return TaskClosedPayload{str(), str(), num(), str()} },
		func() Payload { return RecordSupersededPayload{str()} },
	}
	seen := map[Type]bool{}
	for i := 0; i < 3000; i++ {
		p := gen[i%len(gen)]()
		seen[p.RecordType()] = true
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.AppendCanonical([]byte("prefix"))
		if err != nil {
			t.Fatalf("%#v: %v", p, err)
		}
		if string(got[6:]) != string(want) || string(got[:6]) != "prefix" {
			t.Fatalf("%T:\n got %s\nwant %s", p, got, want)
		}
	}
	if len(seen) != len(schemas) {
		t.Fatalf("generated %d record types, the schemas have %d", len(seen), len(schemas))
	}
	// Invalid UTF-8 has no canonical form: every string member refuses it.
	for _, p := range []Payload{
		PolicyBoundPayload{EffectBackendID: "\xff"},
		OperationStartedPayload{Actor: ptr2("a\xfe")},
		GateEvaluatedPayload{RuleIDs: []string{"ok", "\xc0"}},
		TaskClosedPayload{TaskBoundaryID: "\xff"},
	} {
		if b, err := p.AppendCanonical(nil); err == nil {
			t.Errorf("%T with invalid UTF-8 encoded as %q", p, b)
		}
	}
	// Every payload struct's fields are the schema's members, so a field
	// added to one without its appender fails here.
	for _, g := range gen {
		p := g()
		if n := reflect.TypeOf(p).NumField(); n != len(schemaOf(p.RecordType()).fields) {
			t.Errorf("%T has %d fields, its schema %d", p, n, len(schemaOf(p.RecordType()).fields))
		}
	}
}

func ptr2(s string) *string { return &s }

func BenchmarkEncodePayload(b *testing.B) {
	p := GateEvaluatedPayload{ArgumentsDigest: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Decision: "allow",
		GateID: "policy", Level: "hard", ReasonCode: "allowed", ResultID: "00000000-0000-4000-8000-000000000001", RuleIDs: []string{"r1", "r2"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodePayload(p); err != nil {
			b.Fatal(err)
		}
	}
}
