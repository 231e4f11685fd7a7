package landlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"polc.dev/polc/decision"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/egress"
	"polc.dev/polc/sandbox"
	"polc.dev/polc/snapshot"
)

// ServerSandbox holds the long-lived processes a session starts itself
// (the MCP servers it declares) to the sandbox a call of the session's
// policy gets (planFor): the same filesystem grants and carve-outs and
// the same network, for the process's whole life, with a private
// temporary directory and, for an allowlisted network, an egress proxy
// that admits what the policy's network facet admits until Close.
type ServerSandbox struct {
	spec     sandbox.Spec
	tmp      string
	dir      string
	proxyEnv []string
	stop     func()
}

// ServerSandbox derives the sandbox of the session's long-lived processes
// from policy and workspace (absolute).
func (b *Backend) ServerSandbox(policy *snapshot.Snapshot, workspace string) (_ *ServerSandbox, err error) {
	dec, err := decision.Compile(policy)
	if err != nil {
		return nil, err
	}
	plan, err := planFor(&executor.Invocation{Policy: policy, Decider: dec, Workspace: workspace}, b.Protect, b.ProtectWrites)
	if err != nil {
		return nil, err
	}
	root := b.TempDir
	if root == "" {
		root = os.TempDir()
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r // a write root: the launcher refuses a path through a link
	}
	dir, err := os.MkdirTemp(root, "polc-landlock-server-")
	if err != nil {
		return nil, err
	}
	s := &ServerSandbox{spec: plan.spec, dir: dir, tmp: filepath.Join(dir, "tmp"), stop: func() {}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
		return nil, err
	}
	s.spec.Write = append(s.spec.Write, s.tmp)
	s.spec.Limits = b.Limits
	s.spec.KeepSession = true
	if s.spec.Network == sandbox.NetworkProxy {
		sock := filepath.Join(dir, "proxy.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			return nil, fmt.Errorf("egress proxy: %v", err)
		}
		proxy := &egress.Proxy{Admit: func(host string, port int) (bool, string) {
			hp, ok := hostFacet(host, port)
			if !ok {
				return false, "not a destination the policy can name"
			}
			if !dec.AdmitsHost(hp) {
				return false, "the policy's network facet does not admit " + hp
			}
			return true, ""
		}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = proxy.Serve(ctx, l)
		}()
		s.stop = func() {
			cancel()
			<-done
		}
		s.spec.ProxySocket, s.spec.ProxyPort = sock, ProxyPort
		u := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
		s.proxyEnv = []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "NO_PROXY=", "no_proxy="}
	}
	return s, nil
}

// Command returns the command that runs argv (argv[0] absolute) in dir
// with env (its whole environment; TMPDIR and, for an allowlisted
// network, the proxy's variables are set in it) under the sandbox.
func (s *ServerSandbox) Command(argv, env []string, dir string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("no program")
	}
	spec := s.spec
	spec.Dir = dir
	spec.Env = setEnv(append([]string(nil), env...), "TMPDIR="+s.tmp)
	for _, kv := range s.proxyEnv {
		spec.Env = setEnv(spec.Env, kv)
	}
	// The caller ends the process; no context kills it.
	return sandbox.Command(context.Background(), spec, argv)
}

// Close stops the egress proxy and removes the temporary directory, once
// the processes are gone.
func (s *ServerSandbox) Close() {
	s.stop()
	os.RemoveAll(s.dir)
}
