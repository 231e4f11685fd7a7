package pgstore

// SetBeforeCommit sets the hook run before each group's COMMIT (tests).
func SetBeforeCommit(s *Evidence, f func(records int)) { s.beforeCommit = f }
