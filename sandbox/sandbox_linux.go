//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Launcher roles, the value of launcherEnv.
const (
	roleExec  = "exec"  // restrict this process and execve the target
	roleProxy = "proxy" // NetworkProxy: bring up lo, forward, run an exec-role child
	roleProbe = "probe" // Probe's namespace check

	launcherArg0 = "polc-sandbox"
	selfExe      = "/proc/self/exe"

	// minABI is the lowest Landlock ABI Command accepts: every sandboxed
	// process is scoped for signals and abstract unix sockets (ABI 6).
	minABI = 6
)

var initCalled atomic.Bool

// Init must be the first call in main, and in TestMain of every test binary
// that runs Command. When the process was started by Command as a sandbox
// launcher (its environment holds POLC_SANDBOX_LAUNCHER), Init acts as the
// launcher and never returns: it exits with the target's status or a launcher
// status (ExitRefused, ExitCannotExec, ExitNotFound). Otherwise it returns at
// once. Package init functions of the program run before Init in the launcher
// too, so they must not have side effects on their own.
func Init() {
	role, ok := os.LookupEnv(launcherEnv)
	if !ok {
		initCalled.Store(true)
		return
	}
	// Every restriction below is applied to this OS thread, which then calls
	// execve (or forks the target): the Go runtime must never move this
	// goroutine or hand the thread to another goroutine.
	runtime.LockOSThread()
	os.Exit(launch(role))
}

// Command returns a Cmd that, when started, runs argv under spec: it starts
// the running executable (/proc/self/exe) as the launcher, which reads spec
// from an inherited pipe, applies every restriction to itself and execs argv
// (or, under NetworkProxy, stays as the forwarder and runs argv as its child).
//
// Preconditions: Init was called at the start of main; argv is non-empty.
// The caller may set Stdin, Stdout, Stderr, Dir, WaitDelay and fields of the
// returned Cmd.SysProcAttr (Setsid, Setpgid, Pdeathsig, ...), but must not
// replace SysProcAttr (it carries the namespace flags; a launcher that finds
// itself in the caller's namespaces refuses to run) nor set Path, Args, Env or
// ExtraFiles: files for the target go in spec.ExtraFiles, which the Cmd's
// ExtraFiles carries, followed by the spec pipe (the launcher closes that
// pipe and every descriptor above it before exec). ctx kills the launcher;
// under NetworkProxy the target dies with it (Pdeathsig). The Cmd holds the
// read end of the spec pipe until it is garbage collected; the caller keeps
// owning spec.ExtraFiles and may close them once the Cmd has started.
//
// Command refuses, with an error wrapping ErrUnsupported, a Spec the running
// system cannot enforce (see Probe), and with a plain error an invalid Spec.
func Command(ctx context.Context, spec Spec, argv []string) (*exec.Cmd, error) {
	w := newWireSpec(spec, argv)
	if err := w.validate(); err != nil {
		return nil, err
	}
	if len(spec.ExtraFiles) > maxExtraFiles {
		return nil, fmt.Errorf("sandbox: %d extra files, more than %d", len(spec.ExtraFiles), maxExtraFiles)
	}
	if err := preflight(spec); err != nil {
		return nil, err
	}
	return launcherCmd(ctx, w, spec.ExtraFiles)
}

// preflight refuses what Probe says cannot be enforced.
func preflight(spec Spec) error {
	if !initCalled.Load() {
		return errors.New("sandbox: Init was not called at the start of main, so the launcher cannot run")
	}
	r := Probe()
	need := []string{FacetFilesystem, FacetSignals, FacetAbstractUnix, FacetNoNewPrivs, FacetCapabilities, FacetEnvironment}
	if len(spec.Deny) > 0 {
		need = append(need, FacetFilesystemDeny)
	}
	if spec.Network != NetworkAllow {
		need = append(need, FacetNetwork)
	}
	if spec.Limits != (Limits{}) {
		need = append(need, FacetRlimits)
	}
	for _, name := range need {
		f, _ := r.Facet(name)
		if f.State == Unsupported {
			return fmt.Errorf("%w: %s: %s", ErrUnsupported, name, f.Reason)
		}
	}
	if spec.Limits.Processes > 0 {
		uid := os.Getuid()
		if spec.Network != NetworkAllow {
			uid = os.Geteuid() // uid 0 in the new namespace maps to the caller's euid
		}
		exempt, err := nprocExempt(uid)
		if err != nil {
			return fmt.Errorf("%w: rlimits: cannot tell whether a Processes limit would hold: %v", ErrUnsupported, err)
		}
		if exempt {
			return fmt.Errorf("%w: rlimits: a Processes limit is void for a process running as host uid 0 (the kernel exempts the root user from RLIMIT_NPROC)", ErrUnsupported)
		}
	}
	return nil
}

// launcherCmd builds the launcher's Cmd for an already validated spec; the
// target inherits extra at descriptors 3 and up, the launcher the spec pipe
// right after them.
func launcherCmd(ctx context.Context, w wireSpec, extra []*os.File) (*exec.Cmd, error) {
	role := roleExec
	attr := &syscall.SysProcAttr{}
	if w.Network != NetworkAllow {
		var err error
		if w.HostNetNS, err = nsOf("net"); err != nil {
			return nil, err
		}
		if w.HostUserNS, err = nsOf("user"); err != nil {
			return nil, err
		}
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	if w.Network == NetworkAllow && os.Geteuid() != 0 {
		// The launcher's private mount namespace needs CAP_SYS_ADMIN: in a
		// user namespace of its own, with the same mapping as above.
		attr.Cloneflags = syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	if w.Network == NetworkProxy || len(w.Forwards) > 0 {
		role = roleProxy
	}
	data, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("sandbox: encoding spec: %w", err)
	}
	if len(data) > maxWireBytes {
		return nil, fmt.Errorf("sandbox: spec is %d bytes encoded, more than %d", len(data), maxWireBytes)
	}
	l := currentLauncher()
	if l.err != nil {
		return nil, fmt.Errorf("%w: launcher %s: %v", ErrUnsupported, l.path, l.err)
	}
	r, err := specPipe(data)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, l.path)
	cmd.Args = []string{launcherArg0}
	cmd.Env = launcherEnviron(role, len(extra))
	cmd.ExtraFiles = append(slices.Clone(extra), r)
	cmd.SysProcAttr = attr
	return cmd, nil
}

// maxExtraFiles bounds Spec.ExtraFiles: descriptors stay below 1024, the
// usual soft RLIMIT_NOFILE a child starts with.
const maxExtraFiles = 1000

// specFDEnv, in the launcher's environment, is the descriptor of the spec
// pipe: 3 plus the number of files passed to the target before it.
const specFDEnv = "POLC_SANDBOX_SPEC_FD"

// launcherEnviron is the launcher's whole environment.
func launcherEnviron(role string, extra int) []string {
	return []string{launcherEnv + "=" + role, specFDEnv + "=" + strconv.Itoa(3+extra)}
}

// specFDFromEnv returns the spec pipe's descriptor from the environment,
// strictly: decimal digits without a sign or leading zero, from 3 to
// 3+maxExtraFiles.
func specFDFromEnv() (int, error) {
	v, ok := os.LookupEnv(specFDEnv)
	if !ok {
		return 0, fmt.Errorf("%s is not set", specFDEnv)
	}
	bad := v == "" || len(v) > 4 || v[0] == '0'
	for i := 0; i < len(v) && !bad; i++ {
		bad = v[i] < '0' || v[i] > '9'
	}
	n := 0
	if !bad {
		n, _ = strconv.Atoi(v)
	}
	if bad || n < 3 || n > 3+maxExtraFiles {
		return 0, fmt.Errorf("%s=%q is not a descriptor from 3 to %d", specFDEnv, v, 3+maxExtraFiles)
	}
	return n, nil
}

// specPipe returns the read end of a pipe that holds data and whose write end
// is closed, so the reader sees data then EOF.
func specPipe(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: spec pipe: %w", err)
	}
	fail := func(err error) (*os.File, error) {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sandbox: spec pipe: %w", err)
	}
	if len(data) > 1<<16 { // the default pipe capacity
		if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, len(data)); err != nil {
			return fail(err)
		}
	}
	if _, err := w.Write(data); err != nil {
		return fail(err)
	}
	if err := w.Close(); err != nil {
		r.Close()
		return nil, fmt.Errorf("sandbox: spec pipe: %w", err)
	}
	return r, nil
}

func nsOf(kind string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/"+kind, &st); err != nil {
		return nsID{}, fmt.Errorf("sandbox: %s namespace: %w", kind, err)
	}
	return nsID{Dev: st.Dev, Ino: st.Ino}, nil
}

// nprocExempt reports whether uid, as seen in this process's user namespace,
// is uid 0 of the parent namespace: the kernel never enforces RLIMIT_NPROC
// for the root user. Looking one level up is conservative: a uid that is 0
// one level up but not on the host is reported exempt too.
func nprocExempt(uid int) (bool, error) {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true, err
	}
	for line := range strings.Lines(string(data)) {
		var inside, outside, count uint64
		if _, err := fmt.Sscan(line, &inside, &outside, &count); err != nil {
			return true, fmt.Errorf("uid_map: %w", err)
		}
		if u := uint64(uid); u >= inside && u-inside < count {
			return outside+(u-inside) == 0, nil
		}
	}
	return true, fmt.Errorf("uid %d is not mapped", uid)
}

// detectABI returns the kernel's Landlock ABI, lowered to 5 when the kernel
// lacks the signal-scoping fix (erratum 2), as go-landlock does.
func detectABI() int {
	v, err := landlockABIVersion()
	if err != nil {
		return 0
	}
	if v >= 6 {
		errata, err := landlockErrata()
		if err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	return v
}

var (
	probeMu  sync.Mutex
	probed   *Report
	probedBy launcherChoice
)

// Probe reports what the running system can enforce: the launcher used,
// the Landlock ABI, whether a user and network namespace can be created
// (tried once by starting the launcher in one; needs Init), and a verdict
// per facet. The result is computed once per process (again after
// UseLauncher) and is the same for a given kernel, configuration, user and
// launcher.
func Probe() Report {
	l := currentLauncher()
	probeMu.Lock()
	defer probeMu.Unlock()
	if probed == nil || probedBy.path != l.path {
		r := probe(l)
		probed, probedBy = &r, l
	}
	return probed.clone()
}

func probe(l launcherChoice) Report {
	if l.err != nil {
		// Nothing runs without a launcher.
		r := Report{Launcher: l.path}
		for _, name := range []string{FacetAbstractUnix, FacetCapabilities, FacetEnvironment, FacetFilesystem,
			FacetFilesystemDeny, FacetNetwork, FacetNoNewPrivs, FacetRlimits, FacetSignals} {
			r.Facets = append(r.Facets, Facet{Name: name, State: Unsupported, Reason: "the launcher " + l.path + " is not trusted: " + l.err.Error()})
		}
		sortFacets(r.Facets)
		return r
	}
	abi := detectABI()
	nsErr := probeNamespaces(l.path)
	r := Report{Launcher: l.path, LandlockABI: abi, UserNetNamespaces: nsErr == nil}
	add := func(name string, st State, reason string) {
		r.Facets = append(r.Facets, Facet{Name: name, State: st, Reason: reason})
	}
	lowABI := func(need int, what string) string {
		return fmt.Sprintf("Landlock ABI %d; %s needs ABI %d and the launcher ABI %d", abi, what, need, minABI)
	}

	scErr := probeSeccomp()
	switch {
	case abi < minABI:
		add(FacetFilesystem, Unsupported, lowABI(3, "filesystem confinement (refer, truncate)"))
		add(FacetFilesystemDeny, Unsupported, lowABI(3, "filesystem confinement"))
	case os.Geteuid() != 0 && nsErr != nil:
		add(FacetFilesystem, Unsupported, "the private mount namespace (read-only outside the write roots) needs a user namespace: "+nsErr.Error())
		add(FacetFilesystemDeny, Unsupported, "the private mount namespace needs a user namespace: "+nsErr.Error())
	case scErr != nil:
		add(FacetFilesystem, Unsupported, "the launcher's seccomp filter (io_uring, unix sockets) cannot be installed: "+scErr.Error())
		add(FacetFilesystemDeny, Unsupported, "the launcher's seccomp filter cannot be installed: "+scErr.Error())
	default:
		gaps := []string{"Landlock does not restrict chmod, utime, extended attributes, stat or chdir: outside the write roots every mount is read-only (the process has a private mount namespace), so metadata changes there fail, but inside a write root the process can change the mode, times and extended attributes of any path it owns, denied paths included; stat and chdir work on every path"}
		if unixSocketsFiltered(abi) {
			gaps = append(gaps, fmt.Sprintf("Landlock ABI %d does not restrict connecting to pathname unix sockets (ABI 9 does), so a seccomp filter refuses creating unix sockets (socket(AF_UNIX) and datagram socketpairs fail with EACCES; stream socketpairs work): programs that need a unix socket fail", abi))
		}
		gaps = append(gaps, "io_uring is refused (EPERM): its operations bypass the seccomp filter's checks")
		add(FacetFilesystem, Degraded, strings.Join(gaps, "; "))
		add(FacetFilesystemDeny, Degraded, "Landlock only grants: a denied path is carved out by granting each sibling on the way to it separately at spawn, so nothing can be created, removed or renamed directly in a directory on that way, such a directory cannot be listed when a denied directory lies beneath it, entries other processes add there later stay inaccessible, and a hard link to a denied file inside a denied directory that exists elsewhere under a grant stays reachable")
	}
	switch {
	case abi < minABI:
		add(FacetNetwork, Unsupported, lowABI(4, "TCP rules"))
	case nsErr != nil:
		add(FacetNetwork, Unsupported, "cannot create a user and network namespace: "+nsErr.Error())
	case scErr != nil:
		add(FacetNetwork, Unsupported, "the launcher's seccomp filter (unix sockets, address families) cannot be installed: "+scErr.Error())
	default:
		add(FacetNetwork, Enforced, "")
	}
	if abi < minABI {
		add(FacetSignals, Unsupported, lowABI(6, "signal scoping (with the erratum 2 fix)"))
		add(FacetAbstractUnix, Unsupported, lowABI(6, "abstract unix socket scoping"))
	} else {
		add(FacetSignals, Enforced, "")
		add(FacetAbstractUnix, Enforced, "")
	}
	add(FacetNoNewPrivs, Enforced, "")
	add(FacetCapabilities, Enforced, "")
	if exempt, err := nprocExempt(os.Getuid()); err != nil || exempt {
		add(FacetRlimits, Degraded, "RLIMIT_NPROC is never enforced for host uid 0, so a Processes limit is refused; CPU and file size limits are enforced")
	} else {
		add(FacetRlimits, Enforced, "")
	}
	add(FacetEnvironment, Enforced, "")
	sortFacets(r.Facets)
	return r
}

// probeNamespaces starts the launcher in a new user and network namespace,
// where it brings up lo and reports its namespaces.
func probeNamespaces(launcher string) error {
	if !initCalled.Load() {
		return errors.New("sandbox.Init was not called, so the launcher cannot run")
	}
	hostNet, err := nsOf("net")
	if err != nil {
		return err
	}
	hostUser, err := nsOf("user")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, launcher)
	cmd.Args = []string{launcherArg0}
	cmd.Env = []string{launcherEnv + "=" + roleProbe}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%v: %s", err, msg)
		}
		return err
	}
	var gotNet, gotUser nsID
	if _, err := fmt.Sscan(string(out), &gotNet.Dev, &gotNet.Ino, &gotUser.Dev, &gotUser.Ino); err != nil {
		return fmt.Errorf("probe answered %q: %v", out, err)
	}
	if gotNet == hostNet || gotUser == hostUser {
		return errors.New("the probe ran in the caller's namespaces")
	}
	return nil
}
