package harness

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"polc.dev/polc/certificate"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

// CapToolsGoverned is the claim that the agent touches the world only
// through polc: the provider's own world-touching tools (shell, file
// tools, web tools) are off, and its only tools are those of the `polc
// mcp` session the plan starts, each call one governed Execute.
const CapToolsGoverned = "tools.governed/v1"

// GovernedServer is the name of the MCP server a governed plan starts:
// the agent sees its tools as mcp__polc__bash (Claude Code, Codex) or
// mcp_polc_bash (Gemini CLI).
const GovernedServer = "polc"

// governedDrain is how long Spawn waits, once the provider has exited,
// for the processes it left (polc mcp closing its session: task_closed,
// the certificate) before it kills them. polc mcp's own grace for calls
// in flight (governedGrace) is shorter, so a clean close fits in it.
const (
	governedDrain = 20 * time.Second
	governedGrace = "5s"
)

// governedBackend is the effect backend a governed plan gives polc mcp
// (--backend), whatever the session file names: under the in-process
// backend a program the session's policy allows (python3 x.py) runs with
// all of polc's rights and could read the signing key or rewrite the
// evidence; under landlock the kernel holds it to the policy
// (docs/containment.md).
const governedBackend = "landlock"

// PolcExecutable returns the polc program a governed plan starts as its
// MCP server: this program, by default. Tests that are not polc replace it.
var PolcExecutable = os.Executable

// SessionFacts are what a governed plan reads of its polc session file.
type SessionFacts struct {
	// Snapshot is the absolute path of the session's policy snapshot.
	Snapshot string
	// SnapshotDigest is the snapshot's (verified) digest.
	SnapshotDigest string
	// Profile is the session's profile; Backend its effect backend (""
	// when the file names none).
	Profile string
	Backend string
	// ServerFiles are the files the session's declared MCP servers run:
	// each program and each argument naming an existing regular file,
	// absolute.
	ServerFiles []string
}

// InspectSession reads a polc session file (the format of polc serve and
// polc mcp, which polc's CLI owns) and its snapshot. polc's CLI sets it
// (package internal/polccli, which imports this one); while it is nil a
// governed spec is refused, never planned with a session nobody read.
// workspace is the run's workspace root, where the servers start.
var InspectSession func(path, workspace string) (*SessionFacts, error)

// Governed is a spec's governed section: the agent's tools are those of
// a `polc mcp` session (docs/mcp.md), started by the provider over stdio.
type Governed struct {
	// Polc is the polc executable (PolcExecutable when the spec was built).
	Polc string `json:"polc"`
	// Session is the polc serve session file: snapshot, profile,
	// principal, tenant, backend. Its workspace is replaced by the
	// harness's workspace root.
	Session  string `json:"session"`
	Evidence string `json:"evidence"`
	Cert     string `json:"cert"`
	// SignKey is the signer key of the certificate, or "".
	SignKey string `json:"sign_key"`
	// PolcSHA256 is the hex SHA-256 of Polc (symlinks resolved) when the
	// spec was built; SessionSHA256 that of Session. Snapshot and
	// SnapshotDigest are the session's snapshot (SessionFacts); Backend is
	// the backend polc mcp is given (governedBackend). All are empty in
	// a spec built by Check, which reads no file.
	PolcSHA256     string `json:"polc_sha256"`
	SessionSHA256  string `json:"session_sha256"`
	Snapshot       string `json:"snapshot"`
	SnapshotDigest string `json:"snapshot_digest"`
	Backend        string `json:"backend"`
	// ServerFiles maps each file the session's MCP servers run
	// (SessionFacts.ServerFiles) to its hex SHA-256 when the spec was
	// built.
	ServerFiles map[string]string `json:"server_files,omitempty"`
}

// governedDecl mirrors the governed section of #HarnessSpec.
type governedDecl struct {
	Session  string  `json:"session"`
	Evidence string  `json:"evidence"`
	Cert     string  `json:"cert"`
	SignKey  *string `json:"sign_key"`
}

// fromGovernedDecl checks a governed section against the rest of the spec
// (its other sections already in s) and sets s.Governed. What governed
// turns off may not be declared on: native tools, the policy section
// (whose rules become native tool rules), a declared server named polc,
// polc's sandbox (in which polc mcp could not write its evidence).
// Nothing of the run may lie where the agent writes: evidence,
// certificate, key, the session file, its snapshot and polc itself are
// compared with every working dir and write root as written and with
// symlinks resolved. With inspect (plan time, not polc vet), the session
// file is read (InspectSession): its profile must be certifiable, and the
// plan pins the session file's hash, its snapshot's digest and the polc
// executable's hash.
func fromGovernedDecl(s *Spec, d *specDecl, abs func(string) string, errf func(path, code, format string, args ...any), inspect bool) {
	g := d.Governed
	if g == nil {
		return
	}
	exe, err := PolcExecutable()
	if err != nil {
		errf("governed", diag.CodeIO, "governed: cannot find the polc executable: %v", err)
		return
	}
	s.Governed = &Governed{Polc: exe, Session: abs(g.Session), Evidence: abs(g.Evidence), Cert: abs(g.Cert), Backend: governedBackend}
	if g.SignKey != nil {
		s.Governed.SignKey = abs(*g.SignKey)
	}
	if d.Tools != nil && d.Tools.Allow != nil && len(*d.Tools.Allow) > 0 {
		errf("tools.allow", diag.CodeInvalidValue, "governed: the agent acts only through polc's tools, so tools.allow (the provider's own tools) must be empty")
	}
	if d.Policy != nil {
		errf("policy", diag.CodeInvalidValue, "governed: the session's snapshot decides what the agent may do; policy maps rules onto the provider's own tools, which governed turns off")
	}
	if d.Sandbox != nil && *d.Sandbox == SandboxPolc {
		errf("sandbox", diag.CodeInvalidValue, "governed is not available with sandbox %q yet: polc mcp would run inside the sandbox, where it cannot write its evidence", SandboxPolc)
	}
	if slices.ContainsFunc(s.MCP, func(m MCPServer) bool { return m.Name == GovernedServer }) {
		errf("mcp.servers."+GovernedServer, diag.CodeInvalidValue, "mcp server name %q is the governed session's", GovernedServer)
	}
	type governedPath struct{ path, name, p string }
	paths := []governedPath{{"governed.session", fmt.Sprintf("governed.session %q", g.Session), s.Governed.Session},
		{"governed.evidence", fmt.Sprintf("governed.evidence %q", g.Evidence), s.Governed.Evidence},
		{"governed.cert", fmt.Sprintf("governed.cert %q", g.Cert), s.Governed.Cert},
		{"governed.sign_key", fmt.Sprintf("governed.sign_key %q", deref(g.SignKey)), s.Governed.SignKey},
		{"governed", fmt.Sprintf("the polc executable %s", exe), exe}}
	if inspect {
		if f := inspectGoverned(s.Governed, g.Session, s.Workspace.Root, exe, errf); f != nil {
			paths = append(paths, governedPath{"governed.session", fmt.Sprintf("the session's snapshot %s", f.Snapshot), f.Snapshot})
			for _, sf := range f.ServerFiles {
				// The agent would run its own code as every later call
				// of the server (docs/mcp.md "Upstream servers").
				paths = append(paths, governedPath{"governed.session", fmt.Sprintf("the session's MCP server file %s", sf), sf})
			}
		}
	}
	writable := slices.Concat(s.Workspace.Dirs(), s.WriteRoots)
	for _, f := range paths {
		if f.p == "" {
			continue
		}
		if why := reachable(f.p, writable); why != "" {
			errf(f.path, diag.CodeInvalidValue, "%s %s, where the agent's tools may write: what a governed run trusts and records must be out of the agent's reach", f.name, why)
		}
	}
}

// inspectGoverned reads the session file of g (declared as decl) and
// pins what a spawn will check: the hashes of the session file and of
// the polc executable exe, the snapshot's path and digest. It returns the
// session's facts, or nil after reporting why they cannot be had.
func inspectGoverned(g *Governed, decl, workspace, exe string, errf func(path, code, format string, args ...any)) *SessionFacts {
	if InspectSession == nil {
		errf("governed.session", diag.CodeInvalidValue, "governed: this program cannot read polc session files (harness.InspectSession is not set): only polc plans governed harnesses")
		return nil
	}
	f, err := InspectSession(g.Session, workspace)
	if err != nil {
		code := diag.CodeInvalidInput
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			code = diag.CodeIO
		}
		errf("governed.session", code, "governed.session %q: %v", decl, err)
		return nil
	}
	if f.Profile != "certifiable" {
		errf("governed.session", diag.CodeInvalidValue, "governed.session %q: profile %q: a governed run ends in a certificate, so the session's profile must be certifiable", decl, f.Profile)
	}
	g.Snapshot, g.SnapshotDigest = f.Snapshot, f.SnapshotDigest
	for _, sf := range f.ServerFiles {
		sha, err := fileSHA256(sf)
		if err != nil {
			errf("governed.session", diag.CodeIO, "governed.session %q: the MCP server file %s: %v", decl, sf, err)
			continue
		}
		if g.ServerFiles == nil {
			g.ServerFiles = map[string]string{}
		}
		g.ServerFiles[sf] = sha
	}
	if g.SessionSHA256, err = fileSHA256(g.Session); err != nil {
		errf("governed.session", diag.CodeIO, "governed.session %q: %v", decl, err)
	}
	resolved, err := filepath.EvalSymlinks(exe)
	if err == nil {
		g.PolcSHA256, err = fileSHA256(resolved)
	}
	if err != nil {
		errf("governed", diag.CodeIO, "governed: cannot hash the polc executable %s: %v", exe, err)
	}
	return f
}

// reachable says how p lies in (or holds) one of the roots, as written or
// with the symlinks of both resolved ("" when it does not): a path that
// reaches a working dir through a symlink is as reachable as one written
// inside it. A path whose symlinks cannot be resolved counts as
// reachable (fail closed).
func reachable(p string, roots []string) string {
	rp, perr := resolvePath(p)
	if perr != nil {
		return fmt.Sprintf("cannot be checked against the working dirs and write roots (%v)", perr)
	}
	for _, w := range roots {
		if within(p, w) || within(w, p) {
			return fmt.Sprintf("lies in (or holds) the working dir or write root %s", w)
		}
		rw, err := resolvePath(w)
		if err != nil {
			return fmt.Sprintf("cannot be checked against the working dir or write root %s (%v)", w, err)
		}
		for _, pair := range [][2]string{{rp, rw}, {p, rw}, {rp, w}} {
			if within(pair[0], pair[1]) || within(pair[1], pair[0]) {
				var how []string
				for _, r := range [][2]string{{p, rp}, {w, rw}} {
					if r[0] != r[1] {
						how = append(how, r[0]+" resolves to "+r[1])
					}
				}
				return fmt.Sprintf("lies in (or holds) the working dir or write root %s through a symbolic link (%s)", w, strings.Join(how, ", "))
			}
		}
	}
	return ""
}

// resolvePath resolves the symlinks of the deepest existing ancestor of
// the absolute, clean path p and appends the rest. A dangling symlink on
// the way is an error: where it would lead once its target is created is
// not known.
func resolvePath(p string) (string, error) {
	cur, rest := p, ""
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return "", err
		}
		if fi, lerr := os.Lstat(cur); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s is a symbolic link to a missing target", cur)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// governedView returns the spec the provider adapters compile for a
// governed spec: every native tool denied and none allowed, and the polc
// MCP server (all its tools allowed) before the declared ones.
func (s *Spec) governedView() *Spec {
	v := *s
	g := s.Governed
	args := []string{"mcp", g.Session, "--workspace", s.Workspace.Root, "--backend", g.Backend,
		"--expect-snapshot", g.SnapshotDigest, "--evidence", g.Evidence, "--cert", g.Cert}
	if g.SignKey != "" {
		args = append(args, "--sign-key", g.SignKey)
	}
	args = append(args, "--grace", governedGrace)
	v.ToolsAllow = []string{}
	v.ToolsDeny = slices.Clone(ToolIDs)
	v.MCP = append([]MCPServer{{Name: GovernedServer, Command: g.Polc, Args: args}}, s.MCP...)
	return &v
}

// GovernedPlan is what a governed plan records of its polc session. Spawn
// checks the pins (PolcSHA256, SessionSHA256, SnapshotDigest) before the
// provider starts, and polc mcp refuses a snapshot of another digest
// (--expect-snapshot).
type GovernedPlan struct {
	Polc       string `json:"polc"`
	PolcSHA256 string `json:"polc_sha256"`
	Session    string `json:"session"`
	// SessionSHA256 is the hex SHA-256 of the session file.
	SessionSHA256 string `json:"session_sha256"`
	// Snapshot and SnapshotDigest are the session's policy snapshot.
	Snapshot       string `json:"snapshot"`
	SnapshotDigest string `json:"snapshot_digest"`
	// Backend is the effect backend polc mcp is given (--backend).
	Backend  string `json:"backend"`
	Evidence string `json:"evidence"`
	Cert     string `json:"cert"`
	SignKey  string `json:"sign_key"`
	// ServerFiles maps each file the session's MCP servers run to its
	// hex SHA-256: Spawn refuses when one changed.
	ServerFiles map[string]string `json:"server_files,omitempty"`
}

func (g *Governed) plan() *GovernedPlan {
	if g == nil {
		return nil
	}
	return &GovernedPlan{Polc: g.Polc, PolcSHA256: g.PolcSHA256, Session: g.Session, SessionSHA256: g.SessionSHA256,
		Snapshot: g.Snapshot, SnapshotDigest: g.SnapshotDigest, Backend: g.Backend, Evidence: g.Evidence, Cert: g.Cert, SignKey: g.SignKey,
		ServerFiles: maps.Clone(g.ServerFiles)}
}

// pinned reports whether the spec's session was read and pinned (a spec
// built by Check was not, and must not be compiled into a plan).
func (g *Governed) pinned() bool {
	return g.PolcSHA256 != "" && g.SessionSHA256 != "" && g.SnapshotDigest != "" && g.Snapshot != "" && g.Backend == governedBackend
}

// governedConds are the conditions of a governed plan's rows.
func governedConds(s *Spec) Cond {
	if s.Governed == nil {
		return 0
	}
	c := CondGoverned
	if len(s.MCP) > 0 {
		c |= CondForeignMCP
	}
	return c
}

// Evidence and reasons of the tools.governed/v1 rows.
const (
	governedForeignReason = "a declared MCP server besides polc's gives the agent tools polc does not govern"
	governedEvidence      = "harness/real_governed_test.go TestRealGoverned"
)

// governedRows are each provider's rows for CapToolsGoverned.
var governedRows = map[string][]Row{
	"claude-code": {
		{Capability: CapToolsGoverned, When: CondForeignMCP, Status: Degraded, Sources: []Source{byProvider("built-in tools and MCP servers offered to the model")},
			Reason: governedForeignReason, Evidence: "docs/harness.md Governed tools"},
		{Capability: CapToolsGoverned, When: CondGoverned, Status: Enforced,
			Sources:  []Source{byProvider("built-in tools offered to the model (--tools \"\", permissions.deny)"), byHarness("polc mcp: every call one governed Execute")},
			Reason:   "--tools \"\" leaves Claude no built-in tool (system/init echoes none) and permissions.deny refuses them all; --strict-mcp-config loads only polc's server, whose every call polc decides and records",
			Evidence: governedEvidence + "ClaudeCode"},
	},
	"gemini-cli": {
		{Capability: CapToolsGoverned, When: CondForeignMCP, Status: Degraded, Sources: []Source{byProvider("tools offered to the model")},
			Reason: governedForeignReason, Evidence: "docs/harness.md Governed tools"},
		{Capability: CapToolsGoverned, When: CondGoverned, Status: Enforced,
			Sources:  []Source{byProvider("built-in tools offered to the model (tools.core = [], --admin-policy deny *)"), byHarness("polc mcp: every call one governed Execute")},
			Reason:   "tools.core = [] registers no built-in tool and the admin-tier policy denies every tool but polc's server's (mcpName = \"polc\"), so the model is offered polc's tools alone and a call of any other is refused; each call of polc's polc decides and records",
			Evidence: governedEvidence + "GeminiCLI"},
	},
	"codex": {
		{Capability: CapToolsGoverned, When: CondGoverned, Status: Degraded,
			Sources:  []Source{byProvider("features.shell_tool = false, web_search disabled"), byHarness("polc mcp: every call one governed Execute")},
			Reason:   "the shell and web search are off and polc's tools run through polc, but Codex has no switch for its other tools (view_image reads any file its sandbox can read; sub-agents, goals and image tools stay), bounded only by its sandbox",
			Evidence: "docs/agent-clis.md Codex: tools; " + governedEvidence + "Codex"},
	},
}

func init() {
	for _, t := range []*Table{ClaudeCode, Codex, GeminiCLI} {
		t.Rows = append(t.Rows, governedRows[t.Provider]...)
	}
}

// governedStart checks a governed plan's pins before its provider starts:
// polc, the session file and its snapshot are still what the plan was made
// from, and nothing is at the certificate path yet, so that the
// certificate found after the run can only be this run's.
func governedStart(p *GovernedPlan) error {
	if p.PolcSHA256 == "" || p.SessionSHA256 == "" || p.SnapshotDigest == "" || p.Snapshot == "" || p.Backend != governedBackend {
		return fmt.Errorf("the plan's governed session is not pinned (polc hash, session hash, snapshot digest, backend %s): plan it again with polc harness plan", governedBackend)
	}
	resolved, err := filepath.EvalSymlinks(p.Polc)
	if err == nil {
		var sha string
		if sha, err = fileSHA256(resolved); err == nil && sha != p.PolcSHA256 {
			err = fmt.Errorf("sha256 %s, planned %s", sha, p.PolcSHA256)
		}
	}
	if err != nil {
		return fmt.Errorf("the polc executable %s is not the one planned (%v): plan again", p.Polc, err)
	}
	sha, err := fileSHA256(p.Session)
	if err == nil && sha != p.SessionSHA256 {
		err = fmt.Errorf("sha256 %s, planned %s", sha, p.SessionSHA256)
	}
	if err != nil {
		return fmt.Errorf("the session file %s changed since the plan was made (%v): plan again", p.Session, err)
	}
	for _, sf := range slices.Sorted(maps.Keys(p.ServerFiles)) {
		sha, err := fileSHA256(sf)
		if err == nil && sha != p.ServerFiles[sf] {
			err = fmt.Errorf("sha256 %s, planned %s", sha, p.ServerFiles[sf])
		}
		if err != nil {
			return fmt.Errorf("the session's MCP server file %s changed since the plan was made (%v): plan again", sf, err)
		}
	}
	data, err := readBounded(p.Snapshot, maxSnapshotBytes)
	var snap *snapshot.Snapshot
	if err == nil {
		snap, err = snapshot.Parse(data)
	}
	if err == nil && snap.Digest != p.SnapshotDigest {
		err = fmt.Errorf("digest %s, planned %s", snap.Digest, p.SnapshotDigest)
	}
	if err != nil {
		return fmt.Errorf("the session's snapshot %s is not the one planned (%v): plan again", p.Snapshot, err)
	}
	if _, err := os.Lstat(p.Cert); err == nil {
		return fmt.Errorf("a file is already at the certificate path %s (an earlier run's?): the certificate of this run could not be told from it; remove it or choose another governed.cert", p.Cert)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("certificate path %s: %v", p.Cert, err)
	}
	return nil
}

// maxSnapshotBytes bounds the snapshot Spawn reads to check its digest:
// a larger file cannot be the policy (certificate.MaxSnapshotBytes).
const maxSnapshotBytes = certificate.MaxSnapshotBytes

// readBounded reads path, refusing a file of more than max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return data, nil
}

// governedEnded reports, after a governed run, where its certificate is:
// polc mcp writes it when the provider closes its stdin (docs/mcp.md).
// governedStart saw nothing at the path before the run, so a file there
// now is this run's; it must parse as a certificate (signed when the plan
// has a sign key) of the pinned snapshot.
func governedEnded(p *GovernedPlan) (string, error) {
	data, err := readBounded(p.Cert, certificate.MaxCertificateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("the governed session left no certificate at %s (polc mcp did not close its session; its diagnostics went to the provider)", p.Cert)
	}
	if err != nil {
		return "", fmt.Errorf("the governed session's certificate %s: %v", p.Cert, err)
	}
	payload := data
	if p.SignKey != "" {
		env, pl, err := certificate.ParseEnvelope(data)
		if err == nil && env.PayloadType != certificate.PayloadType {
			err = fmt.Errorf("payload type %q, want %q", env.PayloadType, certificate.PayloadType)
		}
		if err != nil {
			return "", fmt.Errorf("the governed session's certificate %s is not a signed certificate: %v", p.Cert, err)
		}
		payload = pl
	}
	c, err := certificate.Parse(payload)
	if err != nil {
		return "", fmt.Errorf("the governed session's certificate %s: %v", p.Cert, err)
	}
	if c.PolicyDigest != p.SnapshotDigest {
		return "", fmt.Errorf("the governed session's certificate %s is of policy digest %s, not of the planned snapshot %s", p.Cert, c.PolicyDigest, p.SnapshotDigest)
	}
	return filepath.Clean(p.Cert), nil
}
