package compiler

import (
	"testing"

	cueyaml "cuelang.org/go/encoding/yaml"
)

// TestYAMLProblemLine: the decoder reports a bad indent where the
// enclosing block begins; the helper finds the offending line, and keeps
// the decoder's when the search finds nothing.
func TestYAMLProblemLine(t *testing.T) {
	data := []byte("policies:\n  y:\n    version: \"1\"\n    network:\n      allow:\n      - a\n     - b\n    subprocess: {}\n")
	_, err := cueyaml.Extract("p.yaml", data)
	line, msg, ok := SplitLineError(err, "p.yaml")
	if !ok || line == 7 {
		t.Fatalf("decoder error %v: want a line other than 7 (the helper is needed)", err)
	}
	if got := YAMLProblemLine("p.yaml", data, line, msg); got != 7 {
		t.Errorf("YAMLProblemLine = %d, want 7", got)
	}
	if got := YAMLProblemLine("p.yaml", data, line, "another message"); got != line {
		t.Errorf("YAMLProblemLine with a message no prefix gives = %d, want the decoder's %d", got, line)
	}
}
