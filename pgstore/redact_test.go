package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"polc.dev/polc/pgstore"
)

// TestRedactHidesEverySecret: Redact hid password but not the other secret
// pgx takes in a DSN, sslpassword (the passphrase of the client key); and a
// password query parameter holding a raw ';' was dropped by url.Query (an
// "invalid semicolon separator" it ignores), so it was left in clear. Both
// would appear in error messages, the store's Name, and the "store" field
// polc run prints for a PostgreSQL evidence store.
func TestRedactHidesEverySecret(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u@h/db?sslpassword=s3cret&sslkey=/k",
		"postgres://u@h/db?password=s3cret;x",
		"postgres://u:s3cret@h/db",
		"postgresql://h/db?pass%77ord=s3cret",
		"postgres://h/db?a=1;password=s3cret",
		"host=/tmp password=s3cret",
	} {
		if got := pgstore.Redact(dsn); strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) leaks the secret: %s", dsn, got)
		}
	}
}

// FuzzRedact: whatever surrounds a secret in a DSN, Redact's output never
// contains it. The secret (the marker) is put where the driver takes a
// secret: the userinfo's password and the value of a password or
// sslpassword parameter (its name also percent-encoded), with fuzzed text
// before and after it. Where the driver's own parser says where the marker
// went (the password), it is the judge: a marker the driver takes as the
// password must not be printed; the parameter forms are judged by the
// URI grammar ('&' alone separates parameters), so a marker printed
// there is a leak whatever else the text holds.
func FuzzRedact(f *testing.F) {
	for _, seed := range [][3]string{
		{"u", "", "/db"}, {"u", ";x", "/db?sslkey=/k"}, {"", "x@y", "/db"}, {"u?a=", "#f", ""},
		{"a=1", ";x", "b=2"}, {"a=1&c", "x y", "b=%zz"}, {"", "%41", "&&"}, {"u", "s3/x", ""}, {"u", "", "/x"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	const marker = "S3CRETMARK"
	f.Fuzz(func(t *testing.T, a, b, c string) {
		leak := func(dsn string) {
			if got := pgstore.Redact(dsn); strings.Contains(got, marker) {
				t.Fatalf("Redact(%q) = %q: the secret is printed", dsn, got)
			}
		}
		// The userinfo's password, where the driver finds one.
		dsn := "postgres://" + a + ":" + b + marker + c + "@h/db"
		// Where the driver refuses the DSN, its error prints Redact's
		// text, which must not show what may be a password either
		// (TestRedactPasswordWithSlash).
		if cfg, err := pgconn.ParseConfig(dsn); err != nil || strings.Contains(cfg.Password, marker) {
			leak(dsn)
		}
		// A secret parameter: its value runs to the next '&'.
		for _, name := range []string{"password", "sslpassword", "pass%77ord", "ssl%70assword"} {
			v := strings.ReplaceAll(b, "&", "") + marker + strings.ReplaceAll(c, "&", "")
			if strings.Contains(a, marker) {
				continue
			}
			dsn := "postgres://u@h/db?" + a + "&" + name + "=" + v
			leak(dsn)
			leak("postgresql://u@h/db?" + name + "=" + v + "&" + a)
		}
	})
}

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
