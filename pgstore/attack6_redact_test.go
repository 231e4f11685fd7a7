package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"polc.dev/polc/pgstore"
)

// TestAttack6RedactPasswordWithSlash: a password holding an unescaped '/'
// (or '?') makes the driver refuse the DSN (it reads the text before '/'
// as host:port), and OpenEvidence then prints Redact(dsn), which shows
// the userinfo's password in clear: the '@' that ends it lies after the
// '/', so Redact sees no userinfo at all.
func TestAttack6RedactPasswordWithSlash(t *testing.T) {
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
