package polccli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueyaml "cuelang.org/go/encoding/yaml"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/legacy"
)

// legacyParams are polc import --legacy's.
type legacyParams struct {
	name, approver, expires, version string
}

// runImportLegacy translates the legacy permissions in file (YAML or
// JSON: the permissions value itself, or an AgentSpec with a permissions
// key) into a declaration named lp.name, checks that it compiles, and
// writes it as CUE. Refusals are legacy_unrepresentable findings (exit
// 1) at the key that causes them; malformed input is invalid_input (2).
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
	f, err := cueyaml.Extract(rel, data)
	if err != nil {
		err = cueError(rel, err)
		diags.Add(posIn(rel, err), diag.CodeInvalidInput, "%v", err)
		return report(de, diags, df)
	}
	v := cuecontext.New().BuildFile(f)
	if err := v.Err(); err != nil {
		err = cueError(rel, err)
		diags.Add(posIn(rel, err), diag.CodeInvalidInput, "%v", err)
		return report(de, diags, df)
	}
	// An AgentSpec: only its permissions are the policy.
	root, prefix := v, []string(nil)
	if v.Kind() == cue.StructKind {
		if perm := v.LookupPath(cue.MakePath(cue.Str("permissions"))); perm.Exists() {
			v, prefix = perm, []string{"permissions"}
		}
	}
	var raw any
	if b, err := v.MarshalJSON(); err != nil || json.Unmarshal(b, &raw) != nil {
		diags.Add(diag.Pos{File: rel}, diag.CodeInvalidInput, "the permissions are not plain data: %v", err)
		return report(de, diags, df)
	}
	// at positions a legacy error at the deepest key of its path that the
	// file has (the file itself when none).
	at := func(err error) diag.Pos {
		pos := diag.Pos{File: rel}
		var le *legacy.Error
		if !errors.As(err, &le) {
			return pos
		}
		var sels []cue.Selector
		for _, k := range append(append([]string{}, prefix...), le.Path...) {
			sels = append(sels, cue.Str(k))
		}
		for n := len(sels); n >= len(prefix); n-- {
			if x := root.LookupPath(cue.MakePath(sels[:n]...)); x.Exists() && x.Pos().IsValid() {
				pos.Line, pos.Col = x.Pos().Line(), x.Pos().Column()
				break
			}
		}
		return pos
	}
	// A preset's rules are not in the file: say which preset they are.
	preset := ""
	if name, ok := raw.(string); ok {
		preset = "preset " + name + ": "
	}
	pol, err := legacy.Parse(raw)
	if err != nil {
		diags.Add(at(err), diag.CodeInvalidInput, "%v", err)
		return report(de, diags, df)
	}
	decl, errs := legacy.Translate(pol, legacy.Escalation{Approver: lp.approver, ExpiresAfter: lp.expires})
	for _, err := range errs {
		diags.Add(at(err), diag.CodeLegacyUnrepresentable, "%s%v", preset, err)
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
	if res := compiler.Compile(cfg, []string{"legacy.json"}); res.Diagnostics.HasErrors() {
		return report(de, res.Diagnostics, df)
	}
	decls, ds := compiler.Load(cfg, []string{"legacy.json"})
	if ds.HasErrors() {
		return report(de, ds, df)
	}
	out, err := encodeDeclarations(decls, p.format, p.pkg)
	if err != nil {
		return err
	}
	return writeOutput(e, p.out, out)
}
