package jcs

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestCheckShape: Check counts every value, object and member, which
// is what a reader bounding a decoder's memory needs before decoding.
func TestCheckShape(t *testing.T) {
	for in, want := range map[string]Shape{
		`1`:                                 {Values: 1},
		`{}`:                                {Values: 1, Objects: 1},
		`[{},{},[]]`:                        {Values: 4, Objects: 2},
		`{"a":{"b":[1,"x",null]},"c":true}`: {Values: 7, Objects: 2, Members: 3},
	} {
		got, err := Check([]byte(in))
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", in, got, err, want)
		}
	}
}

// TestCheckDuplicatesAnySize: duplicates are found whether an object is
// searched (small) or given a set (large), at any depth, and names equal
// to a nested object's are not duplicates of the parent's.
func TestCheckDuplicatesAnySize(t *testing.T) {
	var members []string
	for i := range 3 * smallObject {
		members = append(members, fmt.Sprintf(`"k%d":{"k%d":0}`, i, i))
	}
	big := "{" + strings.Join(members, ",") + "}"
	if _, err := Check([]byte(big)); err != nil {
		t.Fatalf("distinct members: %v", err)
	}
	for _, at := range []int{1, smallObject, smallObject + 1, 3*smallObject - 1} {
		dup := "{" + strings.Join(members, ",") + fmt.Sprintf(`,"k%d":1}`, at)
		_, err := Check([]byte(dup))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`duplicate member name "k%d"`, at)) {
			t.Errorf("duplicate of member %d: %v", at, err)
		}
	}
	if _, err := Check([]byte(`{"a":{"a":{"a":1}},"b":[{"a":1,"b":2}]}`)); err != nil {
		t.Errorf("names repeated at other depths: %v", err)
	}
}

// TestCheckKeepsNothing: Check of a large string value allocates nothing
// in proportion to it (the first pass used to build every string).
func TestCheckKeepsNothing(t *testing.T) {
	in := []byte(`{"content":"` + strings.Repeat("x", 8<<20) + `"}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Check(in)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
		t.Errorf("Check of %d bytes allocated %d bytes", len(in), alloc)
	}
}

// TestErrorsClipEchoedInput: a message quotes at most the start of an
// over-long number or member name, with its length: a million-digit
// number used to be echoed whole.
func TestErrorsClipEchoedInput(t *testing.T) {
	digits := strings.Repeat("9", 1_000_000)
	long := strings.Repeat("é", 500_000)
	for in, want := range map[string]string{
		"[" + digits + "]":                    "1:2: number " + digits[:maxEcho] + "… (1000000 characters) out of range (beyond a finite IEEE 754 double)",
		`[1e400]`:                             "1:2: number 1e400 out of range (beyond a finite IEEE 754 double)",
		`{"` + long + `":1,"` + long + `":2}`: `1:1000007: duplicate member name "` + strings.Repeat("é", maxEcho/2) + `"… (1000000 bytes)`,
	} {
		_, err := Check([]byte(in))
		var se *SyntaxError
		if !errors.As(err, &se) || err.Error() != want {
			t.Errorf("got %.200v, want %.200s", err, want)
		}
	}
}
