package polccli

import (
	"errors"
	"strings"

	"cuelang.org/go/cue/ast"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/jcs"
)

// scenarioJSON checks a .json scenario as JSON before the YAML decoder
// reads it: its first problem is reported at its line and column (the
// decoder, which reads JSON too, names only a line, often not the
// problem's, and accepts what JSON does not, such as duplicate members).
func scenarioJSON(path string, data []byte) error {
	if !strings.HasSuffix(path, ".json") {
		return nil
	}
	var se *jcs.SyntaxError
	if _, err := jcs.Check(data); errors.As(err, &se) {
		return &posError{se.Line, se.Col, se.Msg}
	} else if err != nil {
		return err
	}
	return nil
}

// scenarioSizes bounds a scenario's literals before CUE evaluates it, as
// declarations' are (compiler.LiteralSizes): CUE's evaluation is
// quadratic in a list's length.
func scenarioSizes(f ast.Node) error {
	if pos, msg := compiler.LiteralSizes(f); msg != "" {
		return &posError{pos.Line(), pos.Column(), msg}
	}
	return nil
}
