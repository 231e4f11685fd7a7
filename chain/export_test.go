package chain

// Explained is how many times a line or payload has been explained (see
// explained) since the test binary started.
func Explained() int64 { return explained.Load() }
