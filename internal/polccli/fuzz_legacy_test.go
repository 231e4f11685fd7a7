package polccli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzImportLegacy feeds polc import --legacy arbitrary files: it never
// panics, exits 0 (a translation, written), 1 (legacy_unrepresentable
// findings) or 2 (invalid input, before anything is translated), and
// every diagnostic names the file; on exit 0 the output is written and
// polc reads it back as a declaration that compiles.
func FuzzImportLegacy(f *testing.F) {
	for _, s := range []string{
		"read_only\n",
		"safe\n",
		"inherit\n",
		"mode: rules\nallow:\n  read: ['*']\ndeny:\n  bash: ['rm *']\n",
		"mode: rules\nescalate:\n  write: ['*']\n",
		"permissions: deny_all\nname: agent\n",
		"permissions:\n  mode: allow_all\n  deny: {Bash_Tool: ['*']}\n",
		"mode: rules\nallow: {read: [1]}\n",
		"mode: rules\nask: {}\n",
		"{mode: rules, allow: {read: ['*'}\n",
		`{"mode":"deny_all","allow":{"grep":["*"]}}`,
		"- a\n- b\n",
		"mode: rules\nallow:\n  reader_tool: ['*']\n  reader: ['*.py']\n",
		"mode: rules\nallow: {reader: ['*']}\nallow: {editor: ['*']}\n",
		`{"mode": "rules", "allow": {"reader": ["*"]}, "allow": {}}`,
		"mode: rules\nallow:\n  on: ['*']\n  1: ['*']\n",
		"mode: rules\nallow:\n  \u0130: ['*']\n",
		"role: implementer\nmodel: x\n",
		"permissions:\npermissions: read_only\n",
		"mode: rules\nallow: {reader: &a ['*'], editor: *a}\n",
		"mode: rules\nallow:\n\treader: ['*']\n",
		"system_prompt: |\n  be careful\npermissions: {mode: rules, deny: {bash: ['*']}}\nwhen: 2001-13-01\n",
		"mode: rules\nallow:\n  read: ['\xff']\n", // not UTF-8
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "perm.yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
		code := Run(context.Background(), []string{"import", "--legacy", "agent", "perm.yaml", "--approver", "lead", "-o", "out.cue"}, e)
		out, rerr := os.ReadFile(filepath.Join(dir, "out.cue"))
		switch code {
		case 0:
			if rerr != nil || len(out) == 0 {
				t.Fatalf("exit 0 without output: %v\n%s", rerr, stderr.String())
			}
			var so, se bytes.Buffer
			ce := &env{stdin: strings.NewReader(""), stdout: &so, stderr: &se, dir: dir}
			if c := Run(context.Background(), []string{"compile", "out.cue", "-o", "compiled"}, ce); c != 0 {
				t.Fatalf("the written declaration does not compile (exit %d):\n%s\n%s", c, out, se.String())
			}
		case 1, 2:
			if rerr == nil {
				t.Fatalf("exit %d but out.cue was written", code)
			}
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				if line != "" && !strings.HasPrefix(line, "perm.yaml") && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
					t.Fatalf("exit %d: diagnostic does not name the file: %q\n%s", code, line, stderr.String())
				}
			}
			if stderr.Len() == 0 {
				t.Fatalf("exit %d without a diagnostic", code)
			}
		default:
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	})
}
