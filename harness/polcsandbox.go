package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"polc.dev/polc/internal/egress"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/sandbox"
)

// Values of Spec.Sandbox (HarnessSpec field sandbox).
const (
	// SandboxProvider: the provider's own sandbox (bubblewrap for Claude
	// Code's Bash and Gemini CLI's shell, Codex's bwrap + seccomp), where
	// the plan can configure one. The default.
	SandboxProvider = "provider"
	// SandboxPolc: polc's Landlock sandbox (package sandbox) holds the
	// provider CLI and every process it starts; the provider's own sandbox
	// is switched off (it cannot nest inside Landlock, which forbids the
	// mounts bubblewrap makes).
	SandboxPolc = "polc"
)

// LandlockSource is the Source.By of a claim polc's sandbox enforces.
const LandlockSource = SourceOSSandboxPrefix + "landlock (polc)"

// proxyPort is the egress proxy's port inside the sandbox's namespace.
const proxyPort = 3128

// OSSandbox is how polc's sandbox holds a provider (Plan.OSSandbox). Paths
// may hold {run}; Spawn substitutes the run directory.
type OSSandbox struct {
	// Name is the mechanism: "landlock".
	Name string `json:"name"`
	// Read are the trees the provider may read; ["/"] when the spec does not
	// confine reads.
	Read []string `json:"read"`
	// Write are the trees it may write: the working dirs, the write roots
	// and the run directory (its private HOME, config dirs and TMPDIR).
	Write []string `json:"write"`
	// Execute are the trees it may run programs from besides the system
	// paths: the provider's install prefix and node's directory.
	Execute []string `json:"execute"`
	// Deny are the spec's deny paths, carved out of every grant.
	Deny []string `json:"deny"`
	// Network is the sandbox's network mode: deny, proxy or allow.
	Network string `json:"network"`
	// Hosts are the host patterns polc's egress proxy admits (proxy only).
	Hosts []string `json:"hosts"`
	// ModelForward is the loopback model endpoint (host:port) that the
	// sandbox forwards to, or "": the one loopback address it reaches.
	ModelForward string `json:"model_forward"`
}

// modelHosts are the API hosts a provider talks to when the spec names no
// endpoint: under network off or allowlist polc's egress proxy admits them.
var modelHosts = map[string][]string{
	"claude-code": {"api.anthropic.com:443"},
	"codex":       {"api.openai.com:443", "chatgpt.com:443"},
	"gemini-cli":  {"generativelanguage.googleapis.com:443", "cloudcode-pa.googleapis.com:443", "oauth2.googleapis.com:443"},
}

// loopbackEndpoint returns host:port of an http endpoint on 127.0.0.1 or
// localhost, or "".
func loopbackEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" {
		return ""
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// planOSSandbox computes what polc's sandbox grants a provider.
func planOSSandbox(s *Spec, probe *ProbeResult) (*OSSandbox, error) {
	o := &OSSandbox{Name: "landlock", Deny: nonNil(s.DenyPaths), Hosts: []string{}}
	o.Write = sortedSet(slices.Concat(s.Workspace.Dirs(), s.WriteRoots, []string{RunDir}))
	o.Execute = []string{installPrefix(probe.Resolved)}
	if probe.Node != "" {
		node := probe.Node
		if r, err := filepath.EvalSymlinks(node); err == nil {
			node = r
		}
		o.Execute = append(o.Execute, filepath.Dir(node))
	}
	o.Execute = sortedSet(o.Execute)
	if s.ReadRoots == nil {
		o.Read = []string{"/"}
	} else {
		o.Read = sortedSet(slices.Concat(s.ReadRoots, o.Execute, runtimeReads))
	}
	o.ModelForward = loopbackEndpoint(s.Endpoint)
	var apiHosts []string
	switch {
	case o.ModelForward != "":
	case s.Endpoint != "":
		u, err := url.Parse(s.Endpoint)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("sandbox polc: endpoint %q has no host", s.Endpoint)
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		apiHosts = []string{net.JoinHostPort(u.Hostname(), port)}
	default:
		apiHosts = modelHosts[s.Provider]
	}
	switch s.Network {
	case "on":
		o.Network = "allow"
		o.ModelForward = ""
	case "allowlist":
		o.Network = "proxy"
		o.Hosts = sortedSet(slices.Concat(s.Hosts, apiHosts))
	default:
		o.Network = "deny"
		if len(apiHosts) > 0 {
			// The model API is not on loopback: the only way to it is
			// the egress proxy, admitting it alone.
			o.Network = "proxy"
			o.Hosts = sortedSet(apiHosts)
		}
	}
	return o, nil
}

// runtimeReads are host files the providers' runtimes read at start when
// reads are confined (node's OpenSSL configuration, bash's system rc, and
// the login shell's /etc/profile: Codex runs each command with bash -lc),
// beyond the sandbox's system paths. Spawn drops those that do not exist.
var runtimeReads = []string{"/etc/bash.bashrc", "/etc/profile", "/etc/ssl/openssl.cnf"}

// installPrefix is the directory an npm install of the CLI lives in (the
// parent of the outermost node_modules on the path), or the executable's
// own directory.
func installPrefix(resolved string) string {
	if i := strings.Index(resolved, "/node_modules/"); i > 0 {
		return resolved[:i]
	}
	return filepath.Dir(resolved)
}

// kernelProbe is sandbox.Probe; a variable so that tests can show how a
// report follows it.
var kernelProbe = sandbox.Probe

// followKernel lowers the claims that rest on polc's sandbox to what the
// running kernel enforces (sandbox.Probe): a facet the kernel does not
// support makes the claim unsupported, a degraded one makes it degraded
// with the facet's reason.
func followKernel(r *Row, o *OSSandbox) {
	if r.Status != Enforced || !slices.ContainsFunc(r.Sources, func(s Source) bool { return s.By == LandlockSource }) {
		return
	}
	var facets []string
	switch r.Capability {
	case CapFSWriteRoots, CapFSReadRoots:
		facets = []string{sandbox.FacetFilesystem}
	case CapFSDenyPaths:
		facets = []string{sandbox.FacetFilesystem, sandbox.FacetFilesystemDeny}
	case CapNetEgress, CapNetAllowlist:
		facets = []string{sandbox.FacetNetwork}
	}
	rep := kernelProbe()
	for _, name := range facets {
		f, ok := rep.Facet(name)
		switch {
		case !ok || f.State == sandbox.Unsupported:
			r.Status, r.Sources = Unsupported, []Source{}
			r.Reason = fmt.Sprintf("the kernel cannot enforce polc's sandbox here (sandbox.Probe: %s unsupported: %s)", name, f.Reason)
			return
		case f.State == sandbox.Degraded:
			r.Status = Degraded
			r.Reason += fmt.Sprintf("; but the kernel's %s facet is degraded (sandbox.Probe): %s", name, f.Reason)
		}
	}
}

// polcRun is what Spawn starts around a sandboxed provider: the egress
// proxy and the model relay, in a directory the provider cannot reach.
type polcRun struct {
	dir   string
	stops []func()
}

func (p *polcRun) close() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
	os.RemoveAll(p.dir)
}

// polcCommand returns the sandboxed command of a plan with an OSSandbox:
// the spec built from the plan, the egress proxy started for proxy
// mode, the relay to a loopback model endpoint started for a forward.
func polcCommand(ctx context.Context, plan *Plan, argv, env []string, sub func(string) string) (*exec.Cmd, *polcRun, error) {
	o := plan.OSSandbox
	subAll := func(in []string) []string {
		out := make([]string, len(in))
		for i, p := range in {
			out[i] = sub(p)
		}
		return out
	}
	dir, err := os.MkdirTemp("", "polc-sbx-")
	if err != nil {
		return nil, nil, err
	}
	pr := &polcRun{dir: dir}
	fail := func(err error) (*exec.Cmd, *polcRun, error) { pr.close(); return nil, nil, err }
	tmp := sub(RunDir + "/tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fail(err)
	}
	reads := slices.DeleteFunc(subAll(o.Read), func(p string) bool {
		_, err := os.Stat(p)
		return slices.Contains(runtimeReads, p) && err != nil
	})
	spec := sandbox.Spec{Read: reads, Write: subAll(o.Write), Execute: subAll(o.Execute), Deny: subAll(o.Deny), Dir: plan.Dir}
	env = setEnv(env, "TMPDIR", tmp)
	switch o.Network {
	case "allow":
		spec.Network = sandbox.NetworkAllow
	case "deny":
		spec.Network = sandbox.NetworkDeny
	case "proxy":
		spec.Network = sandbox.NetworkProxy
		sock := filepath.Join(dir, "egress.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			return fail(fmt.Errorf("sandbox polc: egress proxy: %w", err))
		}
		hosts := o.Hosts
		proxy := &egress.Proxy{Admit: func(host string, port int) (bool, string) {
			hp := net.JoinHostPort(strings.ToLower(host), strconv.Itoa(port))
			for _, h := range hosts {
				if pattern.Match(pattern.Host, h, hp) || !strings.Contains(h, ":") && pattern.Match(pattern.Host, h+":*", hp) {
					return true, ""
				}
			}
			return false, "not in the harness plan's network allowlist"
		}}
		pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); _ = proxy.Serve(pctx, l) }()
		pr.stops = append(pr.stops, func() { stop(); <-done })
		spec.ProxySocket, spec.ProxyPort = sock, proxyPort
		u := "http://127.0.0.1:" + strconv.Itoa(proxyPort)
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env = setEnv(env, k, u)
		}
	default:
		return fail(fmt.Errorf("sandbox polc: unknown network %q", o.Network))
	}
	if o.ModelForward != "" {
		_, port, _ := net.SplitHostPort(o.ModelForward)
		p, _ := strconv.Atoi(port)
		sock := filepath.Join(dir, "model.sock")
		stop, err := relay(sock, o.ModelForward)
		if err != nil {
			return fail(fmt.Errorf("sandbox polc: model relay: %w", err))
		}
		pr.stops = append(pr.stops, stop)
		spec.Forwards = []sandbox.Forward{{Port: p, Socket: sock}}
		// The model endpoint is reached directly (through the forward),
		// never through the egress proxy.
		env = setEnv(env, "NO_PROXY", "127.0.0.1,localhost")
		env = setEnv(env, "no_proxy", "127.0.0.1,localhost")
	}
	spec.Env = env
	cmd, err := sandbox.Command(ctx, spec, argv)
	if err != nil {
		return fail(fmt.Errorf("sandbox polc: %w", err))
	}
	setGroup(cmd.SysProcAttr)
	return cmd, pr, nil
}

// setEnv sets NAME=value in env, replacing an existing entry.
func setEnv(env []string, name, value string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	return append(out, name+"="+value)
}

// relay listens on the unix socket and copies each connection to and from
// the TCP address; the returned func stops it.
func relay(sock, addr string) (func(), error) {
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			track(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer track(c, false)
				defer c.Close()
				u, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					return
				}
				track(u, true)
				defer track(u, false)
				defer u.Close()
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = io.Copy(u, c)
					_ = u.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(c, u)
				_ = c.(*net.UnixConn).CloseWrite()
				<-done
			}()
		}
	}()
	return func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}, nil
}
