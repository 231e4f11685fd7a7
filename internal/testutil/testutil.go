// Package testutil holds helpers shared by polc's tests.
package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"polc.dev/polc/schema"
	"polc.dev/polc/snapshot"
)

var (
	snapSchemaOnce sync.Once
	snapSchema     *jsonschema.Schema
	snapSchemaErr  error
)

// SnapshotSchema returns the compiled snapshot JSON Schema.
func SnapshotSchema() (*jsonschema.Schema, error) {
	snapSchemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.Draft = jsonschema.Draft2020
		if err := c.AddResource("snapshot.schema.json", bytes.NewReader([]byte(schema.SnapshotJSONSchema))); err != nil {
			snapSchemaErr = err
			return
		}
		snapSchema, snapSchemaErr = c.Compile("snapshot.schema.json")
	})
	return snapSchema, snapSchemaErr
}

// CheckSnapshot validates a snapshot file against the JSON Schema and with
// snapshot.Parse (which also recomputes the digest).
func CheckSnapshot(data []byte) error {
	s, err := SnapshotSchema()
	if err != nil {
		return fmt.Errorf("schema: %v", err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("JSON Schema: %v", err)
	}
	if _, err := snapshot.Parse(data); err != nil {
		return err
	}
	return nil
}
