package statestore_test

import (
	"path/filepath"
	"testing"

	"polc.dev/polc/executor/statestore"
	"polc.dev/polc/executor/statestore/statetest"
)

// subject is SQLite under the state stores' conformance suite (package
// pgstore runs it against PostgreSQL).
var subject = statetest.Subject{Open: func(t *testing.T) (statetest.Store, func() statetest.Store) {
	path := filepath.Join(t.TempDir(), "state.db")
	open := func() statetest.Store {
		s, err := statestore.OpenSQLite(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(), open
}}

func TestStateConformance(t *testing.T) { statetest.Run(t, subject) }

func TestConcurrentStateConformance(t *testing.T) { statetest.RunConcurrent(t, subject) }
