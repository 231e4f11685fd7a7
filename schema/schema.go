// Package schema embeds polc's CUE definitions (#PermissionPolicy and the
// declaration file layout) and the JSON Schemas of polc's output formats.
// It holds no logic beyond exposing the embedded files.
package schema

import _ "embed"

// PolicyCUE is the CUE source of #PermissionPolicy.
//
//go:embed policy.cue
var PolicyCUE string

// SnapshotJSONSchema is the JSON Schema (2020-12) of polc.snapshot/v1 files.
//
//go:embed snapshot.schema.json
var SnapshotJSONSchema string

// PolicyFile is the name under which PolicyCUE appears in positions; the
// compiler uses it to tell schema positions from the author's.
const PolicyFile = "polc:schema/policy.cue"
