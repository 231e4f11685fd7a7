package polccli

import (
	"polc.dev/polc/executor/statestore"
)

// openState opens the SQLite store of --state: the durable profile's state
// and budget ledger, or the governed profiles' budget ledger. why is the
// usage error when path is empty.
func openState(e *env, path, why string) (*statestore.SQLite, func(), error) {
	if path == "" {
		return nil, nil, usagef("%s", why)
	}
	path = e.abs(path)
	st, err := statestore.OpenSQLite(path)
	if err != nil {
		return nil, nil, usagef("--state %s: %v", path, err)
	}
	return st, func() { st.Close() }, nil
}
