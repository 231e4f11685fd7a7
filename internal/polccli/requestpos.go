package polccli

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
)

// memberInError finds the member a request decoding error names: its
// JSON path ("member \\"usage.tokens\\": …", "unknown member \\"x\\"",
// "missing \\"workspace\\"").
var memberInError = regexp.MustCompile(`(?:member|missing|field) "([^"]+)"`)

// requestErrorPos is the line and column (1-based) in data of what err,
// from decoding a request, is about: the value of the member it names,
// found by walking data's tokens; for a member that is missing, the
// object that lacks it (1:1 for the request itself). 0, 0 when err names
// no member data holds. data has passed jcs.Check (valid I-JSON).
func requestErrorPos(data []byte, err error) (line, col int) {
	var te *json.UnmarshalTypeError
	path := ""
	if errors.As(err, &te) && te.Field != "" {
		path = te.Field
	} else if m := memberInError.FindStringSubmatch(err.Error()); m != nil {
		path = m[1]
	}
	if path == "" {
		return 0, 0
	}
	off := memberOffset(data, strings.Split(path, "."))
	if off < 0 {
		if strings.Contains(err.Error(), "missing") {
			return lineCol(data, bytes.IndexByte(data, '{'))
		}
		return 0, 0
	}
	return lineCol(data, off)
}

// memberOffset is the byte offset in data of the key of the member at
// path (object keys from the top), or -1.
func memberOffset(data []byte, path []string) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return -1
	}
	for depth := 0; ; {
		start := int(dec.InputOffset())
		t, err := dec.Token()
		if err != nil {
			return -1
		}
		if d, ok := t.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			case '}', ']':
				if depth == 0 {
					return -1
				}
				depth--
			}
			continue
		}
		key, ok := t.(string)
		if depth != 0 || !ok {
			continue
		}
		// start is where the key's token began, after the last
		// delimiter: skip the separator and blanks before the quote.
		for start < len(data) && data[start] != '"' {
			start++
		}
		if key != path[0] {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return -1
			}
			continue
		}
		if len(path) == 1 {
			return start
		}
		var sub json.RawMessage
		if dec.Decode(&sub) != nil {
			return -1
		}
		valueStart := bytes.Index(data[start:], sub)
		if valueStart < 0 {
			return -1
		}
		inner := memberOffset(sub, path[1:])
		if inner < 0 {
			return -1
		}
		return start + valueStart + inner
	}
}

// lineCol converts a byte offset in data to a 1-based line and column
// (in bytes).
func lineCol(data []byte, off int) (int, int) {
	if off < 0 || off > len(data) {
		return 0, 0
	}
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	return line, off - bytes.LastIndexByte(data[:off], '\n')
}
