package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Network selects how much of the network a sandboxed process reaches.
// The zero value is NetworkDeny, so a Spec that forgets to say gets no network.
type Network int

const (
	// NetworkDeny runs the process in a new user and network namespace that has
	// no usable interface (its loopback is down), and Landlock denies TCP bind
	// and connect (and UDP on Landlock ABI 10 and later).
	NetworkDeny Network = iota
	// NetworkAllow leaves the network as it is: no namespace, no Landlock
	// network rule.
	NetworkAllow
	// NetworkProxy runs the process in a new user and network namespace whose
	// only reachable endpoint is 127.0.0.1:Spec.ProxyPort. The launcher listens
	// there and forwards each connection to the unix socket Spec.ProxySocket
	// outside the namespace, where the caller runs an egress proxy. Landlock
	// allows TCP connect only to ProxyPort and denies bind.
	NetworkProxy
)

var networkNames = [...]string{NetworkDeny: "deny", NetworkAllow: "allow", NetworkProxy: "proxy"}

// String returns the wire name of n ("deny", "allow", "proxy").
func (n Network) String() string {
	if n < 0 || int(n) >= len(networkNames) {
		return fmt.Sprintf("Network(%d)", int(n))
	}
	return networkNames[n]
}

// MarshalText encodes n by its wire name; an unknown value is an error.
func (n Network) MarshalText() ([]byte, error) {
	if n < 0 || int(n) >= len(networkNames) {
		return nil, fmt.Errorf("unknown network mode %d", int(n))
	}
	return []byte(networkNames[n]), nil
}

// UnmarshalText decodes a wire name; anything else is an error.
func (n *Network) UnmarshalText(b []byte) error {
	for i, name := range networkNames {
		if string(b) == name {
			*n = Network(i)
			return nil
		}
	}
	return fmt.Errorf("unknown network mode %q (want deny, allow or proxy)", b)
}

// Limits are resource limits (setrlimit) applied to the sandboxed process
// just before it starts. Zero means "not set" (the inherited limit stays).
type Limits struct {
	// CPUSeconds sets RLIMIT_CPU: SIGXCPU after this many seconds of CPU
	// time, SIGKILL one second later. The launcher's own set-up (a few
	// milliseconds, same process) counts towards it.
	CPUSeconds uint64 `json:"cpu_seconds"`
	// FileSizeBytes sets RLIMIT_FSIZE: writing past this size raises SIGXFSZ
	// (EFBIG when the signal is ignored).
	FileSizeBytes uint64 `json:"file_size_bytes"`
	// Processes sets RLIMIT_NPROC, which the kernel counts per real user and
	// user namespace and never enforces for uid 0 in the initial user
	// namespace: the launcher refuses (ExitRefused) rather than run a process
	// whose Processes limit would be void. See Probe's "rlimits" facet.
	Processes uint64 `json:"processes"`
}

// Spec is what the kernel holds a sandboxed process to. Every path is
// absolute and clean (filepath.Clean(p) == p). Read, Write and Execute
// paths must be free of symbolic links when the launcher starts (it opens
// them without following any and refuses one that holds a link); Deny
// paths are resolved (symlinks followed). The grants attach to the files
// and directories, not to names.
type Spec struct {
	// Read lists files and directory trees the process may read (and list).
	Read []string
	// Write lists trees the process may read, write, create in, remove from,
	// rename within and truncate. Write does not imply Execute.
	Write []string
	// Execute lists trees the process may read and execute programs from.
	Execute []string
	// Deny lists paths that stay inaccessible even when they lie under a
	// Read, Write, Execute or system grant; a grant at or under a denied path
	// is dropped. See the package documentation for how Landlock, which only
	// grants, is made to carve these out, and what that costs.
	Deny []string
	// Network selects the network mode; see Network.
	Network Network
	// ProxySocket is the unix socket the launcher forwards to under
	// NetworkProxy (at most 107 bytes); empty otherwise.
	ProxySocket string
	// ProxyPort is the TCP port on 127.0.0.1 inside the namespace under
	// NetworkProxy (1-65535); 0 otherwise. Telling the process to use it
	// (HTTP_PROXY=http://127.0.0.1:PORT in Env) is the caller's business.
	ProxyPort int
	// Forwards are further loopback endpoints inside the namespace, under
	// NetworkDeny or NetworkProxy only: for each, the launcher listens on
	// 127.0.0.1:Port and forwards every connection to the unix socket
	// Socket outside, and Landlock allows TCP connect to Port. A caller uses
	// one to let the process reach exactly one service of its own (a model
	// API relay) without opening the network.
	Forwards []Forward
	// Env is the complete environment of the process: nothing is inherited.
	// Each entry is NAME=value with a unique, non-empty NAME. PATH in Env is
	// also where a slash-free argv[0] is looked up (default /bin:/usr/bin).
	Env []string
	// Dir is the working directory; empty keeps the caller's.
	Dir string
	// Limits are the resource limits; see Limits.
	Limits Limits
	// ExtraFiles are open files the process inherits, as exec.Cmd.ExtraFiles
	// passes them: entry i becomes descriptor 3+i, a nil entry leaves that
	// descriptor closed. They are the only descriptors besides stdin, stdout
	// and stderr that reach the process (at most 1000). The grants do not
	// apply to a passed file itself (it is already open), only to reopening
	// it by a path such as /proc/self/fd/N. The launcher reopens a passed
	// regular file or directory in the target's mount namespace, where it
	// is read-only outside the write roots: one open for writing must lie
	// in a write root, or the spawn is refused (see the package doc,
	// "Passed files"). The same holds for stdin, stdout and stderr.
	ExtraFiles []*os.File
	// KeepSession makes setsid(2) fail with EPERM for the process and
	// everything it starts, so that all of them stay in the session the
	// caller started it in: a caller that ends a call by killing that
	// session's members (executor/builtin) then ends every process of
	// the call, a daemon that tried to detach included. Off for programs
	// that start sessions of their own as a matter of course (a coding
	// agent's shell tool).
	KeepSession bool
}

// Forward is one loopback port forwarded to a unix socket; see Spec.Forwards.
type Forward struct {
	// Port is the TCP port on 127.0.0.1 inside the namespace (1-65535, not
	// ProxyPort, each at most once).
	Port int `json:"port"`
	// Socket is the unix socket outside (absolute, clean, at most 107 bytes).
	Socket string `json:"socket"`
}

// Wire protocol between Command and the launcher. The parent writes one JSON
// object (wireSpec) to a pipe that the launcher inherits as fd 3. The parser is
// strict: unknown or duplicated fields, trailing data, a different version or
// an invalid value make the launcher refuse.
const (
	// launcherEnv, set in the launcher's otherwise empty environment, makes
	// Init act as the launcher; its value is the launcher's role.
	launcherEnv  = "POLC_SANDBOX_LAUNCHER"
	wireVersion  = 2
	maxWireBytes = 1 << 20
	maxPaths     = 4096 // per list
	maxArgs      = 1 << 16
	maxPathLen   = 4095 // PATH_MAX without the NUL
	maxSunPath   = 107  // sizeof(sun_path) without the NUL
)

// nsID names a namespace by the device and inode of its /proc/self/ns file.
type nsID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

type wireSpec struct {
	Version     int       `json:"version"`
	Argv        []string  `json:"argv"`
	Env         []string  `json:"env"`
	Dir         string    `json:"dir"`
	Read        []string  `json:"read"`
	Write       []string  `json:"write"`
	Execute     []string  `json:"execute"`
	Deny        []string  `json:"deny"`
	Network     Network   `json:"network"`
	ProxySocket string    `json:"proxy_socket"`
	ProxyPort   int       `json:"proxy_port"`
	Forwards    []Forward `json:"forwards"`
	Limits      Limits    `json:"limits"`
	KeepSession bool      `json:"keep_session"`
	// HostNetNS and HostUserNS are the caller's namespaces. Under NetworkDeny
	// and NetworkProxy the launcher refuses to run when it finds itself still
	// in either (for example because the caller replaced Cmd.SysProcAttr).
	HostNetNS  nsID `json:"host_net_ns"`
	HostUserNS nsID `json:"host_user_ns"`
}

func newWireSpec(spec Spec, argv []string) wireSpec {
	return wireSpec{
		Version:     wireVersion,
		Argv:        argv,
		Env:         spec.Env,
		Dir:         spec.Dir,
		Read:        spec.Read,
		Write:       spec.Write,
		Execute:     spec.Execute,
		Deny:        spec.Deny,
		Network:     spec.Network,
		ProxySocket: spec.ProxySocket,
		ProxyPort:   spec.ProxyPort,
		Forwards:    spec.Forwards,
		Limits:      spec.Limits,
		KeepSession: spec.KeepSession,
	}
}

// parseWire decodes and validates one wire spec.
func parseWire(data []byte) (*wireSpec, error) {
	if len(data) > maxWireBytes {
		return nil, fmt.Errorf("spec is %d bytes, more than %d", len(data), maxWireBytes)
	}
	if err := checkDuplicateKeys(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wireSpec
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("spec: trailing data after the object")
	}
	if w.Version != wireVersion {
		return nil, fmt.Errorf("spec: version %d, want %d", w.Version, wireVersion)
	}
	if err := w.validate(); err != nil {
		return nil, err
	}
	return &w, nil
}

// checkDuplicateKeys refuses an object with a key given twice (encoding/json
// would silently keep the last), at any depth.
func checkDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next token in an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("spec: %w", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			k, ok := tok.(string)
			if ok {
				if top.keys[k] {
					return fmt.Errorf("spec: field %q given twice", k)
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if top != nil && top.object {
				top.key = true
			}
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			if top != nil && top.object {
				top.key = true
			}
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.object {
			top.key = true
		}
	}
}

func (w *wireSpec) validate() error {
	if len(w.Argv) == 0 || w.Argv[0] == "" {
		return errors.New("spec: argv is empty")
	}
	if len(w.Argv) > maxArgs {
		return fmt.Errorf("spec: %d arguments, more than %d", len(w.Argv), maxArgs)
	}
	for i, a := range w.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("spec: argv[%d] contains a NUL byte", i)
		}
	}
	seen := map[string]bool{}
	for i, e := range w.Env {
		name, _, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			return fmt.Errorf("spec: env[%d] %q is not NAME=value", i, e)
		}
		if strings.IndexByte(e, 0) >= 0 {
			return fmt.Errorf("spec: env[%d] contains a NUL byte", i)
		}
		if seen[name] {
			return fmt.Errorf("spec: env names %s twice", name)
		}
		if name == launcherEnv {
			return fmt.Errorf("spec: env must not set %s (it selects the launcher)", launcherEnv)
		}
		seen[name] = true
	}
	if len(w.Env) > maxArgs {
		return fmt.Errorf("spec: %d environment entries, more than %d", len(w.Env), maxArgs)
	}
	if w.Dir != "" {
		if err := checkPath("dir", w.Dir); err != nil {
			return err
		}
	}
	for _, l := range []struct {
		name  string
		paths []string
	}{{"read", w.Read}, {"write", w.Write}, {"execute", w.Execute}, {"deny", w.Deny}} {
		if len(l.paths) > maxPaths {
			return fmt.Errorf("spec: %d %s paths, more than %d", len(l.paths), l.name, maxPaths)
		}
		for _, p := range l.paths {
			if err := checkPath(l.name, p); err != nil {
				return err
			}
		}
	}
	switch w.Network {
	case NetworkDeny, NetworkAllow:
		if w.ProxySocket != "" || w.ProxyPort != 0 {
			return fmt.Errorf("spec: proxy_socket and proxy_port are only for network proxy, not %s", w.Network)
		}
	case NetworkProxy:
		if err := checkPath("proxy_socket", w.ProxySocket); err != nil {
			return err
		}
		if len(w.ProxySocket) > maxSunPath {
			return fmt.Errorf("spec: proxy_socket is %d bytes, a unix socket path holds at most %d", len(w.ProxySocket), maxSunPath)
		}
		if w.ProxyPort < 1 || w.ProxyPort > 65535 {
			return fmt.Errorf("spec: proxy_port %d is not in 1-65535", w.ProxyPort)
		}
	default:
		return fmt.Errorf("spec: unknown network mode %d", int(w.Network))
	}
	if len(w.Forwards) > 0 && w.Network == NetworkAllow {
		return errors.New("spec: forwards are only for network deny or proxy (under allow the process reaches loopback itself)")
	}
	if len(w.Forwards) > maxPaths {
		return fmt.Errorf("spec: %d forwards, more than %d", len(w.Forwards), maxPaths)
	}
	ports := map[int]bool{w.ProxyPort: w.Network == NetworkProxy}
	for _, f := range w.Forwards {
		if f.Port < 1 || f.Port > 65535 {
			return fmt.Errorf("spec: forward port %d is not in 1-65535", f.Port)
		}
		if ports[f.Port] {
			return fmt.Errorf("spec: port %d is forwarded twice (or is the proxy port)", f.Port)
		}
		ports[f.Port] = true
		if err := checkPath("forward socket", f.Socket); err != nil {
			return err
		}
		if len(f.Socket) > maxSunPath {
			return fmt.Errorf("spec: forward socket is %d bytes, a unix socket path holds at most %d", len(f.Socket), maxSunPath)
		}
	}
	return nil
}

func checkPath(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("spec: %s path is empty", field)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("spec: %s path %q contains a NUL byte", field, p)
	case !filepath.IsAbs(p):
		return fmt.Errorf("spec: %s path %q is not absolute", field, p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("spec: %s path %q is not clean (want %q)", field, p, filepath.Clean(p))
	case len(p) > maxPathLen:
		return fmt.Errorf("spec: %s path is %d bytes, more than %d", field, len(p), maxPathLen)
	}
	return nil
}
