//go:build !unix

package polccli

import "os"

// fileKey is not used where the system gives no file identity.
type fileKey struct{}

// identity: without an inode, a file renamed into place could look like
// the one it replaced, so no ETag is remembered.
func identity(os.FileInfo) (fileKey, bool) { return fileKey{}, false }
