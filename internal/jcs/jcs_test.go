package jcs

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
)

// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
func TestNumbersRFC8785AppendixB(t *testing.T) {
	cases := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, c := range cases {
		got, err := AppendNumber(nil, math.Float64frombits(c.bits))
		if err != nil {
			t.Errorf("%#016x: %v", c.bits, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%#016x: got %s, want %s", c.bits, got, c.want)
		}
	}
	for _, bits := range []uint64{0x7fffffffffffffff, 0x7ff0000000000000, 0xfff0000000000000} {
		if _, err := AppendNumber(nil, math.Float64frombits(bits)); err == nil {
			t.Errorf("%#016x: want an error for a non-finite number", bits)
		}
	}
}

// RFC 8785 §3.2.2 and §3.2.3 worked examples.
func TestTransformRFC8785Examples(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{
			"values",
			`{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			"sorting",
			`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{"nested", `{"b":[{"z":1,"a":2}],"a":{}}`, `{"a":{},"b":[{"a":2,"z":1}]}`},
		{"raw-2028-7f", "\"\u2028\u2029\x7f<>&\"", "\"\u2028\u2029\x7f<>&\""},
		{"controls", `"\u0000\u001f\b\f\t"`, `"\u0000\u001f\b\f\t"`},
		{"integers", `[1, -0, 0.0, 1.0e2, 100000000000000000000000]`, `[1,0,0,100,1e+23]`},
	}
	for _, c := range cases {
		got, err := Transform([]byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s:\ngot  %s\nwant %s", c.name, got, c.want)
		}
		if !IsCanonical(got) {
			t.Errorf("%s: output is not canonical", c.name)
		}
	}
}

func TestTransformRejects(t *testing.T) {
	cases := []struct {
		name, in  string
		line, col int
	}{
		{"duplicate", `{"a":1,"a":2}`, 1, 8},
		{"lone-high", `"\ud800"`, 1, 8},
		{"lone-low", `"\udc00"`, 1, 8},
		{"bad-utf8", "\"\xff\"", 1, 2},
		{"overflow", `1e400`, 1, 1},
		{"trailing", `{} {}`, 1, 4},
		{"leading-zero", `01`, 1, 1},
		{"raw-control", "\"\x01\"", 1, 2},
		{"second-line", "{\n  \"a\": tru\n}", 2, 8},
		{"empty", ``, 1, 1},
		{"bad-escape", `"\x"`, 1, 2},
	}
	for _, c := range cases {
		_, err := Transform([]byte(c.in))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%s: got %v, want a *SyntaxError", c.name, err)
			continue
		}
		if se.Line != c.line || se.Col != c.col {
			t.Errorf("%s: error at %d:%d (%v), want %d:%d", c.name, se.Line, se.Col, se, c.line, c.col)
		}
	}
}

func TestDepthLimit(t *testing.T) {
	deep := make([]byte, 0, 2*MaxDepth+2)
	for range MaxDepth + 1 {
		deep = append(deep, '[')
	}
	for range MaxDepth + 1 {
		deep = append(deep, ']')
	}
	if _, err := Transform(deep); err == nil {
		t.Fatal("want an error for nesting beyond MaxDepth")
	}
	if _, err := Transform(deep[1 : len(deep)-1]); err != nil {
		t.Fatalf("nesting of exactly MaxDepth: %v", err)
	}
}

func FuzzTransform(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x"]}`, `"\ud83d\ude00"`, `1e21`, `{"\u20ac":1,"\r":2}`, `[null,true,false]`, `-0.0000033`, "\"\xed\xa0\x80\"", `"\udcff"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Transform(in)
		if err != nil {
			return
		}
		again, err := Transform(out)
		if err != nil {
			t.Fatalf("canonical output does not parse: %v\n%s", err, out)
		}
		if string(again) != string(out) {
			t.Fatalf("not idempotent:\n%s\n%s", out, again)
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil {
			t.Fatalf("Transform accepted input encoding/json rejects: %q", in)
		}
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatalf("output rejected by encoding/json: %v", err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed:\n%#v\n%#v", a, b)
		}
	})
}
