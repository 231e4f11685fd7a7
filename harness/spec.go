package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

// Providers are the provider names a spec may use, sorted.
var Providers = []string{"claude-code", "codex", "gemini-cli"}

// ToolIDs are the provider-neutral built-in tool ids (the PermissionPolicy
// action ids a harness understands).
var ToolIDs = []string{"bash", "edit_file", "list_files", "read_file", "search_files", "web_fetch", "web_search", "write_file"}

// DefaultWallClock is the wall-clock limit of a spec that declares none.
const DefaultWallClock = 30 * time.Minute

// Spec is a HarnessSpec with polc's defaults applied, paths made absolute
// and, when the spec references a policy snapshot, the snapshot's rules in
// place. Build one with FromDeclaration.
type Spec struct {
	Name        string
	Provider    string
	Model       string
	Description string
	// Yolo selects the provider's legacy yolo profile.
	Yolo bool
	// Sandbox is SandboxProvider (the default) or SandboxPolc.
	Sandbox string
	// PolicyDigest is the digest of the referenced snapshot, or "".
	PolicyDigest string
	Endpoint     string
	Workspace    Workspace
	Approval     string // "deny" or "ask"
	ToolsAllow   []string
	ToolsDeny    []string
	// ReadRoots is nil when reads are not confined; otherwise the roots
	// (beyond the working dirs) that may be read.
	ReadRoots  []string
	WriteRoots []string // beyond the working dirs
	DenyPaths  []string
	Network    string // "off", "allowlist" or "on"
	Hosts      []string
	// CommandsAllow is nil when any command may run.
	CommandsAllow []string
	CommandsDeny  []string
	MCP           []MCPServer
	EnvAllow      []string
	Secrets       []Secret
	Turns         int
	CostMicroUSD  int64
	WallClock     time.Duration
	Required      []string
	AllowDegraded []string
	// Governed, when set, makes the agent's tools those of a polc mcp
	// session (governed.go); nil otherwise.
	Governed *Governed

	decl *compiler.Harness
}

// Workspace is the agent's working directories and lease.
type Workspace struct {
	Root      string   `json:"root"`
	ExtraDirs []string `json:"extra_dirs"`
	Lease     string   `json:"lease"`
}

// Dirs returns the working directories: the root, then the extra dirs.
func (w Workspace) Dirs() []string { return append([]string{w.Root}, w.ExtraDirs...) }

// MCPServer is a declared MCP server. Tools is nil when every tool of the
// server is allowed.
type MCPServer struct {
	Name    string   `json:"name"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Tools   []string `json:"tools"`
}

// Secret is an environment variable set from a secret reference at spawn.
type Secret struct {
	Name string `json:"name"`
	Ref  string `json:"ref"`
}

// PosOf returns the source position of a declaration path, when the spec
// came from a declaration.
func (s *Spec) PosOf(path string) diag.Pos {
	if s.decl == nil {
		return diag.Pos{}
	}
	return s.decl.PosOf(path)
}

// specDecl mirrors #HarnessSpec; pointers are nil when a field is unset.
type specDecl struct {
	Provider    string  `json:"provider"`
	Model       *string `json:"model"`
	Description *string `json:"description"`
	Yolo        *bool   `json:"yolo"`
	Sandbox     *string `json:"sandbox"`
	Policy      *struct {
		Snapshot string  `json:"snapshot"`
		Digest   *string `json:"digest"`
	} `json:"policy"`
	Endpoint *struct {
		BaseURL string `json:"base_url"`
	} `json:"endpoint"`
	Workspace struct {
		Root      string    `json:"root"`
		ExtraDirs *[]string `json:"extra_dirs"`
		Lease     *string   `json:"lease"`
	} `json:"workspace"`
	Approval *string `json:"approval"`
	Tools    *struct {
		Allow *[]string `json:"allow"`
		Deny  *[]string `json:"deny"`
	} `json:"tools"`
	Filesystem *struct {
		Read  *[]string `json:"read"`
		Write *[]string `json:"write"`
		Deny  *[]string `json:"deny"`
	} `json:"filesystem"`
	Network *struct {
		Mode  *string   `json:"mode"`
		Allow *[]string `json:"allow"`
	} `json:"network"`
	Subprocess *struct {
		Allow *[]string `json:"allow"`
		Deny  *[]string `json:"deny"`
	} `json:"subprocess"`
	MCP *struct {
		Servers map[string]struct {
			Command string    `json:"command"`
			Args    *[]string `json:"args"`
			Tools   *[]string `json:"tools"`
		} `json:"servers"`
	} `json:"mcp"`
	Environment *struct {
		Allow   *[]string         `json:"allow"`
		Secrets map[string]string `json:"secrets"`
	} `json:"environment"`
	Resources *struct {
		Turns        *int    `json:"turns"`
		CostMicroUSD *int64  `json:"cost_microusd"`
		WallClock    *string `json:"wall_clock"`
	} `json:"resources"`
	RequiredCapabilities *[]string     `json:"required_capabilities"`
	AllowDegraded        *[]string     `json:"allow_degraded"`
	Governed             *governedDecl `json:"governed"`
}

// FromDeclaration builds a Spec from a loaded harness declaration. Relative
// paths (workspace, filesystem roots, the policy snapshot) are resolved
// against dir. Problems are returned as positioned diagnostics; the Spec is
// nil when there is an error.
func FromDeclaration(h *compiler.Harness, dir string) (*Spec, diag.List) {
	return fromDeclaration(h, dir, true)
}

// Check runs FromDeclaration's checks of a harness declaration except those
// that read the files it names (the policy snapshot; a governed section's
// session file and its snapshot), which are not read: polc vet and compile
// check harnesses before (or while) those snapshots are compiled.
func Check(h *compiler.Harness, dir string) diag.List {
	_, diags := fromDeclaration(h, dir, false)
	return diags
}

func fromDeclaration(h *compiler.Harness, dir string, withPolicy bool) (*Spec, diag.List) {
	var diags diag.List
	var d specDecl
	dec := json.NewDecoder(bytes.NewReader(h.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		diags.Add(h.Pos, diag.CodeSchemaViolation, "harness %q: %v", h.Name, err)
		return nil, diags
	}
	s := &Spec{Name: h.Name, Provider: d.Provider, decl: h}
	errf := func(path, code, format string, args ...any) {
		diags.Add(h.PosOf(path), code, "harness %q: %s", h.Name, fmt.Sprintf(format, args...))
	}
	abs := func(p string) string {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return filepath.Clean(p)
	}
	absAll := func(path string, in *[]string) []string {
		if in == nil {
			return nil
		}
		out := []string{}
		for i, p := range *in {
			if strings.ContainsAny(p, "*?") {
				errf(fmt.Sprintf("%s[%d]", path, i), diag.CodeInvalidPattern, "%s: %q: want a directory or file path, not a glob", path, p)
				continue
			}
			out = append(out, abs(p))
		}
		return out
	}
	s.Model = deref(d.Model)
	if strings.HasPrefix(s.Model, "-") || strings.ContainsAny(s.Model, " \t\r\n") {
		// A provider's option parser would read it as an option of its
		// own (yargs does not take "-m --include-directories=/" as a value).
		errf("model", diag.CodeInvalidValue, "model %q: want a model name, not one that starts with '-' or holds whitespace", s.Model)
	}
	s.Description = deref(d.Description)
	s.Yolo = d.Yolo != nil && *d.Yolo
	s.Sandbox = SandboxProvider
	if d.Sandbox != nil {
		s.Sandbox = *d.Sandbox
		if s.Sandbox != SandboxProvider && s.Sandbox != SandboxPolc {
			errf("sandbox", diag.CodeInvalidValue, "sandbox %q: want %q or %q", s.Sandbox, SandboxProvider, SandboxPolc)
		}
	}
	if d.Endpoint != nil {
		s.Endpoint = strings.TrimRight(d.Endpoint.BaseURL, "/")
		if u, err := url.Parse(s.Endpoint); err != nil || u.User != nil {
			// The URL reaches a provider's argv (visible to every user
			// in ps) and the plan: credentials belong in environment
			// secrets, never in it.
			errf("endpoint.base_url", diag.CodeInvalidValue, "endpoint.base_url: want an http(s) URL without user:password@ (put credentials in environment secrets)")
		}
	}
	s.Workspace = Workspace{Root: abs(d.Workspace.Root), ExtraDirs: absAll("workspace.extra_dirs", d.Workspace.ExtraDirs), Lease: "exclusive"}
	if s.Workspace.ExtraDirs == nil {
		s.Workspace.ExtraDirs = []string{}
	}
	if d.Workspace.Lease != nil {
		s.Workspace.Lease = *d.Workspace.Lease
	}
	s.Approval = "deny"
	if d.Approval != nil {
		s.Approval = *d.Approval
	}
	s.ToolsAllow, s.ToolsDeny = []string{}, []string{}
	if d.Tools != nil {
		s.ToolsAllow = sortedSet(derefs(d.Tools.Allow))
		s.ToolsDeny = sortedSet(derefs(d.Tools.Deny))
	}
	s.WriteRoots, s.DenyPaths = []string{}, []string{}
	if d.Filesystem != nil {
		s.ReadRoots = absAll("filesystem.read", d.Filesystem.Read)
		if w := absAll("filesystem.write", d.Filesystem.Write); w != nil {
			s.WriteRoots = w
		}
		if dp := absAll("filesystem.deny", d.Filesystem.Deny); dp != nil {
			s.DenyPaths = dp
		}
	}
	s.Network, s.Hosts = "off", []string{}
	if d.Network != nil {
		if d.Network.Mode != nil {
			s.Network = *d.Network.Mode
		}
		s.Hosts = sortedSet(derefs(d.Network.Allow))
		for i, hp := range s.Hosts {
			if err := pattern.Validate(pattern.Host, hp); err != nil {
				errf(fmt.Sprintf("network.allow[%d]", i), diag.CodeInvalidPattern, "network.allow: %v", err)
			}
		}
		if len(s.Hosts) > 0 && s.Network != "allowlist" {
			diags.Warn(h.PosOf("network.allow"), diag.CodeNoEffect, "harness %q: network.allow has no effect under mode %q", h.Name, s.Network)
			s.Hosts = []string{}
		}
	}
	s.CommandsDeny = []string{}
	if d.Subprocess != nil {
		if d.Subprocess.Allow != nil {
			s.CommandsAllow = sortedSet(*d.Subprocess.Allow)
		}
		s.CommandsDeny = sortedSet(derefs(d.Subprocess.Deny))
		for _, list := range [][]string{s.CommandsAllow, s.CommandsDeny} {
			for _, c := range list {
				if err := pattern.Validate(pattern.Command, c); err != nil {
					errf("subprocess", diag.CodeInvalidPattern, "subprocess: %v", err)
				}
			}
		}
	}
	s.MCP = []MCPServer{}
	if d.MCP != nil {
		for name, srv := range d.MCP.Servers {
			m := MCPServer{Name: name, Command: srv.Command, Args: derefs(srv.Args)}
			if srv.Tools != nil {
				m.Tools = sortedSet(*srv.Tools)
			}
			if strings.Contains(name, "_") {
				errf("mcp.servers."+name, diag.CodeInvalidValue, "mcp server name %q: '_' is not allowed (providers split tool names on it)", name)
			}
			if strings.Contains(name, ".") && d.Provider == "codex" {
				// -c mcp_servers.NAME.command=… is a dotted TOML key path:
				// "a.b" would configure server "a".
				errf("mcp.servers."+name, diag.CodeInvalidValue, "mcp server name %q: '.' is not allowed for codex (its config keys split on it)", name)
			}
			s.MCP = append(s.MCP, m)
		}
		slices.SortFunc(s.MCP, func(a, b MCPServer) int { return strings.Compare(a.Name, b.Name) })
	}
	s.EnvAllow, s.Secrets = []string{}, []Secret{}
	if d.Environment != nil {
		s.EnvAllow = sortedSet(derefs(d.Environment.Allow))
		for i, name := range derefs(d.Environment.Allow) {
			if why := envRefusal(d.Provider, name); why != "" {
				errf(fmt.Sprintf("environment.allow[%d]", i), diag.CodeHarnessEnvRefused, "environment.allow: %s may not be passed to %s: %s", name, d.Provider, why)
			}
		}
		for name, ref := range d.Environment.Secrets {
			if slices.Contains(s.EnvAllow, name) {
				errf("environment.secrets."+name, diag.CodeInvalidValue, "%s is both allowlisted and a secret", name)
			}
			if why := envRefusal(d.Provider, name); why != "" {
				errf("environment.secrets."+name, diag.CodeHarnessEnvRefused, "environment.secrets: %s may not be passed to %s: %s", name, d.Provider, why)
			}
			s.Secrets = append(s.Secrets, Secret{Name: name, Ref: ref})
		}
		slices.SortFunc(s.Secrets, func(a, b Secret) int { return strings.Compare(a.Name, b.Name) })
	}
	s.WallClock = DefaultWallClock
	if r := d.Resources; r != nil {
		if r.Turns != nil {
			s.Turns = *r.Turns
		}
		if r.CostMicroUSD != nil {
			s.CostMicroUSD = *r.CostMicroUSD
		}
		if r.WallClock != nil {
			wc, err := time.ParseDuration(*r.WallClock)
			if err != nil || wc <= 0 {
				errf("resources.wall_clock", diag.CodeInvalidValue, "resources.wall_clock %q: want a positive duration", *r.WallClock)
			}
			s.WallClock = wc
		}
	}
	s.Required = sortedSet(derefs(d.RequiredCapabilities))
	s.AllowDegraded = sortedSet(derefs(d.AllowDegraded))
	for _, f := range []struct {
		path string
		list []string
	}{{"required_capabilities", s.Required}, {"allow_degraded", s.AllowDegraded}} {
		for _, c := range f.list {
			if !KnownCapability(c) {
				errf(f.path, diag.CodeUnknownCapability, "%s: unknown capability %q (known: %s)", f.path, c, strings.Join(Capabilities, ", "))
			}
		}
	}
	if s.Yolo {
		declared := map[string]bool{"policy": d.Policy != nil, "approval": d.Approval != nil, "tools": d.Tools != nil,
			"filesystem": d.Filesystem != nil, "network": d.Network != nil, "subprocess": d.Subprocess != nil, "mcp": d.MCP != nil,
			"sandbox": d.Sandbox != nil, "governed": d.Governed != nil}
		for _, sec := range slices.Sorted(maps.Keys(declared)) {
			if declared[sec] {
				errf(sec, diag.CodeInvalidValue, "yolo selects the legacy %s.legacy-yolo profile and cannot be combined with %s", s.Provider, sec)
			}
		}
		diags.Warn(h.PosOf("yolo"), diag.CodeLegacyYolo, "harness %q: yolo is deprecated; it compiles to the %s.legacy-yolo profile, whose controls differ per provider (see its capability report)", h.Name, s.Provider)
	}
	fromGovernedDecl(s, &d, abs, errf, withPolicy)
	if d.Policy != nil {
		for sec, set := range map[string]bool{"tools": d.Tools != nil, "filesystem": d.Filesystem != nil, "network": d.Network != nil, "subprocess": d.Subprocess != nil} {
			if set {
				errf(sec, diag.CodeHarnessPolicyConflict, "%s comes from the policy snapshot; do not declare it too", sec)
			}
		}
		if withPolicy {
			s.importPolicy(abs(d.Policy.Snapshot), d.Policy.Digest, &diags)
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return s, diags
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func derefs(p *[]string) []string {
	if p == nil {
		return []string{}
	}
	return *p
}

func sortedSet(in []string) []string {
	out := append([]string{}, in...)
	slices.Sort(out)
	return slices.Compact(out)
}

// importPolicy takes the tool, command, path and host rules of a compiled
// PermissionPolicy snapshot. A section the harness declares itself may not
// also come from the policy.
func (s *Spec) importPolicy(path string, digest *string, diags *diag.List) {
	h := s.decl
	data, err := os.ReadFile(path)
	if err != nil {
		diags.Add(h.PosOf("policy.snapshot"), diag.CodeIO, "harness %q: cannot read policy snapshot: %v", h.Name, err)
		return
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		diags.Add(h.PosOf("policy.snapshot"), diag.CodeInvalidInput, "harness %q: invalid policy snapshot: %v", h.Name, err)
		return
	}
	if digest != nil && *digest != snap.Digest {
		diags.Add(h.PosOf("policy.digest"), diag.CodeInvalidValue, "harness %q: policy snapshot %s has digest %s, want %s", h.Name, snap.Name, snap.Digest, *digest)
		return
	}
	s.PolicyDigest = snap.Digest
	unmappable := func(r snapshot.Rule, why string) {
		diags.Add(h.PosOf("policy.snapshot"), diag.CodeHarnessPolicyUnmappable, "harness %q: policy rule %s: %s", h.Name, r.Base().RuleID, why)
	}
	root := func(p string, r snapshot.Rule) (string, bool) {
		p = strings.TrimSuffix(p, "/**")
		if p == "**" || p == "" {
			p = "."
		}
		if strings.ContainsAny(p, "*?") {
			unmappable(r, fmt.Sprintf("path pattern %q is not a directory or file (want /dir or /dir/**)", p))
			return "", false
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.Workspace.Root, p)
		}
		return filepath.Clean(p), true
	}
	var allow, deny []string
	var reads []string
	var cmdAllow []string
	cmdAllowAny := false
	for _, r := range snap.CompiledRules {
		switch r := r.(type) {
		case *snapshot.ActionRule:
			if r.Target != nil {
				if r.Effect == snapshot.EffectDeny && deref(r.TargetKind) == string(pattern.Command) {
					s.CommandsDeny = append(s.CommandsDeny, *r.Target)
					continue
				}
				unmappable(r, "only bash:<command> qualified denies map onto a harness")
				continue
			}
			var ids []string
			for _, id := range ToolIDs {
				if pattern.MatchGlob(r.Action, id) {
					ids = append(ids, id)
				}
			}
			if r.Effect == snapshot.EffectDeny {
				deny = append(deny, ids...)
			} else {
				allow = append(allow, ids...)
			}
		case *snapshot.FilesystemRule:
			p, ok := root(r.Pattern, r)
			if !ok {
				continue
			}
			switch {
			case r.Effect == snapshot.EffectDeny:
				s.DenyPaths = append(s.DenyPaths, p)
			case r.Access == "read":
				reads = append(reads, p)
			case r.Access == "write":
				if !slices.Contains(s.Workspace.Dirs(), p) {
					s.WriteRoots = append(s.WriteRoots, p)
				}
			default:
				unmappable(r, fmt.Sprintf("%s roots have no harness control", r.Access))
			}
		case *snapshot.NetworkRule:
			switch {
			case r.Effect == snapshot.EffectAllow && r.Pattern == "*":
				s.Network = "on"
			case r.Effect == snapshot.EffectAllow:
				if s.Network != "on" {
					s.Network = "allowlist"
				}
				s.Hosts = append(s.Hosts, r.Pattern)
			default:
				unmappable(r, "host denies have no harness control (declare the allowed hosts instead)")
			}
		case *snapshot.SubprocessRule:
			switch {
			case r.Effect == snapshot.EffectAllow && r.Pattern == "*":
				cmdAllowAny = true
			case r.Effect == snapshot.EffectAllow:
				cmdAllow = append(cmdAllow, r.Pattern)
			default:
				s.CommandsDeny = append(s.CommandsDeny, r.Pattern)
			}
		}
	}
	s.ToolsAllow, s.ToolsDeny = sortedSet(allow), sortedSet(deny)
	if reads != nil {
		s.ReadRoots = sortedSet(reads)
	}
	if !cmdAllowAny {
		s.CommandsAllow = sortedSet(cmdAllow)
	}
	s.CommandsDeny = sortedSet(s.CommandsDeny)
	s.WriteRoots, s.DenyPaths, s.Hosts = sortedSet(s.WriteRoots), sortedSet(s.DenyPaths), sortedSet(s.Hosts)
	if s.Network == "on" {
		s.Hosts = []string{}
	}
}
