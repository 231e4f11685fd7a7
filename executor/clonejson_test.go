package executor

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"polc.dev/polc/normalize"
)

// genCloneValue is a random Go value of the kinds callers pass as
// arguments, including the ones cloneDirect must leave to the round trip.
func genCloneValue(rng *rand.Rand, depth int) any {
	floats := []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-6, 9.99e-7, 1e21, 9.99e20, 1e-7, 123456789e-15,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1, 1e20, 5e-324, math.Inf(1), math.NaN()}
	strs := []string{"", "x", "<&>", "é\u2028\u2029", "\x00\x1f\"\\", "\xff", "a\xc3", "\U0001F600"}
	nums := []string{"", "0", "-0", "1.5e3", "1E+2", "01", "1.", ".5", "-", "1e", "0x10", "12345678901234567890123", "1e-7"}
	switch rng.IntN(14) {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return strs[rng.IntN(len(strs))]
	case 3:
		return json.Number(nums[rng.IntN(len(nums))])
	case 4:
		return floats[rng.IntN(len(floats))]
	case 5:
		return math.Float64frombits(rng.Uint64())
	case 6:
		return (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(60)-30))
	case 7:
		return rng.Int()
	case 8:
		return rng.Int64() >> rng.IntN(64)
	case 9:
		// Types left to the round trip.
		return []any{int32(3), uint(7), float32(1.5), []string{"a"}, map[string]string{"k": "v"}, time.Unix(0, 0).UTC(),
			json.RawMessage(`{"a":1}`), struct{ A int }{1}, (*int)(nil)}[rng.IntN(9)]
	case 10, 11:
		if depth > 3 {
			return []any(nil)
		}
		n := rng.IntN(4)
		out := make([]any, n)
		for i := range out {
			out[i] = genCloneValue(rng, depth+1)
		}
		return out
	default:
		if depth > 3 {
			return map[string]any(nil)
		}
		return genCloneMap(rng, depth+1)
	}
}

func genCloneMap(rng *rand.Rand, depth int) map[string]any {
	keys := []string{"a", "b", "path", "\xff", "\xfe", "é", "<k>"}
	m := map[string]any{}
	for range rng.IntN(5) {
		m[keys[rng.IntN(len(keys))]] = genCloneValue(rng, depth)
	}
	return m
}

// checkClone compares cloneJSON's direct copy with the round trip on m;
// direct says the direct copy applied.
func checkClone(t testing.TB, m map[string]any) (direct bool) {
	t.Helper()
	want, wantErr := cloneRoundTrip(m)
	got, ok := cloneDirect(m)
	if !ok {
		return false
	}
	if wantErr != nil {
		t.Fatalf("%#v: the round trip fails (%v), the direct copy does not", m, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("direct copy differs from the round trip:\n got %#v\nwant %#v\n  of %#v", got, want, m)
	}
	return true
}

// TestCloneDirectMatchesRoundTrip is the differential test of cloneJSON's
// direct copy: on generated argument values it returns what json.Marshal
// and a UseNumber decode return, or defers to them; both outcomes occur.
func TestCloneDirectMatchesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	direct, deferred := 0, 0
	for range 30000 {
		if checkClone(t, genCloneMap(rng, 0)) {
			direct++
		} else {
			deferred++
		}
	}
	if direct < 5000 || deferred < 5000 {
		t.Fatalf("%d direct, %d deferred: the generator no longer exercises both paths", direct, deferred)
	}
	// The copy shares no map or slice with the original.
	in := map[string]any{"m": map[string]any{"k": "v"}, "l": []any{"x"}}
	out, err := cloneJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	out["m"].(map[string]any)["k"] = "changed"
	out["l"].([]any)[0] = "changed"
	if in["m"].(map[string]any)["k"] != "v" || in["l"].([]any)[0] != "x" {
		t.Fatal("the clone shares state with the original")
	}
	// Cycles and deep nesting are the round trip's to refuse or copy.
	cyc := map[string]any{}
	cyc["self"] = cyc
	if _, err := cloneJSON(cyc); err == nil {
		t.Fatal("a cyclic value was cloned")
	}
	deep := map[string]any{}
	cur := deep
	for range 200 {
		next := map[string]any{}
		cur["d"] = next
		cur = next
	}
	if !reflect.DeepEqual(must(cloneJSON(deep)), must(cloneRoundTrip(deep))) {
		t.Fatal("a deep value clones differently")
	}
	// Floats at and around encoding/json's format switches.
	for _, f := range []float64{1e-6, math.Nextafter(1e-6, 0), 1e21, math.Nextafter(1e21, 0), -1e-7, 1.2345e-300} {
		checkClone(t, map[string]any{"f": f})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// FuzzCloneJSON compares the direct copy with the round trip on any JSON
// document, decoded with float64 numbers and with json.Number ones, and
// on strings and numbers taken from the raw input.
func FuzzCloneJSON(f *testing.F) {
	f.Add(`{"a":1,"b":[1.5,"x",null,true,{"c":1e21}],"d":1e-7}`, "\xff", "1e5")
	f.Add(`{}`, "", "")
	f.Add(`{"k":-0.0}`, "é", "01")
	f.Fuzz(func(t *testing.T, doc, s, num string) {
		for _, useNumber := range []bool{false, true} {
			dec := json.NewDecoder(strings.NewReader(doc))
			if useNumber {
				dec.UseNumber()
			}
			var m map[string]any
			if dec.Decode(&m) != nil || m == nil {
				continue
			}
			m["s"], m[s] = s, json.Number(num)
			checkClone(t, m)
			// A string that is not UTF-8 is refused, never replaced.
			if _, err := cloneJSON(m); !utf8.ValidString(s) && !errors.As(err, new(*normalize.NormalizeError)) {
				t.Fatalf("%q: cloned (%v)", s, err)
			}
		}
	})
}
