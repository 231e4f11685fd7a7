package polccli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportLegacyTranslationErrorsAtTheInput: a legacy file whose
// translation polc cannot compile (here 12,000 tools, beyond the bound on
// one list) is refused at the user's file. The error named "legacy.json",
// polc's own temporary translation, which the user never sees.
func TestImportLegacyTranslationErrorsAtTheInput(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("mode: rules\nallow:\n")
	for i := range 12000 {
		fmt.Fprintf(&b, "  tool%d: ['*']\n", i)
	}
	os.WriteFile(filepath.Join(dir, "perms.yaml"), []byte(b.String()), 0o644)
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	code := Run(context.Background(), []string{"import", "--legacy", "big", "perms.yaml", "-o", "out.cue"}, e)
	if want := "perms.yaml: legacy_unrepresentable: the translation does not compile: schema_violation: a list of 12000 elements"; code != 1 || !strings.HasPrefix(stderr.String(), want) || strings.Contains(stderr.String(), "legacy.json") {
		t.Errorf("exit %d, %s; want 1 and %s", code, stderr.String(), want)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.cue")); err == nil {
		t.Error("out.cue was written")
	}
}
