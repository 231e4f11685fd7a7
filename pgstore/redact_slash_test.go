package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"polc.dev/polc/pgstore"
)

// TestRedactPasswordWithSlash: a password holding an unescaped '/' makes
// the driver refuse the DSN (it reads the text before '/' as host:port),
// and OpenEvidence then prints Redact(dsn). The '@' that ends the password
// lies after the '/', so the driver's rule finds no userinfo: Redact must
// print none of such a DSN.
func TestRedactPasswordWithSlash(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:s3cret/x@h/db",
		"postgres://u:s3/cret@h:5432/db",
	} {
		if got := pgstore.Redact(dsn); strings.Contains(got, "s3") {
			t.Errorf("Redact(%q) = %q: the password is printed", dsn, got)
		}
		_, err := pgstore.OpenEvidence(context.Background(), dsn, pgstore.EvidenceOptions{RetryFor: -1})
		if err != nil && strings.Contains(err.Error(), "s3") {
			t.Errorf("OpenEvidence(%q): %v: the password is printed", dsn, err)
		}
	}
}
