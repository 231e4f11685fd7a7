package polccli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/legacy"
)

// legacyParams are polc import --legacy's.
type legacyParams struct {
	name, approver, expires, version string
}

// runImportLegacy translates the legacy permissions in file (YAML or
// JSON, read as LionAGI's AgentSpec.from_yaml reads it: the permissions
// value itself, or an AgentSpec with a permissions key) into a
// declaration named lp.name, checks that it compiles, and writes it as
// CUE. Refusals are legacy_unrepresentable findings (exit 1) at the key
// that causes them; input LionAGI would not run as written is
// invalid_input (2); rules LionAGI ignores (a key written again, a later
// spelling of the same tool) are legacy_overridden warnings.
func runImportLegacy(e *env, p *exportParams, lp *legacyParams, df diag.Format) error {
	de := diagEnv(e, p.out)
	var diags diag.List
	if len(p.paths) != 1 {
		return usagef("import --legacy takes one file")
	}
	if lp.name == "" {
		return usagef("--legacy NAME: the polc policy's name")
	}
	rel, data, err := readInput(e, p.paths[0])
	if err != nil {
		diags.Add(diag.Pos{File: rel}, diag.CodeIO, "cannot read: %v", err)
		return report(de, diags, df)
	}
	// A preset's rules are not in the file: say which preset they are.
	preset := ""
	add := func(err error) {
		var le *legacy.Error
		if !errors.As(err, &le) {
			diags.Add(diag.Pos{File: rel}, diag.CodeLegacyUnrepresentable, "%v", err)
			return
		}
		pos := diag.Pos{File: rel, Line: le.Line, Col: le.Col}
		switch le.Kind {
		case legacy.Invalid:
			diags.Add(pos, diag.CodeInvalidInput, "%v", le)
		case legacy.Overridden:
			diags.Warn(pos, diag.CodeLegacyOverridden, "%v", le)
		default:
			diags.Add(pos, diag.CodeLegacyUnrepresentable, "%s%v", preset, le)
		}
	}
	pol, findings := legacy.Load(data)
	for _, f := range findings {
		add(f)
	}
	if diags.HasErrors() {
		return report(de, diags, df)
	}
	if pol.Preset != "" {
		preset = "preset " + pol.Preset + ": "
	}
	decl, errs := legacy.Translate(pol, legacy.Escalation{Approver: lp.approver, ExpiresAfter: lp.expires})
	for _, err := range errs {
		add(err)
	}
	if diags.HasErrors() {
		return report(de, diags, df)
	}
	decl["version"] = lp.version
	decl["description"] = "imported from the legacy permissions in " + rel
	// The translation is checked the way any declaration is: compiled.
	dir, err := os.MkdirTemp("", "polc-legacy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src, err := json.Marshal(map[string]any{"policies": map[string]any{lp.name: decl}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "legacy.json"), src, 0o644); err != nil {
		return err
	}
	cfg := compiler.Config{Dir: dir}
	// The translation is polc's own file, which the user never sees: its
	// errors are the legacy file's, at that file.
	atInput := func(ds diag.List) error {
		for _, d := range ds.Errors() {
			diags.Add(diag.Pos{File: rel}, diag.CodeLegacyUnrepresentable, "the translation does not compile: %s: %s", d.Code, d.Message)
		}
		return report(de, diags, df)
	}
	if res := compiler.Compile(cfg, []string{"legacy.json"}); res.Diagnostics.HasErrors() {
		return atInput(res.Diagnostics)
	}
	decls, ds := compiler.Load(cfg, []string{"legacy.json"})
	if ds.HasErrors() {
		return atInput(ds)
	}
	out, err := encodeDeclarations(decls, p.format, p.pkg)
	if err != nil {
		return err
	}
	if err := writeOutput(e, p.out, out); err != nil {
		return err
	}
	if len(diags) > 0 {
		return report(de, diags, df) // the warnings of rules LionAGI ignores
	}
	return nil
}
