package landlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"polc.dev/polc/executor"
	"polc.dev/polc/internal/egress"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/normalize"
	"polc.dev/polc/sandbox"
	"polc.dev/polc/snapshot"
)

// Name is the backend's id: the value of ExecutionContext.Backend, of
// `backend:` in scenario and session files and of `--backend`.
const Name = "landlock"

// ProxyPort is the port of the egress proxy inside an allowlisted
// process's network namespace (HTTP_PROXY=http://127.0.0.1:3128).
const ProxyPort = 3128

// Backend is the landlock effect backend: every subprocess a callable
// starts through the context's Spawner runs under package sandbox, held by
// the kernel to the policy that allowed the call (docs/containment.md).
// The zero value is ready to use; a Backend is safe for concurrent use.
//
// The program that runs the executor must call sandbox.Init first thing
// in main (polc does): the sandbox re-executes it as its launcher.
type Backend struct {
	// Limits are the resource limits of every contained process.
	Limits sandbox.Limits
	// TempDir is where each call's private temporary directory and its
	// proxy socket are made; default os.TempDir().
	TempDir string
	// Protect lists absolute paths that no contained process may reach,
	// whatever the policy grants: the files of the program running the
	// executor (its evidence, certificate, signer key, state database,
	// session file). Each is denied like a filesystem.deny pattern that
	// names it literally (its characters are never wildcards): an
	// existing path is carved out of every grant, the system paths'
	// included; an absent one (a certificate not written yet) is carved
	// out of the directory it would be created in, so nothing can create
	// it. A relative path refuses every call (containment_failed).
	Protect []string
	// ProtectWrites lists absolute paths that no contained process may
	// change or create, such as the polc executable and the sandbox
	// launcher beside it. Reading them is harmless, and outside the
	// call's write grants the sandbox's read-only mounts already keep
	// them; so each is carved out as Protect's are only when a write
	// grant of the call reaches it. (Carving out a file with several hard
	// links refuses the spawn: an installed executable often has them.)
	ProtectWrites []string

	once   sync.Once
	report executor.BackendCapabilityReport
	probe  sandbox.Report
}

// ID implements executor.EffectBackend.
func (*Backend) ID() string { return Name }

// Probe implements executor.EffectBackend: the kernel's answer, probed
// once, as a capability report (docs/containment.md "Reading the report").
func (b *Backend) Probe(context.Context) (executor.BackendCapabilityReport, error) {
	b.once.Do(func() {
		b.probe = sandbox.Probe()
		b.report = capabilityReport(b.probe)
	})
	return b.report, nil
}

// capabilityReport maps the sandbox's facets onto the executor's
// containment classes.
func capabilityReport(p sandbox.Report) executor.BackendCapabilityReport {
	level := func(s sandbox.State) string {
		switch s {
		case sandbox.Enforced:
			return executor.ContainmentEnforced
		case sandbox.Degraded:
			return executor.ContainmentDegraded
		}
		return executor.ContainmentUnsupported
	}
	c := map[string]string{}
	why := map[string]string{}
	fromFacet := func(class, facet string) {
		f, ok := p.Facet(facet)
		if !ok {
			c[class], why[class] = executor.ContainmentUnsupported, "the sandbox does not report "+facet
			return
		}
		c[class] = level(f.State)
		if f.Reason != "" {
			why[class] = f.Reason
		}
	}
	fromFacet("filesystem", sandbox.FacetFilesystem)
	fromFacet("network", sandbox.FacetNetwork)
	fromFacet("environment", sandbox.FacetEnvironment)
	// Parts stated beside the classes: what a policy author needs to know
	// about how far the classes reach.
	for _, f := range p.Facets {
		if f.Name == sandbox.FacetFilesystem || f.Name == sandbox.FacetNetwork || f.Name == sandbox.FacetEnvironment {
			continue
		}
		why[f.Name] = string(f.State)
		if f.Reason != "" {
			why[f.Name] += ": " + f.Reason
		}
	}
	// What a contained process may execute is held to the execute roots
	// and the system paths, not to the policy's command patterns.
	c["subprocess"] = executor.ContainmentDegraded
	why["subprocess"] = "command patterns judge the request's commands, not the programs those start; execve is limited to the execute roots and the system paths, but the dynamic loader or an interpreter runs any readable file, so execute roots are no boundary"
	c["secrets"] = executor.ContainmentUnsupported
	why["secrets"] = "secret namespaces are not kernel objects; deny the files that hold secrets with filesystem.deny"
	if f, ok := p.Facet(sandbox.FacetSignals); ok && f.State != sandbox.Enforced && c["filesystem"] == executor.ContainmentEnforced {
		// A process that can signal polc or others is not contained.
		c["filesystem"] = executor.ContainmentDegraded
		why["filesystem"] = "signals are not scoped: " + f.Reason
	}
	return executor.BackendCapabilityReport{Format: executor.BackendCapabilityFormat, BackendID: Name, Version: "1", Containment: c, Reasons: why}
}

// Invoke implements executor.EffectBackend. Execute always calls
// InvokeContained; a call without an Invocation is refused, never run
// uncontained.
func (*Backend) Invoke(context.Context, func(context.Context) (any, error)) (any, error) {
	return nil, errNoInvocation
}

var errNoInvocation = classError("containment_failed: the landlock backend runs calls only with their invocation (Execute)")

type classError string

func (e classError) Error() string      { return string(e) }
func (e classError) ErrorClass() string { return "containment_failed" }

// InvokeContained implements executor.ContainingBackend: it derives the
// sandbox from inv's policy, runs the egress proxy of an allowlisted
// network for the call's duration, and gives call a Spawner.
func (b *Backend) InvokeContained(ctx context.Context, inv *executor.Invocation, call func(context.Context) (any, error)) (res any, err error) {
	plan, err := planFor(inv, b.Protect, b.ProtectWrites)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", classError("containment_failed"), err)
	}
	root := b.TempDir
	if root == "" {
		root = os.TempDir()
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r // the call's TMPDIR is a write root: the launcher refuses a path through a link
	}
	dir, err := os.MkdirTemp(root, "polc-landlock-")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", classError("containment_failed"), err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", classError("containment_failed"), err)
	}
	plan.spec.Write = append(plan.spec.Write, tmp)
	plan.spec.Limits = b.Limits
	// The call ends by killing its session: nothing may leave it.
	plan.spec.KeepSession = true
	sp := &spawner{spec: plan.spec, env: plan.env, tmp: tmp}
	var proxy *egress.Proxy
	if plan.spec.Network == sandbox.NetworkProxy {
		sock := filepath.Join(dir, "proxy.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			return nil, fmt.Errorf("%w: egress proxy: %v", classError("containment_failed"), err)
		}
		decider := inv.Decider
		proxy = &egress.Proxy{Admit: func(host string, port int) (bool, string) {
			hp, ok := hostFacet(host, port)
			if !ok {
				return false, "not a destination the policy can name"
			}
			if decider == nil || !decider.AdmitsHost(hp) {
				return false, "the policy's network facet does not admit " + hp
			}
			return true, ""
		}}
		pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = proxy.Serve(pctx, l)
		}()
		defer func() {
			stop()
			<-done
		}()
		sp.spec.ProxySocket, sp.spec.ProxyPort = sock, ProxyPort
		u := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
		sp.proxyEnv = []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "NO_PROXY=", "no_proxy="}
	}
	res, err = call(executor.WithSpawner(ctx, sp))
	if proxy != nil && sp.spawned.Load() {
		res = withEgress(res, proxy.Log(), proxy.Dropped())
	}
	return res, err
}

// withEgress adds the proxy's connection log to a callable's result.
// Connections refused because the log was full are counted under
// egress_dropped, so none goes unreported.
func withEgress(res any, log []egress.Conn, dropped int) any {
	conns := make([]any, 0, len(log))
	for _, c := range log {
		e := map[string]any{"method": c.Method, "host": c.Host, "port": c.Port, "status": c.Status,
			"admitted": c.Admitted, "reason": c.Reason, "bytes_up": c.BytesUp, "bytes_down": c.BytesDown}
		if c.Error != "" {
			e["error"] = c.Error
		}
		conns = append(conns, e)
	}
	m, ok := res.(map[string]any)
	if !ok || m == nil {
		m = map[string]any{"result": res}
	}
	m["egress"] = conns
	if dropped > 0 {
		m["egress_dropped"] = dropped
	}
	return m
}

// hostFacet is the host facet the normalizer would write for a
// destination, or false when it would refuse the destination.
func hostFacet(host string, port int) (string, bool) {
	h := host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	hp, err := normalize.URLHost("http://" + h + ":" + strconv.Itoa(port) + "/")
	if err != nil {
		return "", false
	}
	return hp, true
}

// spawner starts a call's processes under its sandbox.
type spawner struct {
	spec     sandbox.Spec
	env      func(string) bool // which variables the policy lets through
	tmp      string
	proxyEnv []string
	spawned  atomic.Bool // a process was started: its egress goes in the result
}

// Command implements executor.Spawner.
func (s *spawner) Command(ctx context.Context, argv []string, dir string, env []string, extra []*os.File) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("no program")
	}
	spec := s.spec
	spec.Dir = dir
	// The files polc opened for the command's redirections: the process
	// reopens each through /proc/self/fd, which Landlock checks against
	// the grants like any other open. polc opened (and maybe created)
	// them outside the sandbox, so one at or under a denied path is
	// refused here, before the process starts, and not left to the
	// reopen.
	if err := deniedFiles(extra, spec.Deny); err != nil {
		return nil, err
	}
	spec.ExtraFiles = extra
	spec.Env = nil
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if name == "PATH" || s.env(name) {
			spec.Env = append(spec.Env, kv)
		}
	}
	spec.Env = setEnv(spec.Env, "TMPDIR="+s.tmp)
	for _, kv := range s.proxyEnv {
		spec.Env = setEnv(spec.Env, kv)
	}
	s.spawned.Store(true)
	return sandbox.Command(ctx, spec, argv)
}

// deniedFiles refuses a file of files (descriptors polc opened) that
// lies at or under one of the denied paths, compared case-insensitively
// with the links of both resolved. A file whose path cannot be read is
// refused too.
func deniedFiles(files []*os.File, deny []string) error {
	if len(deny) == 0 {
		return nil
	}
	var resolved []string
	for _, d := range deny {
		r, err := resolveExisting(d)
		if err != nil {
			return fmt.Errorf("denied path %s: %v", d, err)
		}
		resolved = append(resolved, strings.ToLower(r), strings.ToLower(d))
	}
	for _, f := range files {
		if f == nil {
			continue
		}
		var path string
		var lerr error
		rc, err := f.SyscallConn()
		if err == nil {
			err = rc.Control(func(fd uintptr) {
				path, lerr = os.Readlink("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
			})
		}
		if err == nil {
			err = lerr
		}
		if err != nil {
			return fmt.Errorf("redirection file %s: %v", f.Name(), err)
		}
		low := strings.ToLower(path)
		for _, d := range resolved {
			if under(low, d) {
				return fmt.Errorf("redirection file %s lies at or under a denied path (%s)", f.Name(), path)
			}
		}
	}
	return nil
}

// setEnv sets kv's variable in env, replacing an earlier value.
func setEnv(env []string, kv string) []string {
	name, _, _ := strings.Cut(kv, "=")
	env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") })
	return append(env, kv)
}

// plan is what a call's policy becomes.
type plan struct {
	spec sandbox.Spec
	env  func(string) bool
}

// planFor turns the policy that allowed inv into a sandbox. Grants are
// never wider than the policy (docs/containment.md): a pattern ending in
// "**" grants its directory's subtree, which is exact; any other pattern
// grants only the existing regular files it matches now (a file it would
// match but that does not exist yet cannot be created). Deny patterns
// are carved out of every grant, the system paths' included, and so are
// the protected paths (Backend.Protect, and Backend.ProtectWrites under
// a write grant), whatever the policy says.
func planFor(inv *executor.Invocation, protect, protectWrites []string) (*plan, error) {
	if inv == nil || inv.Policy == nil || !filepath.IsAbs(inv.Workspace) {
		return nil, errors.New("no policy or workspace to contain the call to")
	}
	ws := filepath.Clean(inv.Workspace)
	var r resolver
	var spec sandbox.Spec
	var denies []string
	for _, p := range protect {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("protected path %q is not absolute", p)
		}
		ps, err := r.literal(filepath.Clean(p))
		if err != nil {
			return nil, fmt.Errorf("protected path %s: %v", p, err)
		}
		denies = append(denies, ps...)
	}
	var netAllow, netDeny []string
	var envAllow, envDeny []string
	for _, rule := range inv.Policy.CompiledRules {
		switch rule := rule.(type) {
		case *snapshot.FilesystemRule:
			p := absPattern(rule.Pattern, ws)
			if rule.Effect == snapshot.EffectDeny {
				ms, err := r.expand(p, true)
				if err != nil {
					return nil, fmt.Errorf("filesystem.deny %s: %v", rule.Pattern, err)
				}
				for _, m := range ms {
					denies = append(denies, m.path)
				}
				absent, err := r.absentLiteral(strings.ToLower(p))
				if err != nil {
					return nil, fmt.Errorf("filesystem.deny %s: %v", rule.Pattern, err)
				}
				denies = append(denies, absent...)
				continue
			}
			ms, err := r.expand(p, false)
			if err != nil {
				return nil, fmt.Errorf("filesystem.%s %s: %v", rule.Access, rule.Pattern, err)
			}
			for _, m := range ms {
				if !m.subtree && m.dir {
					continue // a rule on a directory reaches below it: wider than the pattern
				}
				switch rule.Access {
				case "read":
					spec.Read = append(spec.Read, m.path)
				case "write":
					spec.Write = append(spec.Write, m.path)
				case "execute":
					spec.Execute = append(spec.Execute, m.path)
				}
			}
		case *snapshot.NetworkRule:
			if rule.Effect == snapshot.EffectDeny {
				netDeny = append(netDeny, rule.Pattern)
			} else {
				netAllow = append(netAllow, rule.Pattern)
			}
		case *snapshot.EnvironmentRule:
			if rule.Effect == snapshot.EffectDeny {
				envDeny = append(envDeny, rule.Pattern)
			} else {
				envAllow = append(envAllow, rule.Pattern)
			}
		}
	}
	for _, p := range protectWrites {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("protected path %q is not absolute", p)
		}
		ps, err := r.literal(filepath.Clean(p))
		if err != nil {
			return nil, fmt.Errorf("protected path %s: %v", p, err)
		}
		for _, q := range ps {
			// Compared case-insensitively: over-carving is the safe side.
			low := strings.ToLower(q)
			if slices.ContainsFunc(spec.Write, func(w string) bool { return under(low, strings.ToLower(w)) }) {
				denies = append(denies, q)
			}
		}
	}
	for _, list := range []*[]string{&spec.Read, &spec.Write, &spec.Execute} {
		// A grant at or under a denied path is no grant.
		*list = slices.DeleteFunc(*list, func(p string) bool {
			return slices.ContainsFunc(denies, func(d string) bool { return under(p, d) })
		})
		slices.Sort(*list)
		*list = slices.Compact(*list)
	}
	slices.Sort(denies)
	spec.Deny = slices.Compact(denies)
	switch {
	case len(netAllow) == 0:
		spec.Network = sandbox.NetworkDeny
	case slices.Contains(netAllow, "*") && len(netDeny) == 0:
		spec.Network = sandbox.NetworkAllow
	default:
		spec.Network = sandbox.NetworkProxy
	}
	env := func(name string) bool {
		low := strings.ToLower(name)
		for _, p := range envDeny {
			if pattern.Match(pattern.Env, p, low) {
				return false
			}
		}
		for _, p := range envAllow {
			if pattern.Match(pattern.Env, p, name) {
				return true
			}
		}
		return false
	}
	return &plan{spec: spec, env: env}, nil
}
