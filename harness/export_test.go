package harness

import "polc.dev/polc/sandbox"

// SetKernelProbe replaces the kernel probe the report follows; the
// returned func restores it.
func SetKernelProbe(f func() sandbox.Report) func() {
	old := kernelProbe
	kernelProbe = f
	return func() { kernelProbe = old }
}
