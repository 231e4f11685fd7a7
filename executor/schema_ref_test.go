package executor_test

import (
	"context"
	"strings"
	"testing"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// TestArgumentSchemaIsSelfContained: a descriptor's schema that refers
// outside itself (a relative file, a file URL, an http URL) is refused at
// Register without anything being loaded; a $ref inside it works; errors
// name the schema the same way wherever the process runs.
func TestArgumentSchemaIsSelfContained(t *testing.T) {
	register := func(schema string) error {
		return executor.NewRegistry().Register(normalize.ActionDescriptor{ID: "x", Version: "1", Source: normalize.Source{Kind: "mcp", Ref: "srv"},
			Arguments: []byte(schema)}, func(context.Context, map[string]any) (any, error) { return nil, nil })
	}
	for _, ref := range []string{"other.json", "file:///etc/hostname", "http://127.0.0.1:9/s.json", "/etc/passwd"} {
		err := register(`{"type":"object","properties":{"a":{"$ref":"` + ref + `"}}}`)
		if err == nil || !strings.Contains(err.Error(), "self-contained") {
			t.Errorf("$ref %s: %v", ref, err)
		}
	}
	if err := register(`{"type":"object","properties":{"a":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`); err != nil {
		t.Fatalf("internal $ref: %v", err)
	}
	err := register(`{"$ref":"#"}`)
	if err == nil || !strings.Contains(err.Error(), "polc:///descriptor/arguments.json") {
		t.Fatalf("a cyclic schema: %v", err)
	}
}
