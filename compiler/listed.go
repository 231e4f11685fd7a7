package compiler

import (
	"encoding/json"
	"fmt"

	"cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"

	"polc.dev/polc/internal/diag"
)

// listed is one element of a declared list (`tests`, `properties`) that
// its schema accepted.
type listed struct {
	index int
	v     cue.Value
	pos   diag.Pos
	raw   json.RawMessage // the element as authored, for polc export
	// held is the first of the schema's problems that hold kept back
	// (nil: none), for the caller to report when it finds nothing more
	// telling to say.
	held *diag.Diagnostic
}

// eachListed validates each element of the list lv (the field noun)
// against schema (which takes it at "in" and judges it at "out"), and
// reports each problem as noun[i]: path: message, at the author's
// position. An element with a problem is skipped unless hold (nil: none)
// keeps back every one of its problems' paths; f is called with the
// others in order.
func (l *loader) eachListed(lv cue.Value, noun string, schema cue.Value, hold func(path string) bool, f func(listed)) {
	if !lv.Exists() {
		return
	}
	it, err := lv.List()
	if err != nil {
		l.diags.Add(l.pos(lv.Pos()), diag.CodeSchemaViolation, "%s must be a list", noun)
		return
	}
	for i := 0; it.Next(); i++ {
		e := listed{index: i, v: it.Value()}
		e.pos = l.pos(e.v.Pos())
		checked := schema.FillPath(cue.ParsePath("in"), e.v).LookupPath(cue.ParsePath("out"))
		bad := false
		if err := checked.Validate(cue.Concrete(true)); err != nil {
			for _, ce := range cueerrors.Errors(err) {
				format, args := ce.Msg()
				msg := fmt.Sprintf(format, args...)
				code := diag.CodeSchemaViolation
				if msg == "field not allowed" {
					code = diag.CodeUnknownField
				}
				p := l.userPos(ce)
				if p.File == "" {
					p = e.pos
				}
				path := declPath(ce.Path())
				d := &diag.Diagnostic{Pos: p, Severity: diag.Error, Code: code, Message: fmt.Sprintf("%s[%d]: %s: %s", noun, i, path, msg)}
				if hold != nil && hold(path) {
					if e.held == nil {
						e.held = d
					}
					continue
				}
				l.diags = append(l.diags, d)
				bad = true
			}
		}
		if bad {
			continue
		}
		if e.raw, err = e.v.MarshalJSON(); err != nil {
			l.diags.Add(e.pos, diag.CodeSchemaViolation, "%s[%d]: %v", noun, i, err)
			continue
		}
		f(e)
	}
}
