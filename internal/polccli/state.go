package polccli

import (
	"context"

	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
	"polc.dev/polc/pgstore"
)

// stateStore is what --state opens: the durable profile's state, the
// budget ledger and the approval nonce ledger.
type stateStore interface {
	executor.StateStore
	executor.BudgetLedger
	executor.ApprovalLedger
}

// openState opens the store of --state: a SQLite file, or PostgreSQL
// when the flag is a postgres:// DSN (docs/scale.md). why is the usage
// error when path is empty.
func openState(e *env, path, why string) (stateStore, func(), error) {
	if path == "" {
		return nil, nil, usagef("%s", why)
	}
	if pgstore.IsDSN(path) {
		st, err := pgstore.OpenState(context.Background(), path)
		if err != nil {
			return nil, nil, usagef("--state %s: %v", pgstore.Redact(path), err)
		}
		return st, func() { st.Close() }, nil
	}
	path = e.abs(path)
	st, err := statestore.OpenSQLite(path)
	if err != nil {
		return nil, nil, usagef("--state %s: %v", path, err)
	}
	return st, func() { st.Close() }, nil
}
