package sandbox

import (
	"errors"
	"slices"
	"strings"
)

// ErrUnsupported wraps every Command error that says the running system
// cannot enforce what the Spec asks for (as opposed to an invalid Spec).
var ErrUnsupported = errors.New("sandbox: not enforceable here")

// Exit statuses of the launcher when it did not run the target. A target's own
// exit status passes through unchanged (signals included), so these values
// are only unambiguous together with the one-line "polc sandbox: ..." message
// the launcher writes to stderr.
const (
	// ExitRefused: the spec was invalid or a restriction could not be
	// applied; the target never ran.
	ExitRefused = 125
	// ExitCannotExec: the target was found but execve failed (for example
	// Landlock denied executing it); it never ran.
	ExitCannotExec = 126
	// ExitNotFound: argv[0] was not found; the target never ran.
	ExitNotFound = 127
)

// State is how well the running system enforces one facet of a Spec.
type State string

const (
	// Enforced: the kernel holds the process to this facet as documented.
	Enforced State = "enforced"
	// Degraded: enforced with the documented gaps given in Facet.Reason.
	Degraded State = "degraded"
	// Unsupported: cannot be enforced here; Command refuses a Spec that
	// needs it.
	Unsupported State = "unsupported"
)

// Facet names reported by Probe.
const (
	FacetFilesystem     = "filesystem"      // Read/Write/Execute grants and the system paths
	FacetFilesystemDeny = "filesystem_deny" // Deny
	FacetNetwork        = "network"         // NetworkDeny and NetworkProxy
	FacetSignals        = "signals"         // no signals to processes outside the sandbox
	FacetAbstractUnix   = "abstract_unix"   // no abstract unix sockets created outside the sandbox
	FacetNoNewPrivs     = "no_new_privs"    // no privilege gain through setuid or file capabilities
	FacetCapabilities   = "capabilities"    // every capability dropped, bounding set emptied
	FacetRlimits        = "rlimits"         // Limits
	FacetEnvironment    = "environment"     // exactly Env
)

// Facet is the verdict on one facet.
type Facet struct {
	Name   string `json:"name"`
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// Report is what Probe found. Facets are sorted by name.
type Report struct {
	// Launcher is the program Command starts as the launcher: the dedicated
	// launcher's path, or /proc/self/exe when the running binary is
	// re-executed (see UseLauncher).
	Launcher string `json:"launcher,omitempty"`
	// LandlockABI is the Landlock ABI version the kernel offers (0: none),
	// lowered to 5 when the kernel lacks the fix for signal scoping.
	LandlockABI int `json:"landlock_abi"`
	// UserNetNamespaces says whether a new user and network namespace could be
	// created and its loopback brought up.
	UserNetNamespaces bool    `json:"user_net_namespaces"`
	Facets            []Facet `json:"facets"`
}

// Facet returns the named facet.
func (r Report) Facet(name string) (Facet, bool) {
	i := slices.IndexFunc(r.Facets, func(f Facet) bool { return f.Name == name })
	if i < 0 {
		return Facet{}, false
	}
	return r.Facets[i], true
}

func (r Report) clone() Report {
	r.Facets = slices.Clone(r.Facets)
	return r
}

// Access is a set of rights on a granted path.
type Access uint8

const (
	// AccessRead: read files, list directories.
	AccessRead Access = 1 << iota
	// AccessWrite: AccessRead plus write, truncate, create (no device nodes),
	// remove and rename.
	AccessWrite
	// AccessExecute: AccessRead plus execute.
	AccessExecute
)

// Grant is one path and the rights it gets.
type Grant struct {
	Path   string
	Access Access
}

// systemPaths are granted to every sandboxed process, each only if it exists.
// They are what a dynamically linked program needs to start (the loader, its
// cache and libraries), to look up users, hosts and services and to verify TLS
// certificates, plus the harmless devices and /proc. /proc gives no access to
// other processes' private files: Landlock refuses ptrace-class access to
// processes outside the sandbox. /etc as a whole is not granted, so its
// secrets (shadow, ssh host keys, ssl/private) stay out of reach.
var systemPaths = []Grant{
	{"/usr", AccessExecute},
	{"/bin", AccessExecute},
	{"/sbin", AccessExecute},
	{"/lib", AccessExecute},
	{"/lib32", AccessExecute},
	{"/lib64", AccessExecute},
	{"/etc/ld.so.cache", AccessRead},
	{"/etc/ld.so.conf", AccessRead},
	{"/etc/ld.so.conf.d", AccessRead},
	{"/etc/passwd", AccessRead},
	{"/etc/group", AccessRead},
	{"/etc/nsswitch.conf", AccessRead},
	{"/etc/hosts", AccessRead},
	{"/etc/host.conf", AccessRead},
	{"/etc/resolv.conf", AccessRead},
	{"/etc/gai.conf", AccessRead},
	{"/etc/services", AccessRead},
	{"/etc/protocols", AccessRead},
	{"/etc/localtime", AccessRead},
	{"/etc/ssl/certs", AccessRead},
	{"/etc/pki/tls/certs", AccessRead},
	{"/dev/null", AccessWrite},
	{"/dev/zero", AccessRead},
	{"/dev/random", AccessRead},
	{"/dev/urandom", AccessRead},
	{"/proc", AccessRead},
}

// SystemPaths returns the paths granted to every sandboxed process in
// addition to the Spec's, each only if it exists on the running system. A
// Spec's Deny applies to them too.
func SystemPaths() []Grant { return slices.Clone(systemPaths) }

func sortFacets(fs []Facet) {
	slices.SortFunc(fs, func(a, b Facet) int { return strings.Compare(a.Name, b.Name) })
}
