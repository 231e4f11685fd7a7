package polccli

import (
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/statestore"
)

// openState opens the durable profile's SQLite store.
func openState(e *env, path string) (executor.StateStore, func(), error) {
	if path == "" {
		return nil, nil, usagef("the durable profile needs --state FILE (a SQLite database)")
	}
	path = e.abs(path)
	st, err := statestore.OpenSQLite(path)
	if err != nil {
		return nil, nil, usagef("--state %s: %v", path, err)
	}
	return st, func() { st.Close() }, nil
}
