package compiler

import (
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/internal/diag"
)

// TestFieldPositions: diagnostics about one field are reported at that
// field, not at the start of the policy, so an editor jumps to the fix.
func TestFieldPositions(t *testing.T) {
	cases := []struct {
		name, src, code string
		want            diag.Pos
	}{
		{"gate selecting no rule, at its rules", `package p
policies: p: {
	version: "1"
	actions: allow: ["bash"]
	gates: [
		{id: "ok", level: "soft", rules: ["action.allow:*"]},
		{id: "typo", level: "hard",
			rules: ["actoin.allow:*"]},
	]
}
`, diag.CodeGateUnknownRule, diag.Pos{File: "p.cue", Line: 8, Col: 4}},
		{"gate inherited and selecting no rule in the child, at extends", `package p
policies: parent: {
	version: "1"
	actions: allow: ["bash"]
	gates: [{id: "g", level: "soft", rules: ["action.allow:bash"]}]
}
policies: child: {
	version: "2"
	extends: "parent"
	actions: allow: []
}
`, diag.CodeGateUnknownRule, diag.Pos{File: "p.cue", Line: 9, Col: 2}},
		{"inverted expiry, at not_before", `package p
policies: p: {
	version: "1"
	expires_at: "2026-01-01T00:00:00Z"
	not_before: "2027-01-01T00:00:00Z"
}
`, diag.CodeInvalidValue, diag.Pos{File: "p.cue", Line: 5, Col: 2}},
		{"inverted by the child's expires_at, at expires_at", `package p
policies: parent: {version: "1", not_before: "2027-01-01T00:00:00Z"}
policies: child: {
	version: "2"
	extends: "parent"
	expires_at: "2026-01-01T00:00:00Z"
}
`, diag.CodeInvalidValue, diag.Pos{File: "p.cue", Line: 6, Col: 2}},
		{"inverted by the parent, at the child's extends", `package p
policies: parent: {version: "1", expires_at: "2026-01-01T00:00:00Z", not_before: "2027-01-01T00:00:00Z"}
policies: child: {
	version: "2"
	extends: "parent"
}
`, diag.CodeInvalidValue, diag.Pos{File: "p.cue", Line: 5, Col: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			res := Compile(Config{Dir: dir}, []string{"p.cue"})
			var got []diag.Pos
			for _, d := range res.Diagnostics {
				if d.Code == c.code {
					got = append(got, d.Pos)
				}
			}
			if len(got) == 0 {
				t.Fatalf("no %s in %v", c.code, res.Diagnostics)
			}
			for _, p := range got {
				if p == c.want {
					return
				}
			}
			t.Errorf("%s at %v, want %v\n%v", c.code, got, c.want, res.Diagnostics)
		})
	}
}
