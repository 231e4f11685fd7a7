package compiler_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
)

// TestDiagnosticsFromOutside: an importer outside the module names the
// diagnostics types through the compiler's aliases and prints them in
// every format the CLI has; an unknown format is an error, not text.
func TestDiagnosticsFromOutside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte("package p\npolicies: team: {version: \"1\", actions: allow: [1]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	var list compiler.Diagnostics = res.Diagnostics
	if !list.HasErrors() {
		t.Fatal("want an error diagnostic")
	}
	var d *compiler.Diagnostic = list[0]
	var pos compiler.Pos = d.Pos
	if d.Severity != compiler.SeverityError || d.Code == "" || pos.File != "p.cue" {
		t.Fatalf("diagnostic %+v", d)
	}
	if list.Err() == nil || !errors.Is(d, &compiler.Diagnostic{Code: d.Code}) {
		t.Fatalf("errors.Is by code %q failed on %v", d.Code, d)
	}

	var text bytes.Buffer
	if err := compiler.PrintDiagnostics(&text, list, compiler.DiagnosticsText); err != nil || !strings.HasPrefix(text.String(), "p.cue:") {
		t.Fatalf("text: %v %q", err, text.String())
	}
	var js bytes.Buffer
	var doc struct {
		Diagnostics []compiler.Diagnostic `json:"diagnostics"`
	}
	if err := compiler.PrintDiagnostics(&js, list, compiler.DiagnosticsJSON); err != nil || json.Unmarshal(js.Bytes(), &doc) != nil || len(doc.Diagnostics) == 0 {
		t.Fatalf("json: %v %q", err, js.String())
	}
	for _, f := range []compiler.DiagnosticFormat{compiler.DiagnosticsGitHub, compiler.DiagnosticsSARIF} {
		var b bytes.Buffer
		if err := compiler.PrintDiagnostics(&b, list, f); err != nil || b.Len() == 0 {
			t.Fatalf("%s: %v %q", f, err, b.String())
		}
	}
	var none bytes.Buffer
	if err := compiler.PrintDiagnostics(&none, list, "xml"); err == nil || none.Len() != 0 {
		t.Fatalf("unknown format: err %v, wrote %q", err, none.String())
	}
	var empty bytes.Buffer
	if err := compiler.PrintDiagnostics(&empty, nil, compiler.DiagnosticsJSON); err != nil || !strings.Contains(empty.String(), `"diagnostics": []`) {
		t.Fatalf("empty json: %v %q", err, empty.String())
	}
}
