//go:build linux

package sandbox

import (
	"os"
	"runtime"
	"testing"
)

// BenchmarkPrivateMounts measures the launcher's mount namespace set-up
// alone (unshare, private propagation, clone, read-only, move back), which
// the noise of a whole spawn on a busy machine hides. Each iteration runs
// on a fresh OS thread that is discarded afterwards (a goroutine that exits
// locked takes its thread with it), so the test process keeps its mounts.
func BenchmarkPrivateMounts(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs CAP_SYS_ADMIN without a user namespace")
	}
	ws := b.TempDir()
	w := &wireSpec{Write: []string{ws, b.TempDir()}}
	for b.Loop() {
		errc := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			errc <- privateMounts(w)
		}()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}
