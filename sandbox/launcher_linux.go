//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// launch runs the launcher role and returns its exit status. It runs on the
// locked main thread (see Init).
func launch(role string) int {
	switch role {
	case roleExec:
		return runExec()
	case roleProxy:
		return runProxy()
	case roleProbe:
		return runProbe()
	}
	return refuse("unknown launcher role %q", role)
}

// refuse writes the one-line refusal and returns ExitRefused.
func refuse(format string, args ...any) int {
	return fail(ExitRefused, format, args...)
}

func fail(status int, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	msg = strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(msg)
	fmt.Fprintf(os.Stderr, "polc sandbox: %s\n", msg)
	return status
}

// readSpec reads the raw spec from the inherited pipe, whose descriptor
// specFDEnv gives, and closes it.
func readSpec() (specFD int, data []byte, err error) {
	if specFD, err = specFDFromEnv(); err != nil {
		return 0, nil, err
	}
	data, err = readSpecFrom(specFD)
	return specFD, data, err
}

func readSpecFrom(specFD int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(specFD, &st); err != nil {
		return nil, fmt.Errorf("spec pipe (fd %d): %w", specFD, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("fd %d is not the spec pipe", specFD)
	}
	f := os.NewFile(uintptr(specFD), "polc-sandbox-spec")
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxWireBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	return data, nil
}

// checkNamespaces refuses to go on under NetworkDeny or NetworkProxy unless
// this process is in a user and network namespace other than the caller's.
func checkNamespaces(w *wireSpec) error {
	if w.Network == NetworkAllow {
		return nil
	}
	if w.HostNetNS == (nsID{}) || w.HostUserNS == (nsID{}) {
		return errors.New("spec lacks the caller's namespaces")
	}
	netNS, err := nsOf("net")
	if err != nil {
		return err
	}
	userNS, err := nsOf("user")
	if err != nil {
		return err
	}
	if netNS == w.HostNetNS || userNS == w.HostUserNS {
		return errors.New("network isolation: still in the caller's user or network namespace (was Cmd.SysProcAttr replaced?)")
	}
	return nil
}

// runExec applies every restriction of the spec to this thread and execs the
// target in its place.
func runExec() int {
	specFD, raw, err := readSpec()
	if err != nil {
		return refuse("%v", err)
	}
	w, err := parseWire(raw)
	if err != nil {
		return refuse("%v", err)
	}
	if err := checkNamespaces(w); err != nil {
		return refuse("%v", err)
	}
	if err := privateMounts(w); err != nil {
		return refuse("mount namespace: %v", err)
	}
	if err := reopenPassed(specFD); err != nil {
		return refuse("%v", err)
	}
	abi := detectABI()
	if abi < minABI {
		return refuse("landlock: kernel offers ABI %d, need %d", abi, minABI)
	}
	rulesetFD, flags, err := buildRuleset(w, abi)
	if err != nil {
		return refuse("landlock: %v", err)
	}
	if w.Dir != "" {
		if err := os.Chdir(w.Dir); err != nil {
			return refuse("dir: %v", err)
		}
	}
	path, err := lookPath(w.Argv[0], w.Env)
	if err != nil {
		return fail(ExitNotFound, "%v", err)
	}
	if err := setLimits(w.Limits); err != nil {
		return refuse("rlimits: %v", err)
	}
	if err := dropCapabilities(); err != nil {
		return refuse("capabilities: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return refuse("no_new_privs: %v", err)
	}
	if err := landlockRestrictSelf(rulesetFD, flags); err != nil {
		return refuse("landlock: restrict: %v", err)
	}
	if err := installSeccomp(w.Network, abi, w.KeepSession); err != nil {
		return refuse("%v", err)
	}
	unix.Close(rulesetFD)
	// Only stdin, stdout, stderr and the caller's ExtraFiles (below the spec
	// pipe; Go's fork left a nil entry closed there, and every descriptor
	// this launcher opened itself is close-on-exec) reach the target.
	if err := unix.CloseRange(uint(specFD), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return refuse("close_range: %v", err)
	}
	err = syscall.Exec(path, w.Argv, w.Env)
	if errors.Is(err, syscall.ENOENT) {
		return fail(ExitNotFound, "exec %q: %v", path, err)
	}
	return fail(ExitCannotExec, "exec %q: %v", path, err)
}

// lookPath finds argv0 the way execvp does, in PATH from the target's own
// environment (default /bin:/usr/bin), skipping empty and relative entries.
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := "/bin:/usr/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, argv0)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: not found in PATH", argv0)
}

// setLimits lowers the resource limits the spec sets; it never raises one.
func setLimits(l Limits) error {
	if l.Processes > 0 {
		exempt, err := nprocExempt(os.Getuid())
		if err != nil {
			return err
		}
		if exempt {
			return errors.New("a Processes limit is void for host uid 0 (the kernel exempts the root user from RLIMIT_NPROC)")
		}
	}
	set := func(name string, res int, cur, max uint64) error {
		var old unix.Rlimit
		if err := unix.Prlimit(0, res, nil, &old); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		max = min(max, old.Max)
		lim := unix.Rlimit{Cur: min(cur, max), Max: max}
		if err := unix.Prlimit(0, res, &lim, nil); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if n := l.CPUSeconds; n > 0 {
		// SIGXCPU at the soft limit, SIGKILL a second later.
		if err := set("cpu", unix.RLIMIT_CPU, n, n+1); err != nil {
			return err
		}
	}
	if n := l.FileSizeBytes; n > 0 {
		if err := set("file size", unix.RLIMIT_FSIZE, n, n); err != nil {
			return err
		}
	}
	if n := l.Processes; n > 0 {
		if err := set("processes", unix.RLIMIT_NPROC, n, n); err != nil {
			return err
		}
	}
	return nil
}

// dropCapabilities empties this thread's bounding, ambient, inheritable,
// permitted and effective capability sets, so that the target (uid 0 in the
// host or in its own user namespace) holds no capability, also not after
// execve. Without CAP_SETPCAP the bounding set cannot shrink; that is only
// accepted for a process whose real and effective uid are not 0 and that
// holds no capability, since such a process gains none on execve under
// no_new_privs.
func dropCapabilities() error {
	// Up to the highest capability the kernel knows: it answers EINVAL
	// above it (cheaper than reading /proc/sys/kernel/cap_last_cap).
	var bsetErr error
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) { // beyond what the kernel knows
				break
			}
			bsetErr = fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
			break
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return errors.New("capabilities remain after capset")
		}
	}
	if bsetErr != nil && (os.Getuid() == 0 || os.Geteuid() == 0) {
		return bsetErr
	}
	return nil
}

// runProxy is the NetworkProxy launcher. It runs in the new user and network
// namespace: it brings up lo, listens on 127.0.0.1:ProxyPort, starts an
// exec-role launcher (which restricts itself and execs the target) as its
// child, forwards each accepted connection to ProxySocket, forwards
// termination signals to the child, and exits as the child did.
func runProxy() int {
	specFD, err := specFDFromEnv()
	if err != nil {
		return refuse("%v", err)
	}
	// The files for the target, taken before this process opens any
	// descriptor of its own, and closed as soon as the child holds them.
	extra, err := inheritedFiles(specFD)
	if err != nil {
		return refuse("%v", err)
	}
	raw, err := readSpecFrom(specFD)
	if err != nil {
		return refuse("%v", err)
	}
	w, err := parseWire(raw)
	if err != nil {
		return refuse("%v", err)
	}
	if w.Network != NetworkProxy && (w.Network != NetworkDeny || len(w.Forwards) == 0) {
		return refuse("proxy launcher started for network %s without forwards", w.Network)
	}
	if err := checkNamespaces(w); err != nil {
		return refuse("%v", err)
	}
	if err := loopbackUp(); err != nil {
		return refuse("network proxy: bringing up lo: %v", err)
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	// One listener per forwarded port (Spec.Forwards), plus ProxyPort.
	forwards := slices.Clone(w.Forwards)
	if w.Network == NetworkProxy {
		forwards = append(forwards, Forward{Port: w.ProxyPort, Socket: w.ProxySocket})
	}
	lns := make([]net.Listener, len(forwards))
	for i, f := range forwards {
		ln, err := lc.Listen(context.Background(), "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port)))
		if err != nil {
			return refuse("network proxy: %v", err)
		}
		lns[i] = ln
	}
	r, err := specPipe(raw)
	if err != nil {
		return refuse("%v", err)
	}
	child := &exec.Cmd{
		Path:       selfExe,
		Args:       []string{launcherArg0},
		Env:        launcherEnviron(roleExec, len(extra)),
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: append(extra, r),
		// The kernel sends Pdeathsig when the thread that forked the child
		// exits; that is this locked main thread, which lives until exit.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	// Ask for the forwarded signals before the child exists, so none is lost.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGALRM)
	if err := child.Start(); err != nil {
		return refuse("network proxy: starting the target: %v", err)
	}
	r.Close()
	for _, f := range extra {
		if f != nil {
			f.Close()
		}
	}
	go func() {
		for s := range sigs {
			_ = child.Process.Signal(s)
		}
	}()
	for i, f := range forwards {
		go serveProxy(lns[i], f.Socket)
	}
	_ = child.Wait()
	signal.Stop(sigs)
	ws, ok := child.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return refuse("network proxy: unexpected wait status %v", child.ProcessState)
	}
	if ws.Signaled() {
		reraise(ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// inheritedFiles returns descriptors 3 to specFD-1 as files (nil for a
// closed one), each made close-on-exec, for the proxy launcher to pass to
// its child exactly where it got them. Only a descriptor without
// close-on-exec was inherited: every one this process opened itself (the
// Go runtime's, package init's) has the flag and is left alone.
func inheritedFiles(specFD int) ([]*os.File, error) {
	extra := make([]*os.File, specFD-3)
	for fd := 3; fd < specFD; fd++ {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("inherited descriptor %d: %w", fd, err)
		}
		extra[fd-3] = os.NewFile(uintptr(fd), "polc-sandbox-extra-"+strconv.Itoa(fd))
	}
	return extra, nil
}

// serveProxy forwards every connection accepted on ln to the unix socket.
func serveProxy(ln net.Listener, socket string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off, keep serving
			continue
		}
		go forward(c, socket)
	}
}

func forward(c net.Conn, socket string) {
	defer c.Close()
	u, err := net.DialTimeout("unix", socket, 10*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(u, c)
		_ = u.(*net.UnixConn).CloseWrite()
	}()
	_, _ = io.Copy(c, u)
	_ = c.(*net.TCPConn).CloseWrite()
	<-done
}

// loopbackUp sets IFF_UP on lo, which is down in a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// reraise makes this process die of sig, so that the caller sees the same
// wait status as if it had run the target directly. It returns only if the
// signal did not kill (the caller then exits with 128+sig).
func reraise(sig syscall.Signal) {
	signal.Reset()
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}) // the target dumped core already, if it did
	// struct kernel_sigaction all zero: SIG_DFL, no flags, empty mask. The
	// Go runtime's handler would otherwise catch the signal.
	var act [4]uint64
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	time.Sleep(100 * time.Millisecond)
}

// runProbe is Probe's namespace check: bring up lo (which needs
// CAP_NET_ADMIN in the new namespace) and print the namespaces.
func runProbe() int {
	if err := loopbackUp(); err != nil {
		return refuse("probe: bringing up lo: %v", err)
	}
	netNS, err := nsOf("net")
	if err != nil {
		return refuse("%v", err)
	}
	userNS, err := nsOf("user")
	if err != nil {
		return refuse("%v", err)
	}
	fmt.Printf("%d %d %d %d\n", netNS.Dev, netNS.Ino, userNS.Dev, userNS.Ino)
	return 0
}
