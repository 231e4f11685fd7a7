package compiler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"cuelang.org/go/cue"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/prove"
	"polc.dev/polc/internal/strictjson"
)

// PropertyDecl is one declared property (`properties: [...]`, checked by
// polc prove; docs/prove.md).
type PropertyDecl struct {
	// Index is the position in its source's properties list.
	Index int
	// Name is the optional name, for messages.
	Name string
	// Note says why the property matters.
	Note string
	// Property is the question.
	Property prove.Property
	// Pos is the position of the property; PolicyPos that of its policy
	// and OtherPos that of never_allows_beyond's policy.
	Pos, PolicyPos, OtherPos diag.Pos
	// JSON is the property as authored, for polc export.
	JSON json.RawMessage
}

// Label names the property in messages: properties[i] (name), or
// "--policy" for one the command line asks (Index -1).
func (p *PropertyDecl) Label() string {
	if p.Index < 0 {
		return "--policy"
	}
	s := fmt.Sprintf("properties[%d]", p.Index)
	if p.Name != "" {
		s += " (" + p.Name + ")"
	}
	return s
}

// propertyKinds are the members of a property of which exactly one asks
// its question.
var propertyKinds = []string{prove.Never, prove.AlwaysEscalates, prove.NeverAllowsBeyond}

// properties validates one `properties` list (pv) against #Property and
// the request patterns against their grammars.
func (l *loader) properties(pv cue.Value) []*PropertyDecl {
	var out []*PropertyDecl
	// The schema's request pattern is a disjunction (a string or a
	// struct), whose errors say little ("empty disjunction", "mismatched
	// types"): a pattern is checked below, by its grammar, and CUE's word
	// on it is kept only when that finds nothing to say.
	patternPath := func(path string) bool {
		first, _, _ := strings.Cut(path, ".")
		return first == prove.Never || first == prove.AlwaysEscalates
	}
	l.eachListed(pv, "properties", l.pschema, patternPath, func(e listed) {
		i, v, pos, raw := e.index, e.v, e.pos, e.raw
		var decoded struct {
			Name              string          `json:"name"`
			Note              string          `json:"note"`
			Policy            string          `json:"policy"`
			Never             json.RawMessage `json:"never"`
			AlwaysEscalates   json.RawMessage `json:"always_escalates"`
			NeverAllowsBeyond *string         `json:"never_allows_beyond"`
		}
		if err := json.Unmarshal(raw, &decoded); err != nil {
			l.diags.Add(pos, diag.CodeSchemaViolation, "properties[%d]: %v", i, err)
			return
		}
		at := func(field string) diag.Pos {
			if fv := v.LookupPath(cue.MakePath(cue.Str(field))); fv.Exists() {
				return l.pos(fv.Pos())
			}
			return pos
		}
		pd := &PropertyDecl{Index: i, Name: decoded.Name, Note: decoded.Note, Pos: pos, PolicyPos: at("policy"), JSON: raw}
		pd.Property.Policy = decoded.Policy
		var kinds []string
		var patternJSON json.RawMessage
		if decoded.Never != nil {
			kinds, patternJSON = append(kinds, prove.Never), decoded.Never
		}
		if decoded.AlwaysEscalates != nil {
			kinds, patternJSON = append(kinds, prove.AlwaysEscalates), decoded.AlwaysEscalates
		}
		if decoded.NeverAllowsBeyond != nil {
			kinds = append(kinds, prove.NeverAllowsBeyond)
			pd.Property.Other = *decoded.NeverAllowsBeyond
			pd.OtherPos = at(prove.NeverAllowsBeyond)
		}
		if len(kinds) != 1 {
			l.diags.Add(pos, diag.CodeSchemaViolation, "properties[%d]: want exactly one of %v, got %d", i, propertyKinds, len(kinds))
			return
		}
		pd.Property.Kind = kinds[0]
		if patternJSON != nil {
			rp, err := ParseRequestPatternJSON(patternJSON)
			if err != nil {
				p := at(kinds[0])
				field := kinds[0]
				code := diag.CodeInvalidPattern
				var fe *prove.FieldError
				if errors.As(err, &fe) {
					if fv := v.LookupPath(cue.MakePath(cue.Str(kinds[0]), cue.Str(fe.Field))); fv.Exists() {
						p = l.pos(fv.Pos())
						field += "." + fe.Field
						err = fe.Err
					}
				} else {
					code = diag.CodeSchemaViolation
					if strings.HasPrefix(err.Error(), "unknown field") {
						code = diag.CodeUnknownField
					}
				}
				l.diags.Add(p, code, "properties[%d].%s: %v", i, field, err)
				return
			}
			if e.held != nil {
				l.diags = append(l.diags, e.held)
				return
			}
			pd.Property.Pattern = rp
		}
		out = append(out, pd)
	})
	return out
}

// ParseRequestPatternJSON reads a request pattern as declared: a string
// (prove.ParseRequestPattern) or an object of its fields.
func ParseRequestPatternJSON(raw json.RawMessage) (prove.RequestPattern, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return prove.ParseRequestPattern(s)
	}
	var rp prove.RequestPattern
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return rp, errors.New("want a pattern (a string) or an object of pattern fields")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rp); err != nil {
		return rp, strictjson.Describe(err)
	}
	return rp, rp.Validate()
}
