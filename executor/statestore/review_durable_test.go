package statestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore/internal/fixture"
)

// ---- findings ----

// A database OpenSQLite refuses is left exactly as it was. The writer's DSN
// set journal_mode=WAL before the schema was checked, so pointing the store
// at another application's database (rollback journal) refused it and
// converted it to WAL on the way: the file header changed for good, and
// that application's next reader needed WAL support and a -shm file.
func TestOpenRefusedDatabaseLeftUntouched(t *testing.T) {
	t.Parallel()
	for name, setup := range map[string]string{
		"foreign": "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users(name) VALUES ('ada');",
		"newer":   fmt.Sprintf("CREATE TABLE schema_version(version INTEGER NOT NULL) STRICT; INSERT INTO schema_version VALUES (%d);", SchemaVersion+1),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "app.db")
			db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(delete)")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(setup); err != nil {
				t.Fatal(err)
			}
			db.Close()
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			openRefused(t, path)
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("the refused database changed (header byte 18..19 before %v, after %v: 1 1 is rollback journal, 2 2 WAL)", before[18:20], after[18:20])
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("directory holds %v, want only app.db", names)
			}
		})
	}
}

// A projector name is bound to the projection version its cursor was
// committed under. The cursor is kept per name, so a version-2 projector
// run under a version-1 name continued from version 1's cursor and never
// applied the records before it under version 2 (and the two running side
// by side moved one cursor between them, each skipping what the other
// applied). ApplyProjection now refuses the other version; nothing moves.
func TestApplyProjectionRefusesOtherVersionUnderName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	fixture.MustApply(t, s, "ops", []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op0")}, "1")
	err := s.ApplyProjection(ctx, "ops", 2, []executor.ProjectedRecord{fixture.Started("c", "r1", 1, "op1")}, "2")
	var ce *executor.StateConflictError
	if !errors.As(err, &ce) || ce.Key != "projector ops" {
		t.Fatalf("err = %v, want *executor.StateConflictError on projector ops", err)
	}
	if !strings.Contains(err.Error(), "version 1") || !strings.Contains(err.Error(), "new projector name") {
		t.Errorf("message %q should name the committed version and the remedy", err)
	}
	if cur, _ := s.ProjectionCursor(ctx, "ops"); cur != "1" {
		t.Errorf("cursor = %q, want 1", cur)
	}
	db := raw(t, s.Path())
	if n := count(t, db, "SELECT count(*) FROM projected_records"); n != 1 {
		t.Errorf("%d projected rows, want 1", n)
	}
	if _, ok, _ := s.Operation(ctx, "op1"); ok {
		t.Error("op1 applied by the refused batch")
	}
	// The version the name was committed under goes on; the new version
	// under a new name starts from the beginning.
	fixture.MustApply(t, s, "ops", []executor.ProjectedRecord{fixture.Started("c", "r1", 1, "op1")}, "2")
	if err := s.ApplyProjection(ctx, "ops-v2", 2, []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op0"), fixture.Started("c", "r1", 1, "op1")}, "2"); err != nil {
		t.Fatal(err)
	}
}

// A record's content never changes, so a replay with another chain_hash is
// a conflict whatever the version. Under a new version it was inserted as a
// new row and its operation row (derived from the first content) kept, so
// changed evidence was projected without complaint.
func TestApplyProjectionConflictAcrossVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	fixture.MustApply(t, s, "ops", []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op0")}, "1")
	changed := fixture.Started("c", "r0", 0, "op0")
	changed.ChainHash = strings.Repeat("ee", 32)
	batch := []executor.ProjectedRecord{fixture.Started("c", "r9", 9, "op9"), changed}
	err := s.ApplyProjection(ctx, "ops-v2", 2, batch, "1")
	var pe *executor.ProjectionConflictError
	if !errors.As(err, &pe) || pe.RecordID != "r0" || pe.Got != changed.ChainHash {
		t.Fatalf("err = %v, want *executor.ProjectionConflictError for r0", err)
	}
	db := raw(t, s.Path())
	if n := count(t, db, "SELECT count(*) FROM projected_records"); n != 1 {
		t.Errorf("%d projected rows, want 1", n)
	}
	if cur, _ := s.ProjectionCursor(ctx, "ops-v2"); cur != "" {
		t.Errorf("cursor = %q, want none", cur)
	}
	// The unchanged record under the new version is applied.
	if err := s.ApplyProjection(ctx, "ops-v2", 2, []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op0")}, "1"); err != nil {
		t.Fatal(err)
	}
}

// A database that says schema version 1 but lacks a table, an index or a
// column of it is refused at open with *SchemaVersionError naming what is
// wrong. It opened (a missing operations or projection_cursors table
// failed the first ApplyProjection with "no such table", a missing
// operations table did not fail at all: operation state was silently never
// derived) or failed with a bare "SQL logic error" without the path.
func TestOpenRefusesDamagedSchema(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{
		"DROP TABLE operations",
		"DROP TABLE projection_cursors",
		"DROP TABLE outbox",
		"ALTER TABLE attempts DROP COLUMN profile",
		"DROP INDEX operations_by_run",
	} {
		t.Run(damage, func(t *testing.T) {
			t.Parallel()
			path := alteredStore(t, damage)
			ve, err := openRefused(t, path)
			if ve.Found != SchemaVersion || ve.Problem == "" || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v (%+v), want found %d, the problem and the path", err, ve, SchemaVersion)
			}
		})
	}
	// Objects the schema does not have (an operator's own index) are fine.
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := raw(t, path).Exec("CREATE INDEX mine ON attempts(outcome)"); err != nil {
		t.Fatal(err)
	}
	s, err = OpenSQLite(path)
	if err != nil {
		t.Fatalf("extra index: %v", err)
	}
	s.Close()
}

// An outbox payload that is JSON to Go but nests deeper than SQLite's
// json_valid accepts (1000 levels) is refused as input, with a reason that
// says so, not as "CHECK constraint failed: json_valid(payload_json)" for
// a payload the caller's own json.Valid accepts.
func TestDeepPayloadRefusedClearly(t *testing.T) {
	t.Parallel()
	s := open(t)
	ok := fixture.Attempt("r", "ok", "m-ok")
	ok.Outbox[0].PayloadJSON = strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	fixture.MustCommit(t, s, ok)
	deep := fixture.Attempt("r", "deep", "m-deep")
	deep.Outbox[0].PayloadJSON = strings.Repeat("[", 1001) + strings.Repeat("]", 1001)
	err := s.CommitAttempt(context.Background(), deep)
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "outbox[0]") || !strings.Contains(err.Error(), "1000 levels") {
		t.Fatalf("err = %v, want an InputError naming outbox[0] and the nesting limit", err)
	}
	if _, found, _ := s.Attempt(context.Background(), "deep"); found {
		t.Error("the refused attempt was committed")
	}
}

// ---- what held up (kept as regression tests) ----

// Times are stored as given: a clock stepped back (FinishedAt before
// StartedAt, a later attempt of the run starting before the first) is kept
// and read back exactly, never refused (that would lose a finished attempt).
func TestClockSteppedBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	a := fixture.Attempt("r", "a1", "m1")
	a.FinishedAt = a.StartedAt.Add(-time.Hour)
	fixture.MustCommit(t, s, a)
	b := fixture.Attempt("r", "a2", "m2")
	b.StartedAt, b.FinishedAt = a.StartedAt.Add(-24*time.Hour), a.StartedAt.Add(-24*time.Hour)
	fixture.MustCommit(t, s, b)
	got, _, err := s.Attempt(ctx, "a1")
	if err != nil || !got.FinishedAt.Equal(a.FinishedAt) || !got.StartedAt.Equal(a.StartedAt) {
		t.Errorf("a1: %v %v err %v", got.StartedAt, got.FinishedAt, err)
	}
	r, _, err := s.Run(ctx, "r")
	if err != nil || !r.CreatedAt.Equal(a.StartedAt) || len(r.Attempts) != 2 || r.Attempts[0] != "a1" {
		t.Errorf("run: %+v err %v (created_at is the first committed attempt's start)", r, err)
	}
}

// A context cancelled inside a transaction rolls all of it back, returns
// the writer connection and leaves the store usable.
func TestCancelMidTransaction(t *testing.T) {
	t.Parallel()
	s := open(t)
	bg := context.Background()
	for _, at := range []string{"run", "attempt", "outbox[0]", "outbox[1]"} {
		ctx, cancel := context.WithCancel(bg)
		s.hook = func(step string) error {
			if step == at {
				cancel()
			}
			return nil
		}
		a := fixture.Attempt("r-"+at, "a-"+at, "m1-"+at, "m2-"+at)
		if err := s.CommitAttempt(ctx, a); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want context.Canceled", at, err)
		}
		s.hook = nil
		absent(t, s, a)
		fixture.MustCommit(t, s, fixture.Attempt("r-"+at, "ok-"+at, "ok-m-"+at))
	}
	for _, at := range []string{"record[0]", "cursor"} {
		ctx, cancel := context.WithCancel(bg)
		s.hook = func(step string) error {
			if step == at {
				cancel()
			}
			return nil
		}
		if err := s.ApplyProjection(ctx, "p", 1, []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op0")}, "1"); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want context.Canceled", at, err)
		}
		s.hook = nil
		if cur, _ := s.ProjectionCursor(bg, "p"); cur != "" {
			t.Errorf("%s: cursor = %q after a cancelled apply", at, cur)
		}
		if _, ok, _ := s.Operation(bg, "op0"); ok {
			t.Errorf("%s: op0 applied by a cancelled apply", at)
		}
	}
	fixture.MustApply(t, s, "p", []executor.ProjectedRecord{fixture.Started("c", "r0", 0, "op0")}, "1")
}

// Several stores on one new file (as several processes would be) all open
// it, create the schema once, and commit concurrently without SQLITE_BUSY;
// reads beside the writes succeed.
func TestManyStoresOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	const n = 6
	stores := make([]*SQLite, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = OpenSQLite(path) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	for i := range n {
		wg.Go(func() {
			for j := range 10 {
				id := fmt.Sprintf("%d-%d", i, j)
				if err := stores[i].CommitAttempt(context.Background(), fixture.Attempt("r", id, "m"+id)); err != nil {
					t.Errorf("commit %s: %v", id, err)
				}
				if _, _, err := stores[(i+1)%n].Run(context.Background(), "r"); err != nil {
					t.Errorf("run: %v", err)
				}
			}
		})
	}
	wg.Wait()
	r, _, err := stores[0].Run(context.Background(), "r")
	if err != nil || len(r.Attempts) != n*10 {
		t.Errorf("run: %d attempts, err %v; want %d", len(r.Attempts), err, n*10)
	}
	if c := count(t, raw(t, path), "SELECT count(*) FROM schema_version"); c != 1 {
		t.Errorf("%d schema_version rows", c)
	}
}

// Unusual but plain paths work and reopen to the same data.
func TestOpenUnusualPaths(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real dir ü"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "real dir ü"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		filepath.Join(base, "with space.db"),
		filepath.Join(base, "ünïcødé 日本.db"),
		filepath.Join(base, "link", "s.db"),
		filepath.Join(base, "hash#frag.db"),
		filepath.Join(base, "pct%20x.db"),
		filepath.Join(base, "semi;colon&a=1.db"),
	} {
		s, err := OpenSQLite(p)
		if err != nil {
			t.Errorf("%q: %v", p, err)
			continue
		}
		fixture.MustCommit(t, s, fixture.Attempt("r", "a", "m"))
		s.Close()
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%q: %v (the file must be at the path given)", p, err)
		}
		s, err = OpenSQLite(p)
		if err != nil {
			t.Errorf("reopen %q: %v", p, err)
			continue
		}
		if _, ok, err := s.Attempt(context.Background(), "a"); !ok || err != nil {
			t.Errorf("reopen %q: ok=%v err=%v", p, ok, err)
		}
		s.Close()
	}
}

// A large payload commits and reads back whole.
func TestLargeOutboxPayload(t *testing.T) {
	t.Parallel()
	s := open(t)
	big := `{"x":"` + strings.Repeat("a", 16<<20) + `"}`
	a := fixture.Attempt("r", "big", "m")
	a.Outbox[0].PayloadJSON = big
	fixture.MustCommit(t, s, a)
	got, ok, err := s.Attempt(context.Background(), "big")
	if err != nil || !ok || len(got.Outbox) != 1 || got.Outbox[0].PayloadJSON != big {
		t.Errorf("read back: ok=%v err=%v", ok, err)
	}
}

// A file that is not a database is refused with its path in the message.
func TestOpenGarbageFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQLite(path)
	if err == nil {
		s.Close()
		t.Fatal("opened a garbage file")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a database") {
		t.Errorf("err = %v, want the path and 'not a database'", err)
	}
}

// Two processes on one file: a child process (this test binary) and this
// one open the same new file at once and commit side by side; every commit
// succeeds (the busy timeout covers the other process's write lock) and
// both see all of them.
func TestTwoProcessesOneFile(t *testing.T) {
	if path := os.Getenv("STATESTORE_CHILD_DB"); path != "" {
		s, err := OpenSQLite(path)
		if err != nil {
			fmt.Println("child open:", err)
			os.Exit(3)
		}
		for j := range 40 {
			if err := s.CommitAttempt(context.Background(), fixture.Attempt("r", fmt.Sprintf("child-%d", j), fmt.Sprintf("cm-%d", j))); err != nil {
				fmt.Println("child commit:", err)
				os.Exit(4)
			}
		}
		s.Close()
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("spawns a process")
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestTwoProcessesOneFile$")
	cmd.Env = append(os.Environ(), "STATESTORE_CHILD_DB="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQLite(path)
	if err != nil {
		cmd.Wait()
		t.Fatal(err)
	}
	defer s.Close()
	for j := range 40 {
		fixture.MustCommit(t, s, fixture.Attempt("r", fmt.Sprintf("parent-%d", j), fmt.Sprintf("pm-%d", j)))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	r, _, err := s.Run(context.Background(), "r")
	if err != nil || len(r.Attempts) != 80 {
		t.Errorf("run has %d attempts (err %v), want 80", len(r.Attempts), err)
	}
}

// openRefused opens the store at path, which must fail with a
// *SchemaVersionError, and returns it and the error.
func openRefused(t *testing.T, path string) (*SchemaVersionError, error) {
	t.Helper()
	s, err := OpenSQLite(path)
	var ve *SchemaVersionError
	if !errors.As(err, &ve) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("err = %v, want *SchemaVersionError", err)
	}
	return ve, err
}
