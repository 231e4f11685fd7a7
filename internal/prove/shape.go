package prove

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"polc.dev/polc/internal/algebra"
	"polc.dev/polc/normalize"
)

// A shape is one kind of request the normalizer produces, with the fewest
// facets: an action and at most one target value (an edit_file path is
// read and written; a bash redirection or assignment comes with shell
// control; a bash command of redirections alone, "> /dev/null", carries
// shell control and no value at all). Adding facets to a request only adds matches: more deny
// matches, more facets to grant, more approvals. So a request that is not
// denied (or is allowed) stays so when facets are taken away, and a
// request that some facet denies or escalates keeps that facet in a
// request of one of these shapes. Every question prove asks is therefore
// decided by requests of these shapes alone (docs/prove.md).
type shape struct {
	// builtin is the built-in action, or "" for an action registered by a
	// runtime (a descriptor whose hints present the value).
	builtin string
	// foldsTo: for a registered action, the built-in action its id
	// lowercases to (deny and approval rules qualified with that action
	// read its values), or "" for an id that lowercases to none.
	foldsTo string
	// atoms are the kinds of the shape's values: one, or for an
	// assignment before a command (X=1 cmd, no shell control) the
	// environment name and the argv.
	atoms    []atom
	access   []string
	shell    bool
	resource bool
	// via is how a witness presents the value: "file", "redirect",
	// "devtcp", "assign", "url", "argv", "mcp", "hint", or "shell" for
	// shell control without a value.
	via string
}

// key identifies the shape in memo tables.
func (s shape) key() string {
	return fmt.Sprintf("%s|%s|%v|%v|%v|%v|%s", s.builtin, s.foldsTo, s.atoms, s.access, s.shell, s.resource, s.via)
}

func (s shape) action() string {
	if s.builtin != "" {
		return s.builtin
	}
	return s.foldsTo
}

var builtins = []string{"bash", "edit_file", "http_get", "mcp", "read_file", "write_file"}

// shapes are the shapes questions are asked over. The normalizer's
// requests are (TestShapesCoverNormalizer derives them from its output):
// bash — argvs, with shell control or not; environment names, after an
// assignment before a program (no shell control) or alone or exported
// (shell control); paths a redirection opens (read, write, both for
// "<>") and /dev/tcp hosts, with shell control; or shell control alone
// ("> /dev/null", "2>&1", "export"); read_file, write_file, edit_file:
// one path; http_get: one host; mcp: a tool, with a resource or not; an
// action a runtime registers: any union of what its hints present, or
// nothing. Each such request holds, for every reason a policy has to
// decide it, a request of one of these shapes made of part of it.
func shapes() []shape {
	one := func(a atom) []atom { return []atom{a} }
	out := []shape{
		{builtin: "bash", shell: true, via: "shell"},
		{builtin: "bash", atoms: one(atomArgv), via: "argv"},
		{builtin: "bash", atoms: one(atomArgv), shell: true, via: "argv"},
		{builtin: "bash", atoms: one(atomPath), access: []string{"read"}, shell: true, via: "redirect"},
		{builtin: "bash", atoms: one(atomPath), access: []string{"write"}, shell: true, via: "redirect"},
		{builtin: "bash", atoms: one(atomHost), shell: true, via: "devtcp"},
		{builtin: "bash", atoms: one(atomEnv), shell: true, via: "assign"},
		{builtin: "bash", atoms: []atom{atomEnv, atomArgv}, via: "assign"},
		{builtin: "read_file", atoms: one(atomPath), access: []string{"read"}, via: "file"},
		{builtin: "write_file", atoms: one(atomPath), access: []string{"write"}, via: "file"},
		{builtin: "edit_file", atoms: one(atomPath), access: []string{"read", "write"}, via: "file"},
		{builtin: "http_get", atoms: one(atomHost), via: "url"},
		{builtin: "mcp", atoms: one(atomMCP), via: "mcp"},
		{builtin: "mcp", atoms: one(atomMCP), resource: true, via: "mcp"},
	}
	custom := []shape{
		{atoms: nil, via: "hint"},
		{atoms: nil, shell: true, via: "shell"},
		{atoms: one(atomPath), access: []string{"read"}, via: "hint"},
		{atoms: one(atomPath), access: []string{"write"}, via: "hint"},
		{atoms: one(atomPath), access: []string{"execute"}, via: "hint"},
		{atoms: one(atomArgv), via: "argv"},
		{atoms: one(atomArgv), shell: true, via: "argv"},
		{atoms: one(atomPath), access: []string{"read"}, shell: true, via: "redirect"},
		{atoms: one(atomPath), access: []string{"write"}, shell: true, via: "redirect"},
		{atoms: one(atomHost), via: "url"},
		{atoms: one(atomHost), shell: true, via: "devtcp"},
		{atoms: one(atomEnv), shell: true, via: "assign"},
		{atoms: []atom{atomEnv, atomArgv}, via: "assign"},
		{atoms: one(atomMCP), via: "mcp"},
		{atoms: one(atomMCP), resource: true, via: "mcp"},
	}
	for _, to := range append([]string{""}, builtins...) {
		for _, c := range custom {
			c.foldsTo = to
			out = append(out, c)
		}
	}
	return out
}

// domain is the strings a part can hold: Require all accept, no Forbid
// does.
type domain struct {
	require []*algebra.NFA
	forbid  []*algebra.NFA
}

// domains caches the domains of shapes: they depend on the shape alone.
var domains sync.Map // string → domain

func cachedDomain(key string, build func() domain) domain {
	if d, ok := domains.Load(key); ok {
		return d.(domain)
	}
	d, _ := domains.LoadOrStore(key, build())
	return d.(domain)
}

// actionDomain is the action ids of requests of shape s.
func (s shape) actionDomain() domain {
	return cachedDomain("action "+s.builtin+" "+s.foldsTo, s.buildActionDomain)
}

func (s shape) buildActionDomain() domain {
	if s.builtin != "" {
		return domain{require: []*algebra.NFA{lit(s.builtin)}}
	}
	ids := algebra.Plus(actionIDChars)
	if s.foldsTo != "" {
		return domain{require: []*algebra.NFA{ids, lit(s.foldsTo).Fold()}, forbid: []*algebra.NFA{lit(s.foldsTo)}}
	}
	var forbid []*algebra.NFA
	for _, b := range builtins {
		forbid = append(forbid, lit(b).Fold())
	}
	return domain{require: []*algebra.NFA{ids}, forbid: forbid}
}

// valueTiers are the domains witnesses of shape s are looked for in, in
// order: the first holds the most readable ones (a path is looked for
// outside or under an ordinary workspace before under the workspace "/"),
// and each is made of values realizable as action requests.
func (s shape) valueTiers(i int) []domain {
	if s.atoms[i] == atomPath {
		return []domain{cachedDomain("path preferred", func() domain {
			req, forbid := pathDomain(false)
			return domain{[]*algebra.NFA{req}, forbid}
		}), s.valueDomain(i, true)}
	}
	return []domain{s.valueDomain(i, true)}
}

// valueDomain is the encoded values of shape s: tight ones are what
// witnesses are made of (each realizable as an action request), loose ones
// every value the normalizer may produce; tight ⊆ real ⊆ loose.
func (s shape) valueDomain(i int, tight bool) domain {
	a := s.atoms[i]
	return cachedDomain(fmt.Sprintf("value %d %v %v", a, s.resource, tight), func() domain { return buildValueDomain(a, s.resource, tight) })
}

func buildValueDomain(a atom, resource, tight bool) domain {
	switch a {
	case atomPath:
		req, forbid := pathDomain(true)
		return domain{[]*algebra.NFA{req}, forbid}
	case atomArgv:
		req, forbid := argvDomain()
		return domain{[]*algebra.NFA{req}, forbid}
	case atomHost:
		return domain{require: []*algebra.NFA{hostDomain(tight)}}
	case atomEnv:
		req, forbid := envDomain(tight)
		return domain{[]*algebra.NFA{req}, forbid}
	case atomMCP:
		req, forbid := mcpDomain(resource, tight)
		return domain{[]*algebra.NFA{req}, forbid}
	}
	return domain{require: []*algebra.NFA{algebra.Epsilon()}}
}

// describe names a shape in messages: "write_file", "bash (redirection)".
func (s shape) describe() string {
	name := s.builtin
	if name == "" {
		name = "a registered action"
	}
	if s.via == "shell" {
		name += " (shell control only)"
	}
	return name
}

// Witness is a counterexample: the parts of a request of one shape.
type Witness struct {
	shape                     shape
	principal, tenant, action string
	values                    []string
	time                      string
	usage                     normalize.Usage
}

// defaultWorkspace is the workspace of witnesses whose value does not
// name one.
const defaultWorkspace = "/ws"

// pathOf decodes a path value into the workspace and the path.
func pathOf(v string) (ws, path string) {
	switch rune(v[0]) {
	case outsideWS:
		path = v[1:]
		ws = defaultWorkspace
		for within(strings.ToLower(ws), strings.ToLower(path)) {
			ws += "x"
		}
		return ws, path
	case rootWS:
		return "/", "/" + v[1:]
	}
	ws, rel, _ := strings.Cut(v[1:], string(sep))
	if rel == "" {
		return ws, ws
	}
	return ws, ws + "/" + rel
}

func within(dir, p string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// shellQuote quotes a word for bash: as is when it is plainly literal,
// else in single quotes.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+,:@%") == "" && !reserved[w] && w[0] != '-' {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// reserved are bash's reserved words and the words that begin a compound
// or special construct when unquoted in command position.
var reserved = map[string]bool{"!": true, "case": true, "coproc": true, "do": true, "done": true, "elif": true, "else": true,
	"esac": true, "fi": true, "for": true, "function": true, "if": true, "in": true, "select": true, "then": true,
	"until": true, "while": true, "time": true, "{": true, "}": true, "[[": true, "]]": true}

// Request returns the witness as an action request and the catalog that
// resolves its action: the built-in one, or one holding the descriptor a
// runtime would register for a registered action of the shape.
func (w Witness) Request() (normalize.ActionRequest, *normalize.Catalog, error) {
	s := w.shape
	req := normalize.ActionRequest{Action: w.action, Principal: w.principal, Tenant: w.tenant, Workspace: defaultWorkspace, Arguments: map[string]any{}}
	t := w.time
	req.Time = &t
	if w.usage != (normalize.Usage{}) {
		u := w.usage
		req.Usage = &u
	}
	var hints normalize.NormalizationHints
	props := map[string]any{}
	arg := func(name, value string) {
		req.Arguments[name] = value
		props[name] = map[string]any{"type": "string"}
	}
	words := func(v string) string {
		ws := strings.Split(v, string(sep))
		for i, wd := range ws {
			ws[i] = shellQuote(wd)
		}
		return strings.Join(ws, " ")
	}
	switch {
	case len(s.atoms) == 0 && s.shell:
		// Shell control and nothing the policy judges: a redirection
		// to /dev/null opens nothing (normalize's redirectFacets).
		arg("command", "> /dev/null")
		hints.Command = "command"
	case len(s.atoms) == 0:
	case s.atoms[0] == atomPath:
		ws, path := pathOf(w.values[0])
		req.Workspace = ws
		switch s.via {
		case "redirect":
			op := "<"
			if s.access[0] == "write" {
				op = ">"
			}
			arg("command", op+" "+shellQuote(path))
			hints.Command = "command"
		default:
			arg("path", path)
			hints.Paths = []normalize.PathHint{{Arg: "path", Access: s.access}}
		}
	case s.atoms[0] == atomArgv:
		cmd := words(w.values[0])
		if s.shell {
			cmd += " > /dev/null"
		}
		arg("command", cmd)
		hints.Command = "command"
	case s.atoms[0] == atomHost:
		if s.via == "devtcp" {
			host, port := splitHostPort(w.values[0])
			arg("command", "> /dev/tcp/"+host+"/"+port)
			hints.Command = "command"
		} else {
			arg("url", "http://"+w.values[0]+"/")
			hints.URL = "url"
		}
	case s.atoms[0] == atomEnv:
		cmd := w.values[0] + "=x"
		if len(s.atoms) > 1 {
			cmd += " " + words(w.values[1])
		}
		arg("command", cmd)
		hints.Command = "command"
	case s.atoms[0] == atomMCP:
		st, res, hasRes := strings.Cut(w.values[0], string(sep))
		server, tool, _ := strings.Cut(st, "/")
		arg("server", server)
		arg("tool", tool)
		m := &normalize.MCPHint{Server: "server", Tool: "tool"}
		if hasRes {
			arg("resource", res)
			m.Resource = "resource"
		}
		hints.MCP = m
	}
	if s.builtin != "" {
		return req, nil, nil
	}
	required := []string{}
	for name := range props {
		required = append(required, name)
	}
	slices.Sort(required)
	schema, err := json.Marshal(map[string]any{"type": "object", "additionalProperties": false, "properties": props, "required": required})
	if err != nil {
		return req, nil, err
	}
	cat := normalize.NewCatalog()
	if _, err := cat.Add(normalize.ActionDescriptor{ID: w.action, Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "polc prove"},
		Arguments: schema, Hints: hints, Containment: []string{}}); err != nil {
		return req, nil, fmt.Errorf("registering %s: %v", w.action, err)
	}
	return req, cat, nil
}

func splitHostPort(v string) (string, string) {
	i := strings.LastIndexByte(v, ':')
	return v[:i], v[i+1:]
}
