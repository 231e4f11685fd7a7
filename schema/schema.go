// Package schema embeds polc's CUE definitions (#PermissionPolicy,
// #HarnessSpec and the
// declaration file layout) and the JSON Schemas of polc's output formats.
// It holds no logic beyond exposing the embedded files.
package schema

import (
	_ "embed"
	"strings"
)

// PolicyCUE is the CUE source of #PermissionPolicy.
//
//go:embed policy.cue
var PolicyCUE string

// HarnessCUE is the CUE source of #HarnessSpec. It uses definitions from
// PolicyCUE; Declarations joins the two.
//
//go:embed harness.cue
var HarnessCUE string

// Declarations returns the CUE source of every declaration schema
// (#PermissionPolicy and #HarnessSpec) as one file of package schema.
func Declarations() string {
	h := HarnessCUE
	if i := strings.Index(h, "\npackage schema\n"); i >= 0 {
		h = h[:i+1] + h[i+len("\npackage schema\n"):]
	}
	return PolicyCUE + "\n" + h
}

// SnapshotJSONSchema is the JSON Schema (2020-12) of polc.snapshot/v1 files.
//
//go:embed snapshot.schema.json
var SnapshotJSONSchema string

// PolicyFile is the name under which PolicyCUE appears in positions; the
// compiler uses it to tell schema positions from the author's.
const PolicyFile = "polc:schema/policy.cue"
