package pgstore_test

import (
	"context"
	"testing"

	"polc.dev/polc/executor/statestore/statetest"
	"polc.dev/polc/internal/pgtest"
	"polc.dev/polc/pgstore"
)

// stateSubject is the PostgreSQL state store under the suite SQLite
// passes; another handle is another connection pool on the same schema.
var stateSubject = statetest.Subject{Open: func(t *testing.T) (statetest.Store, func() statetest.Store) {
	dsn := pgtest.Schema(t)
	open := func() statetest.Store {
		s, err := pgstore.OpenState(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(), open
}}

func TestStateConformance(t *testing.T) { statetest.Run(t, stateSubject) }

func TestConcurrentStateConformance(t *testing.T) { statetest.RunConcurrent(t, stateSubject) }
