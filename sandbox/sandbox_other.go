//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
)

// Init returns at once: there is no launcher on this system.
func Init() {}

// Command refuses: the sandbox needs Linux (Landlock and namespaces).
func Command(ctx context.Context, spec Spec, argv []string) (*exec.Cmd, error) {
	w := newWireSpec(spec, argv)
	if err := w.validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: the sandbox needs Linux, this is %s", ErrUnsupported, runtime.GOOS)
}

// Probe reports every facet unsupported.
func Probe() Report {
	r := Report{}
	for _, name := range []string{FacetAbstractUnix, FacetCapabilities, FacetEnvironment, FacetFilesystem,
		FacetFilesystemDeny, FacetNetwork, FacetNoNewPrivs, FacetRlimits, FacetSignals} {
		r.Facets = append(r.Facets, Facet{Name: name, State: Unsupported, Reason: "the sandbox needs Linux, this is " + runtime.GOOS})
	}
	sortFacets(r.Facets)
	return r
}

// LauncherMain says that there is no launcher on this system and exits 2.
func LauncherMain() {
	fmt.Fprintf(os.Stderr, "polc-sandbox: the sandbox needs Linux, this is %s\n", runtime.GOOS)
	os.Exit(2)
}

// UseLauncher refuses: the sandbox needs Linux.
func UseLauncher(path string) error {
	return fmt.Errorf("%w: the sandbox needs Linux, this is %s", ErrUnsupported, runtime.GOOS)
}
