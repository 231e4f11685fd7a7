package jcs

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// Embedded structs whose field names collide, resolved by encoding/json's
// rules: the shallowest field wins, a tagged one over untagged ones at the
// same depth, and a tie drops the name.
type (
	embDeep    struct{ X int }
	embMid     struct{ embDeep }
	embShallow struct{ X int }
	embByDepth struct {
		embMid     // X at depth 2, listed first
		embShallow // X at depth 1: wins
	}
	embUntagged struct{ Y int }
	embTagged   struct {
		Y int `json:"Y"`
	}
	embOther struct{ Y int }
	embByTag struct {
		embUntagged
		embTagged
	} // the tagged Y wins
	embTie struct {
		embUntagged
		embOther
	} // Y is dropped
	embTwice struct {
		embMid
		embMid2
	} // embDeep twice at depth 2: X is dropped
	embMid2    struct{ embDeep }
	embPtrWins struct {
		*embShallow
		embMid
	}
	dashComma struct {
		D int `json:"-,"` // named "-", not skipped
		S int `json:"-"`
	}
	withFloat32 struct {
		F  float32   `json:"f"`
		FS []float32 `json:"fs"`
	}
)

// TestAppendMatchesEncodingJSONEdges cross-checks Append with the reference
// Transform(json.Marshal(v)) where it used to differ: embedded field
// dominance, the "-," tag, float32 values (encoding/json writes their
// 32-bit shortest form, not the float64 expansion), the empty json.Number
// (written as 0).
func TestAppendMatchesEncodingJSONEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	f32 := []float32{0.1, 1.0 / 3, 16777217, 3.4028235e38, 1e-45, 1.17549435e-38, -0.0, 1e21, 1e-7, 123456.789}
	for range 2000 {
		f32 = append(f32, math.Float32frombits(rng.Uint32()&^(0xff<<23)|uint32(rng.IntN(255))<<23))
	}
	values := []any{
		embByDepth{embMid{embDeep{1}}, embShallow{2}},
		embByTag{embUntagged{1}, embTagged{2}},
		embTie{embUntagged{1}, embOther{2}},
		embTwice{embMid{embDeep{1}}, embMid2{embDeep{2}}},
		embPtrWins{&embShallow{2}, embMid{embDeep{1}}},
		embPtrWins{nil, embMid{embDeep{1}}},
		dashComma{D: 1, S: 2},
		json.Number(""),
		map[string]any{"n": json.Number(""), "m": json.Number("-0.0e+1")},
		[]json.Number{"1E4", "12.50"},
		withFloat32{F: 0.1, FS: f32},
		map[string]float32{"a": 0.3, "b": 1e-10},
	}
	for i, v := range values {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		want, err := Transform(raw)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		got, err := Append(nil, v)
		if err != nil {
			t.Errorf("%d (%T): %v", i, v, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d (%T):\ngot  %.200s\nwant %.200s", i, v, got, want)
		}
	}
}

// TestAppendRefusesWhatMarshalRefuses: a json.Number that is not JSON number
// text is an error, as it is for json.Marshal, rather than whatever
// strconv.ParseFloat makes of it; and a map key that is not valid UTF-8 has
// no canonical form, through reflection as through map[string]any.
func TestAppendRefusesWhatMarshalRefuses(t *testing.T) {
	for _, n := range []string{"+1", "01", "-01", "1_0", "0x10", "0x1p-2", "Inf", "NaN", " 1", "1 ", "1.", ".5", "1e", "1e+", "--1", "1E400"} {
		for _, v := range []any{json.Number(n), []any{json.Number(n)}, struct{ N json.Number }{json.Number(n)}} {
			if _, err := json.Marshal(v); err == nil && n != "1E400" {
				t.Fatalf("json.Marshal accepts %q; the test's premise is wrong", n)
			}
			if b, err := Append(nil, v); err == nil {
				t.Errorf("Append(%T with json.Number %q) = %s, want an error", v, n, b)
			}
		}
	}
	for _, v := range []any{map[string]string{"\xff": "a"}, map[string]int{"ok": 1, "a\xc0": 2}, map[string]any{"\xed\xa0\x80": 1}} {
		if b, err := Append(nil, v); err == nil {
			t.Errorf("Append(%#v) = %q, want an error for the invalid UTF-8 key", v, b)
		}
	}
}
