package polccli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
)

// TestScenarioLiteralsBounded: a scenario's lists are bounded before CUE
// evaluates it, whose evaluation is quadratic in a list's length (as
// for declarations: compiler.LiteralSizes), in YAML and JSON alike.
func TestScenarioLiteralsBounded(t *testing.T) {
	dir := t.TempDir()
	list := "[" + strings.Repeat("0,", compiler.MaxLiteralElements) + "0]"
	want := fmt.Sprintf("a list of %d elements: at most %d are accepted in one list or struct", compiler.MaxLiteralElements+1, compiler.MaxLiteralElements)
	for name, c := range map[string]struct {
		data      string
		line, col int
	}{
		"s.yaml": {"snapshot: s.json\nprofile: minimal\nworkspace: ws\nprincipal: agent:ci\nx: " + list + "\n", 5, 4},
		"s.json": {`{"snapshot": "s.json", "profile": "minimal", "workspace": "ws", "principal": "agent:ci",` + "\n" + ` "x": ` + list + `}`, 2, 7},
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(c.data), 0o644)
		_, err := loadScenario(path, false)
		if pe, ok := err.(*posError); !ok || pe.msg != want || pe.line != c.line || pe.col != c.col {
			t.Errorf("%s: %#v", name, err)
		}
	}
}
