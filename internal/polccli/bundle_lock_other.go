//go:build !unix

package polccli

// lockPublish does not lock where flock is not available: publishes to one
// directory must not run at once there (docs/scale.md).
func lockPublish(string) (unlock func(), err error) { return func() {}, nil }
