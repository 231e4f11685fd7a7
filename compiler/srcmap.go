package compiler

import (
	"encoding/json"
	"fmt"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/jcs"
)

// SourceMapFormat is the format member of source maps.
const SourceMapFormat = "polc.srcmap/v1"

// SourceMap is the sidecar of a snapshot: where each rule was declared.
// Positions are relative to the directory polc ran in. It is kept out of the
// snapshot so that reformatting a source never changes a digest.
type SourceMap struct {
	Format string `json:"format"`
	Policy string `json:"policy"`
	Digest string `json:"digest"`
	// Declaration is the position of the policy's key.
	Declaration diag.Pos `json:"declaration"`
	// Rules maps rule ids to the position that declared them; rules
	// inherited from a --parent snapshot have no entry.
	Rules map[string]diag.Pos `json:"rules"`
}

func newSourceMap(p *Policy, l *lowered) *SourceMap {
	return &SourceMap{Format: SourceMapFormat, Policy: p.Name, Digest: l.snap.Digest, Declaration: p.Pos, Rules: l.positions}
}

// Marshal returns the canonical JSON of the source map and a newline.
func (m *SourceMap) Marshal() ([]byte, error) {
	b, err := jcs.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// emit encodes every snapshot and source map.
func (s *state) emit() diag.List {
	var diags diag.List
	for _, snap := range s.res.Snapshots {
		b, err := snap.Marshal()
		if err != nil {
			diags.Add(diag.Pos{}, diag.CodeInvalidValue, "policy %q: encoding: %v", snap.Name, err)
			continue
		}
		s.res.Files["snapshots/"+snap.Name+".json"] = b
		m, err := s.res.SourceMaps[snap.Name].Marshal()
		if err != nil {
			diags.Add(diag.Pos{}, diag.CodeInvalidValue, "policy %q: encoding source map: %v", snap.Name, err)
			continue
		}
		s.res.Files["snapshots/"+snap.Name+".srcmap.json"] = m
	}
	if diags.HasErrors() {
		return diags
	}
	b, err := WriteBundle(s.res.Snapshots, s.cfg.Sign)
	if err != nil {
		diags.Add(diag.Pos{}, diag.CodeInvalidValue, "bundle: %v", err)
		return diags
	}
	s.res.Files[BundleFile] = b
	return diags
}

// BundleFile is the name of the Rego bundle in the output directory.
const BundleFile = "bundle.tar.gz"

// dumpResolved presents the resolved models for --dump=resolve.
func (s *state) dumpResolved() any {
	out := map[string]any{}
	for name, r := range s.resolved {
		sets := map[string][]string{}
		for f := range numFacets {
			sets[facets[f].path] = r.sets[f].sorted()
		}
		var approvals []string
		for k := range r.approvals {
			approvals = append(approvals, k)
		}
		var secrets []string
		for k := range r.secrets {
			secrets = append(secrets, k)
		}
		budgets := map[string]int64{}
		for k, b := range r.budgets {
			budgets[k] = b.limit
		}
		var gates []string
		for _, g := range r.gates {
			gates = append(gates, fmt.Sprintf("%s(%s): %v", g.id, g.level, g.selectors))
		}
		out[name] = map[string]any{
			"policy_id": r.uuid, "version": r.version, "sets": sets,
			"network_mode": r.netMode, "subprocess_mode": r.subMode, "shell": r.shell,
			"approvals": sortStrings(approvals), "secrets": sortStrings(secrets), "budgets": budgets,
			"window_microseconds": r.window, "not_before": timePtr(r.notBefore), "expires_at": timePtr(r.expiresAt),
			"gates": gates,
		}
	}
	return out
}

func (d *Declarations) dumpLoad() any {
	return map[string]any{"inputs": d.files, "sources": len(d.values)}
}

func (d *Declarations) dumpDecls() any {
	out := map[string]json.RawMessage{}
	for _, p := range d.Policies {
		b, _ := json.Marshal(p.Decl)
		out[p.Name] = b
	}
	return out
}
