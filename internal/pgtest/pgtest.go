// Package pgtest gives tests a PostgreSQL database of their own: a fresh
// schema on the server POLC_PG names (a postgres:// DSN; scripts/pg.sh
// starts one). Without POLC_PG the tests that need one skip, saying how to
// start a server, unless POLC_REQUIRE_PG=1 (CI), which makes them fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server returns the DSN of the server POLC_PG names, or skips t (fails it
// when POLC_REQUIRE_PG=1).
func Server(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("POLC_PG")
	if dsn == "" {
		msg := "POLC_PG is not set: no PostgreSQL server for this test (start one with `export POLC_PG=$(scripts/pg.sh start /tmp/polc-pg)`)"
		if os.Getenv("POLC_REQUIRE_PG") == "1" {
			t.Fatal(msg + "; POLC_REQUIRE_PG=1 requires it")
		}
		t.Skip(msg)
	}
	return dsn
}

// Schema creates a schema of its own for t on the server POLC_PG names,
// drops it when t ends, and returns a DSN whose search_path is that
// schema: tests that share a server never see each other's tables.
func Schema(t testing.TB) string {
	t.Helper()
	return SchemaOn(t, Server(t))
}

// SchemaOn is Schema on the server dsn names.
func SchemaOn(t testing.TB, dsn string) string {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect to POLC_PG: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Logf("pgtest: drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Logf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return WithParam(t, dsn, "search_path", name)
}

// WithParam returns dsn with the query parameter key set to value.
func WithParam(t testing.TB, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("pgtest: POLC_PG is not a URL DSN: %v", err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// Script returns the path of scripts/pg.sh.
func Script(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "pg.sh")
}

// Private starts a cluster of t's own with scripts/pg.sh (for tests that
// restart or stop the server, which must not disturb other tests), stops
// it when t ends, and returns its DSN and directory. It needs POLC_PG set
// (a sign that PostgreSQL is installed), or skips as Server does.
func Private(t testing.TB) (dsn, dir string) {
	t.Helper()
	Server(t)
	// Under /tmp, not t.TempDir(): the cluster's owner (run as root, the
	// postgres user) must reach it, and a socket path is short.
	dir, err := os.MkdirTemp("", "polc-pg-")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", Script(t), "start", dir).Output()
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgtest: scripts/pg.sh start: %v\n%s", err, stderrOf(err))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("bash", Script(t), "stop", dir).CombinedOutput(); err != nil {
			t.Logf("pgtest: scripts/pg.sh stop: %v\n%s", err, out)
		}
		os.RemoveAll(dir)
	})
	return strings.TrimSpace(string(out)), dir
}

// Restart restarts the private cluster in dir (connections are cut).
func Restart(t testing.TB, dir string) {
	t.Helper()
	if out, err := exec.Command("bash", Script(t), "restart", dir).CombinedOutput(); err != nil {
		t.Fatalf("pgtest: scripts/pg.sh restart: %v\n%s", err, out)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
