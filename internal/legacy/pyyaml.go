package legacy

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// LionAGI reads an AgentSpec file with PyYAML's safe_load: YAML 1.1, so a
// plain `on`, `yes` or `1` is a bool or an int, not a string, and a key
// written twice keeps its last value. This file reads a document the way
// safe_load does, or refuses it: go.yaml.in/yaml/v3 parses it into nodes
// (keeping every key, duplicates included) and the scalars are typed here
// by PyYAML's own resolver rules. What the two parsers might read
// differently (tabs, the YAML 1.1 line breaks, tags, anchors, merge keys)
// is refused rather than guessed.

// maxFile bounds what is read: a permissions file is a few lines.
const maxFile = 1 << 20

// pyType is the Python type safe_load gives a node.
type pyType uint8

const (
	tStr pyType = iota
	tNone
	tBool
	tInt
	tFloat
	tDate
	tDatetime
	tList
	tDict
)

func (t pyType) String() string {
	names := [...]string{"str", "NoneType", "bool", "int", "float", "datetime.date", "datetime.datetime", "list", "dict"}
	if int(t) < len(names) {
		return names[t]
	}
	return "a value safe_load cannot construct"
}

// pyNode is a value as safe_load constructs it, with its position.
type pyNode struct {
	typ pyType
	// text is a str's value, and the source text of other scalars.
	text      string
	line, col int
	items     []*pyNode
	// entries are a dict's, in Python's order: a key assigned again keeps
	// its first place and takes the later value. Keys that are not str
	// are kept apart (LionAGI reads str keys only; see dictSet).
	entries []*pyEntry
}

// pyEntry is one key of a dict: the assignment in effect, and the
// earlier assignments of the same key it replaced.
type pyEntry struct {
	key, val *pyNode
	replaced []*pyNode
}

// get returns the entry of the str key k, or nil.
func (n *pyNode) get(k string) *pyEntry {
	for _, e := range n.entries {
		if e.key.typ == tStr && e.key.text == k {
			return e
		}
	}
	return nil
}

// describe names a value for a message: its Python type, and for a
// plain scalar that YAML 1.1 does not read as a str how it was written.
func (n *pyNode) describe() string {
	switch {
	case n.typ == tStr || n.typ == tList || n.typ == tDict:
		return n.typ.String()
	case n.typ == tNone && n.text == "":
		return "null (nothing written)"
	}
	return fmt.Sprintf("%s (PyYAML, YAML 1.1, reads the plain %q as one; quote it for a string)", n.typ, n.text)
}

// The implicit resolvers of PyYAML's Resolver (yaml/resolver.py), in its
// order: a plain scalar takes the tag of the first that matches, str when
// none does. Go's $ (no multi-line flag) is the end of the text; a plain
// scalar never ends in the newline Python's $ would also allow.
var resolvers = []struct {
	typ pyType
	re  *regexp.Regexp
}{
	{tBool, regexp.MustCompile(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)},
	{tFloat, regexp.MustCompile(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)},
	{tInt, regexp.MustCompile(`^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)},
	{tMerge, regexp.MustCompile(`^(?:<<)$`)},
	{tNone, regexp.MustCompile(`^(?:~|null|Null|NULL|)$`)},
	{tDate, regexp.MustCompile(`^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$`)},
	{tValue, regexp.MustCompile(`^(?:=)$`)},
}

// Resolver outcomes that are not Python types: the merge key `<<` and
// the `=` of the value tag, which safe_load cannot construct as values.
const (
	tMerge pyType = 100 + iota
	tValue
)

// flowAfterColon finds a ':' that a flow indicator follows.
var flowAfterColon = regexp.MustCompile(`:[,\[\]{}]`)

// timestampParts is PyYAML's SafeConstructor.timestamp_regexp.
var timestampParts = regexp.MustCompile(`^([0-9][0-9][0-9][0-9])-([0-9][0-9]?)-([0-9][0-9]?)(?:(?:[Tt]|[ \t]+)([0-9][0-9]?):([0-9][0-9]):([0-9][0-9])(?:\.([0-9]*))?(?:[ \t]*(Z|([-+])([0-9][0-9]?)(?::([0-9][0-9]))?))?)?$`)

// resolvePlain types a plain scalar as PyYAML's resolver does.
func resolvePlain(s string) pyType {
	for _, r := range resolvers {
		if r.re.MatchString(s) {
			return r.typ
		}
	}
	return tStr
}

// pyIntMaxDigits is CPython's default int_max_str_digits (3.11, and the
// security releases of 3.7-3.10): int() of a longer decimal string raises.
// Older Pythons convert it, so the outcome depends on LionAGI's Python.
const pyIntMaxDigits = 4300

// constructs reports whether safe_load can build the value of a plain
// scalar of type t: "" when it can; else why it cannot, and whether that
// depends on the Python version (then polc cannot say what LionAGI does).
func constructs(t pyType, s string) (why string, versionDependent bool) {
	switch t {
	case tValue:
		return "PyYAML has no constructor for the YAML 1.1 value key `=`", false
	case tMerge:
		return "PyYAML reads a plain `<<` as a merge key, which it cannot construct as a value", false
	case tInt:
		// construct_yaml_int: drop '_', then the sign; "0b", "0x" with no
		// digits left raise; decimal parts go through int().
		v := strings.ReplaceAll(s, "_", "")
		v = strings.TrimLeft(v[:1], "+-") + v[1:]
		switch {
		case v == "0":
		case strings.HasPrefix(v, "0b"), strings.HasPrefix(v, "0x"):
			if len(v) == 2 {
				return fmt.Sprintf("PyYAML reads the plain %q as an int with no digits and fails", s), false
			}
		case v[0] == '0':
			// octal: a power-of-two base, not limited
		default:
			for _, part := range strings.Split(v, ":") {
				if len(part) > pyIntMaxDigits {
					return fmt.Sprintf("PyYAML reads the plain scalar as an int of more than %d digits, which Python 3.11 and later refuse to convert and earlier versions accept", pyIntMaxDigits), true
				}
			}
		}
	case tDate, tDatetime:
		if why := timestampFails(s); why != "" {
			return fmt.Sprintf("PyYAML reads the plain %q as a timestamp and fails: %s", s, why), false
		}
	}
	return "", false
}

// timestampFails is why construct_yaml_timestamp (datetime.date or
// datetime.datetime with a timezone) raises for s, or "".
func timestampFails(s string) string {
	m := timestampParts.FindStringSubmatch(s)
	if m == nil {
		return "not a timestamp" // the resolver matched; unreachable
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	year, month, day := n(1), n(2), n(3)
	switch {
	case year < 1:
		return "year 0 is out of range"
	case month < 1 || month > 12:
		return "month must be in 1..12"
	case day < 1 || day > daysIn(year, month):
		return "day is out of range for month"
	}
	if m[4] == "" {
		return ""
	}
	switch {
	case n(4) > 23:
		return "hour must be in 0..23"
	case n(5) > 59:
		return "minute must be in 0..59"
	case n(6) > 59:
		return "second must be in 0..59"
	}
	if m[9] != "" {
		// datetime.timezone wants an offset strictly inside ±24h.
		if n(10)*60+n(11) >= 24*60 {
			return "the offset is not strictly between -24h and 24h"
		}
	}
	return ""
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// pyPrintable is PyYAML's Reader.NON_PRINTABLE complement: a character
// outside it makes safe_load refuse the whole stream.
func pyPrintable(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0x7e || r == 0x85 ||
		r >= 0xa0 && r <= 0xd7ff || r >= 0xe000 && r <= 0xfffd || r >= 0x10000 && r <= 0x10ffff
}

// reader reads one document; findings are errors at file positions.
type reader struct {
	lines [][]rune // the source, by line as the YAML parser counts them
	errs  []*Error
}

func (r *reader) fail(kind Kind, line, col int, format string, args ...any) {
	r.errs = append(r.errs, &Error{Kind: kind, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

// readPyYAML reads data as safe_load would, or returns why not: Invalid
// findings for what safe_load itself refuses (LionAGI then fails to
// start), Unrepresentable ones for what polc cannot be sure it reads as
// safe_load does. An empty document is None, as safe_load returns.
func readPyYAML(data []byte) (*pyNode, []*Error) {
	r := &reader{}
	if len(data) > maxFile {
		r.fail(Invalid, 0, 0, "the file has %d bytes; a legacy permissions file has at most %d", len(data), maxFile)
		return nil, r.errs
	}
	if !utf8.Valid(data) {
		line, col := 1, 1
		for i := 0; i < len(data); {
			c, size := utf8.DecodeRune(data[i:])
			if c == utf8.RuneError && size <= 1 {
				break
			}
			if c == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
			i += size
		}
		r.fail(Invalid, line, col, "not UTF-8: LionAGI reads an AgentSpec file as UTF-8 and fails on it")
		return nil, r.errs
	}
	text := strings.TrimPrefix(string(data), "\ufeff")
	r.lines = splitLines(text)
	for i, l := range r.lines {
		for j, c := range l {
			switch {
			case !pyPrintable(c):
				r.fail(Invalid, i+1, j+1, "PyYAML refuses the character U+%04X anywhere in a file, so LionAGI cannot load it", c)
			case c == '\t':
				r.fail(Unrepresentable, i+1, j+1, "a tab: PyYAML refuses tabs in places polc's YAML reader accepts (a tab-indented JSON file, a tab inside a plain value); use spaces, or \\t in a double-quoted string")
			case c == 0x85 || c == 0x2028 || c == 0x2029:
				r.fail(Unrepresentable, i+1, j+1, "U+%04X: PyYAML (YAML 1.1) reads it as a line break and polc's YAML reader does not; write \\%s in a double-quoted string instead", c, map[rune]string{0x85: "N", 0x2028: "L", 0x2029: "P"}[c])
			case c == 0xfeff:
				r.fail(Unrepresentable, i+1, j+1, "a byte order mark inside the file: polc does not reproduce how PyYAML reads it")
			}
			if len(r.errs) > 0 {
				return nil, r.errs
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(text))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return &pyNode{typ: tNone, line: 1, col: 1}, nil // safe_load("") is None
	case err != nil:
		r.syntax(err)
		return nil, r.errs
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case errors.Is(err, io.EOF):
	case err != nil:
		r.syntax(err)
		return nil, r.errs
	default:
		r.fail(Invalid, more.Line, 0, "a second YAML document: PyYAML's safe_load, which LionAGI reads the file with, refuses a stream of more than one")
		return nil, r.errs
	}
	if len(doc.Content) == 0 {
		return &pyNode{typ: tNone, line: 1, col: 1}, nil
	}
	v := r.node(doc.Content[0], false)
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	return v, nil
}

// splitLines splits text at the line breaks YAML counts (\r\n, \r, \n).
func splitLines(text string) [][]rune {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	var lines [][]rune
	for _, l := range strings.Split(text, "\n") {
		lines = append(lines, []rune(l))
	}
	return lines
}

// yamlLine is the line of a go-yaml error ("yaml: line 3: …").
var yamlLine = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)

func (r *reader) syntax(err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		r.fail(Invalid, line, 0, "%s", m[2])
		return
	}
	r.fail(Invalid, 0, 0, "%s", strings.TrimPrefix(msg, "yaml: "))
}

// at is the source character at a node's position (0 when none).
func (r *reader) at(n *yaml.Node) rune {
	if n.Line < 1 || n.Line > len(r.lines) || n.Column < 1 || n.Column > len(r.lines[n.Line-1]) {
		return 0
	}
	return r.lines[n.Line-1][n.Column-1]
}

// node converts a parsed node; key says it is a mapping's key.
func (r *reader) node(n *yaml.Node, key bool) *pyNode {
	out := &pyNode{line: n.Line, col: n.Column}
	switch {
	case n.Kind == yaml.AliasNode || n.Anchor != "":
		r.fail(Unrepresentable, n.Line, n.Column, "an anchor or an alias: polc does not read them (write the value out)")
		return out
	case n.Style&yaml.TaggedStyle != 0 || r.at(n) == '!':
		// go-yaml does not mark the non-specific tag "!", which PyYAML
		// still resolves implicitly: the source shows it.
		r.fail(Unrepresentable, n.Line, n.Column, "an explicit tag: polc does not read tags (PyYAML constructs some, refuses others)")
		return out
	}
	switch n.Kind {
	case yaml.ScalarNode:
		out.text = n.Value
		switch {
		case n.Style&yaml.DoubleQuotedStyle != 0:
			r.escapes(n)
			return out // a str
		case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
			r.blockHeader(n)
			return out
		case n.Style&yaml.SingleQuotedStyle != 0:
			return out
		}
		if v := n.Value; strings.HasSuffix(v, ":") || strings.ContainsAny(v, ":") && flowAfterColon.MatchString(v) {
			// PyYAML ends a plain scalar at a ':' before a flow indicator
			// ({a:, b: c} has the key "a"); go-yaml keeps the ':' ("a:").
			r.fail(Unrepresentable, n.Line, n.Column, "the plain %q has a ':' before a ',', a bracket or its end, where PyYAML and polc's YAML reader split it differently; quote it", v)
			return out
		}
		out.typ = resolvePlain(n.Value)
		switch {
		case out.typ == tDate && timestampParts.FindStringSubmatch(n.Value)[4] != "":
			out.typ = tDatetime
		case out.typ == tValue && key:
			out.typ = tStr // flatten_mapping makes a `=` key a str
		}
		if out.typ == tMerge && key {
			r.fail(Unrepresentable, n.Line, n.Column, "a merge key `<<`: polc does not read merges (write the keys out)")
			return out
		}
		if why, dep := constructs(out.typ, n.Value); why != "" {
			kind := Invalid
			if dep {
				kind = Unrepresentable
			} else {
				why += ", so LionAGI cannot load the file"
			}
			r.fail(kind, n.Line, n.Column, "%s", why)
		}
		return out
	case yaml.SequenceNode:
		out.typ = tList
		for _, c := range n.Content {
			out.items = append(out.items, r.node(c, false))
		}
		return out
	case yaml.MappingNode:
		out.typ = tDict
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.MappingNode || k.Kind == yaml.SequenceNode {
				r.fail(Invalid, k.Line, k.Column, "a %s as a key: PyYAML cannot make it a dict key (unhashable), so LionAGI cannot load the file", map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[k.Kind])
				continue
			}
			out.dictSet(r.node(k, true), r.node(v, false))
		}
		return out
	}
	r.fail(Invalid, n.Line, n.Column, "unexpected YAML node")
	return out
}

// dictSet assigns key as a Python dict does: a str key already present
// keeps its place and takes the new value. Keys of other types are kept
// apart: LionAGI looks up str keys only, and no str equals a bool, an
// int, None or a date, so whether Python would merge two of them changes
// nothing polc reads.
func (n *pyNode) dictSet(key, val *pyNode) {
	if key.typ == tStr {
		if e := n.get(key.text); e != nil {
			e.replaced = append(e.replaced, e.key)
			e.key, e.val = key, val
			return
		}
	}
	n.entries = append(n.entries, &pyEntry{key: key, val: val})
}

// pyEscapes are the escapes PyYAML's scanner knows in a double-quoted
// scalar (besides \x, \u, \U and a line break); go-yaml knows more.
const pyEscapes = "0abt\tnvfre \"\\/N_LP"

// escapes checks a double-quoted scalar's escapes in the source, as
// PyYAML scans them: an escape it does not know, a code point that is not
// one (safe_load raises on both), or a surrogate (PyYAML keeps it as a
// lone code point, go-yaml does not) is a finding.
func (r *reader) escapes(n *yaml.Node) {
	line, col := n.Line-1, n.Column-1
	next := func() (rune, bool) { // the next character; false at a line's end
		col++
		if line >= len(r.lines) {
			return 0, false
		}
		if col >= len(r.lines[line]) {
			line, col = line+1, -1
			return 0, false
		}
		return r.lines[line][col], true
	}
	if r.at(n) != '"' {
		r.fail(Unrepresentable, n.Line, n.Column, "polc cannot find this double-quoted value in the source")
		return
	}
	for line < len(r.lines) {
		c, ok := next()
		switch {
		case !ok:
			continue
		case c == '"':
			return
		case c != '\\':
			continue
		}
		at := col + 1
		c, ok = next()
		if !ok {
			continue // an escaped line break
		}
		width := map[rune]int{'x': 2, 'u': 4, 'U': 8}[c]
		if width == 0 {
			if !strings.ContainsRune(pyEscapes, c) {
				r.fail(Invalid, line+1, at, "PyYAML does not know the escape \\%c, so LionAGI cannot load the file", c)
			}
			continue
		}
		var hex []rune
		for range width {
			if d, ok := next(); ok {
				hex = append(hex, d)
			}
		}
		code, err := strconv.ParseUint(string(hex), 16, 32)
		switch {
		case err != nil || len(hex) != width:
			r.fail(Invalid, line+1, at, "PyYAML wants %d hexadecimal digits after \\%c, so LionAGI cannot load the file", width, c)
		case code > 0x10ffff:
			r.fail(Invalid, line+1, at, "\\%c%s is no code point: PyYAML fails on it, so LionAGI cannot load the file", c, string(hex))
		case code >= 0xd800 && code < 0xe000:
			r.fail(Unrepresentable, line+1, at, "\\%c%s is a surrogate, which PyYAML keeps as a lone code point and polc's YAML reader does not", c, string(hex))
		}
	}
}

// blockHeader checks a literal or folded scalar's header as PyYAML scans
// it: a chomping indicator and an indentation indicator 1-9 (either
// order, each at most once), then spaces, an optional comment, the end
// of the line. go-yaml also takes a comment right after the indicator.
func (r *reader) blockHeader(n *yaml.Node) {
	if n.Line < 1 || n.Line > len(r.lines) {
		return
	}
	l := r.lines[n.Line-1]
	i := n.Column - 1
	if i >= len(l) || l[i] != '|' && l[i] != '>' {
		r.fail(Unrepresentable, n.Line, n.Column, "polc cannot find this block scalar's header in the source")
		return
	}
	i++
	chomp, indent := false, false
	for i < len(l) {
		switch c := l[i]; {
		case (c == '+' || c == '-') && !chomp:
			chomp = true
		case c >= '1' && c <= '9' && !indent:
			indent = true
		default:
			goto rest
		}
		i++
	}
rest:
	if i < len(l) && l[i] != ' ' {
		r.fail(Invalid, n.Line, i+1, "PyYAML wants a space, a line break or the indicators +, -, 1-9 after a block scalar's %c, so LionAGI cannot load the file", l[n.Column-1])
		return
	}
	for i < len(l) && l[i] == ' ' {
		i++
	}
	if i < len(l) && l[i] != '#' {
		r.fail(Invalid, n.Line, i+1, "PyYAML wants a comment or a line break after a block scalar's header, so LionAGI cannot load the file")
	}
}
