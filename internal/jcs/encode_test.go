package jcs

import (
	"bytes"
	"encoding/json"
	"testing"
)

type inner struct {
	Z string `json:"z"`
	A *int   `json:"a"`
}

type Embedded struct {
	E1 string `json:"e1"`
	X  string `json:"x"` // shadowed by the outer X
}

type outer struct {
	Embedded
	X       int               `json:"x"`
	Name    string            `json:"name,omitempty"`
	List    []inner           `json:"list"`
	Nil     []string          `json:"nil"`
	M       map[string]any    `json:"m"`
	Num     json.Number       `json:"num"`
	Raw     json.RawMessage   `json:"raw"`
	Iface   any               `json:"iface"`
	Skip    string            `json:"-"`
	unexp   int               //nolint:unused
	Euro    string            `json:"€"`
	Emoji   bool              `json:"😀"`
	Floats  []float64         `json:"floats"`
	Strs    map[string]string `json:"strs"`
	Big     int64             `json:"big"`
	NilPtr  *inner            `json:"nil_ptr"`
	Private string            `json:"private,omitempty"`
}

// TestAppendMatchesTransform cross-checks the direct encoder against the
// reference path Transform(json.Marshal(v)).
func TestAppendMatchesTransform(t *testing.T) {
	one := 1
	values := []any{
		outer{
			Embedded: Embedded{E1: "e", X: "hidden"}, X: 3, List: []inner{{Z: "<&>\u2028\x01", A: &one}, {}},
			M: map[string]any{"b": 1.5, "a": []any{nil, true, "x"}, "\r": 1e21}, Num: "1.50", Raw: json.RawMessage(`{"b":1, "a":2}`),
			Iface: map[string]int{"k": 2}, Euro: "€", Emoji: true, Floats: []float64{0.000001, 1e-7, -0, 333333333.33333329},
			Strs: map[string]string{"ö": "1", "\u0080": "2"}, Big: 1 << 60,
		},
		[]any{}, map[string]any{}, "plain", 42, nil, []byte("bytes"),
	}
	for i, v := range values {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Append(nil, v)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d:\ngot  %s\nwant %s", i, got, want)
		}
	}
}

func TestAppendOmit(t *testing.T) {
	got, err := AppendOmit(nil, &outer{X: 1}, map[string]bool{"x": true, "list": true, "m": true, "nil": true, "raw": true, "iface": true, "floats": true, "strs": true, "big": true, "nil_ptr": true, "num": true, "e1": true, "Euro": true, "Emoji": true})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{}` {
		t.Fatalf("got %s", got)
	}
}

func FuzzAppend(f *testing.F) {
	f.Add(`{"a":[1,"x",{"b":null}]}`)
	f.Add("{\"a\":\"\xff\"}") // not UTF-8
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		raw, _ := json.Marshal(v)
		want, err := Transform(raw)
		if err != nil {
			return // e.g. strings encoding/json repaired into U+FFFD are still valid; others skip
		}
		got, err := Append(nil, v)
		if err != nil {
			t.Fatalf("Append failed where Transform did not: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("got %s want %s", got, want)
		}
	})
}

// node is a struct that can point at itself.
type node struct {
	Next *node `json:"next"`
}

// TestAppendRefusesCyclesAndDepth: a map, a list or a struct that
// contains itself, and nesting deeper than MaxDepth, are errors (the
// encoding would otherwise recurse until the stack overflows); MaxDepth
// levels exactly are fine.
func TestAppendRefusesCyclesAndDepth(t *testing.T) {
	m := map[string]any{}
	m["m"] = m
	l := []any{nil}
	l[0] = l
	n := &node{}
	n.Next = n
	nest := func(levels int) any {
		var v any = "leaf"
		for range levels {
			v = []any{v}
		}
		return v
	}
	for name, v := range map[string]any{"map": m, "list": l, "struct": n, "deep": nest(MaxDepth + 1),
		"deep typed": map[string][]map[string]any{"a": {{"b": nest(MaxDepth)}}}} {
		if b, err := Append(nil, v); err == nil {
			t.Errorf("%s: encoded %d bytes", name, len(b))
		}
	}
	b, err := Append(nil, nest(MaxDepth))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Transform(b); err != nil {
		t.Fatalf("what Append accepts at the limit, Transform refuses: %v", err)
	}
}
