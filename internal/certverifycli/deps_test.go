package certverifycli_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"polc.dev/polc/chain"
)

// TestDependencies keeps certverify small and offline: no CUE, no OPA, no
// networking package, and nothing outside the standard library but the
// signed-note and Merkle libraries and polc itself.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "polc.dev/polc/cmd/certverify").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(pkg, "cuelang.org/"), strings.HasPrefix(pkg, "github.com/open-policy-agent/"):
			t.Errorf("certverify depends on %s", pkg)
		case pkg == "net" || strings.HasPrefix(pkg, "net/") || pkg == "crypto/tls" || pkg == "os/exec":
			t.Errorf("certverify links %s: no network or subprocess path may exist", pkg)
		case !strings.Contains(strings.Split(pkg, "/")[0], "."):
			// standard library
		case pkg == "golang.org/x/mod/sumdb/note",
			strings.HasPrefix(pkg, "github.com/transparency-dev/merkle"),
			strings.HasPrefix(pkg, "polc.dev/polc/"):
		default:
			t.Errorf("unexpected dependency %s", pkg)
		}
	}
}

// TestCodesDocumented checks that docs/certverify.md has one table row per
// finding code, with the exit code its default severity gives.
func TestCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/certverify.md")
	if err != nil {
		t.Fatal(err)
	}
	exit := map[chain.Severity]string{chain.SeverityError: "1", chain.SeverityUnsupported: "2", chain.SeverityInconclusive: "3", chain.SeverityWarning: "0"}
	for _, c := range chain.Codes {
		re := regexp.MustCompile("(?m)^\\| `" + string(c) + "` \\| ([0-3])[^|]*\\|")
		m := re.FindSubmatch(doc)
		if m == nil {
			t.Errorf("code %s is not documented in docs/certverify.md", c)
			continue
		}
		if string(m[1]) != exit[c.DefaultSeverity()] {
			t.Errorf("code %s: documented exit %s, severity %s gives %s", c, m[1], c.DefaultSeverity(), exit[c.DefaultSeverity()])
		}
	}
	rows := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| [0-3]").FindAllSubmatch(doc, -1)
	if len(rows) != len(chain.Codes) {
		t.Errorf("docs list %d codes, chain.Codes has %d", len(rows), len(chain.Codes))
	}
}
