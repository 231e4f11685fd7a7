package jcs

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// appendStringNaive is the original byte-at-a-time AppendString, kept as
// the reference that the word-at-a-time version must match byte for byte.
func appendStringNaive(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"':
			out = append(out, '\\', '"')
		case '\\':
			out = append(out, '\\', '\\')
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

// checkAppendString compares AppendString with the reference for s, both on
// an empty and on a non-empty destination (the prefix must be kept).
func checkAppendString(t *testing.T, s string) {
	t.Helper()
	for _, prefix := range []string{"", "p\x00\"re"} {
		want := appendStringNaive([]byte(prefix), s)
		got := AppendString([]byte(prefix), s)
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q, %q)\n got %q\nwant %q", prefix, s, got, want)
		}
	}
	// AppendValidString is the same for valid UTF-8 and fails otherwise.
	got, err := AppendValidString([]byte("p"), s)
	if utf8.ValidString(s) {
		if want := appendStringNaive([]byte("p"), s); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("AppendValidString(%q) = %q, %v; want %q", s, got, err, want)
		}
	} else if err == nil {
		t.Fatalf("AppendValidString(%q) accepted invalid UTF-8", s)
	}
	// Like append, it leaves the destination's spare capacity beyond the
	// result alone.
	room := make([]byte, 1, 1+6*len(s)+16)
	full := room[:cap(room)]
	for i := range full {
		full[i] = 0xA5
	}
	got = AppendString(room, s)
	for i := len(got); i < len(full); i++ {
		if full[i] != 0xA5 {
			t.Fatalf("AppendString(%q) wrote byte %d beyond its result (length %d)", s, i, len(got))
		}
	}
}

// TestAppendStringMatchesNaive checks AppendString against the byte loop
// on every single byte, every byte at every offset of a word, adversarial
// mixes (quotes, backslashes, controls, DEL, U+2028, non-ASCII, invalid
// UTF-8) and random strings drawn mostly from the bytes that are escaped
// or sit next to them in value.
func TestAppendStringMatchesNaive(t *testing.T) {
	for c := 0; c < 256; c++ {
		for n := 0; n <= 17; n++ {
			for at := 0; at < n; at++ {
				b := bytes.Repeat([]byte{'a'}, n)
				b[at] = byte(c)
				checkAppendString(t, string(b))
			}
		}
	}
	fixed := []string{
		"", "a", `"`, `\`, `""""""""""`, `\\\\\\\\\\`, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f",
		"\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f", "\x7f\x80\xff\xfe", " !#$%&'()*+,-./[]^_`{|}~",
		"\u2028\u2029", "é日本😀", `{"effect_backend_id":"b","policy_digest":"ab"}`, "\xe2\x80", "\xed\xa0\x80",
		strings.Repeat("x", 1000) + `"`, `"` + strings.Repeat("x", 1000), strings.Repeat("ab\"cd\\ef\n", 100),
	}
	for _, s := range fixed {
		checkAppendString(t, s)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0, 1, 0x08, 0x09, 0x0a, 0x0c, 0x0d, 0x1f, 0x20, 0x21, '"', 0x23, 0x5b, '\\', 0x5d, 'a', 0x7f, 0x80, 0xa2, 0xe2, 0xff}
	for range 20000 {
		b := make([]byte, rng.IntN(70))
		for i := range b {
			if rng.IntN(3) == 0 {
				b[i] = byte(rng.UintN(256))
			} else {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		checkAppendString(t, string(b))
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("")
	f.Add(`{"a":"b\"c"}` + "\u2028\x00\x1f\x7f")
	f.Fuzz(func(t *testing.T, s string) { checkAppendString(t, s) })
}

// payloadLike is a policy_bound payload_json: the string that is escaped
// inside every record line.
const payloadLike = `{"effect_backend_id":"b","effect_capability_digest":"abababababababababababababababababababababababababababababababab","policy_digest":"abababababababababababababababababababababababababababababababab","task_boundary_id":"11111111-1111-4111-8111-111111111111"}`

func BenchmarkAppendString(b *testing.B) {
	for _, c := range []struct{ name, s string }{
		{"payload", payloadLike},
		{"plain64", strings.Repeat("ab", 32)},
		{"short", "policy"},
		{"escapes", strings.Repeat("a\"\n", 20)},
	} {
		buf := make([]byte, 0, 1024)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.s)))
			for b.Loop() {
				buf = AppendString(buf[:0], c.s)
			}
		})
		b.Run(c.name+"/naive", func(b *testing.B) {
			b.SetBytes(int64(len(c.s)))
			for b.Loop() {
				buf = appendStringNaive(buf[:0], c.s)
			}
		})
	}
}
