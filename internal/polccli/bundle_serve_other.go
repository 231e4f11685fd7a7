//go:build !unix || aix

package polccli

import "os"

// fileKey is not used where the system gives no file identity.
type fileKey struct{}

// identity: without an inode and a status change time, a file replaced
// could look like the one before, so no ETag is remembered.
func identity(os.FileInfo) (fileKey, bool) { return fileKey{}, false }

func (fileKey) changedAt() int64 { return 0 }
