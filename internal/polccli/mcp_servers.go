package polccli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"cuelang.org/go/cue"

	"polc.dev/polc/executor/mcpclient"
	"polc.dev/polc/internal/diag"
)

// MCPServerDecl is one upstream MCP server a session declares
// (mcp_servers: NAME: {command, env}; docs/mcp.md "Upstream servers").
type MCPServerDecl struct {
	// Command is the program and its arguments. A program with a '/' is
	// a path, relative to the session file's directory; one without is
	// looked up in the server's PATH.
	Command []string `json:"command"`
	// Env is added to the server's environment (PATH and HOME, polc's),
	// overriding them.
	Env map[string]string `json:"env"`
}

// mcpServerName is the form of a declared server's name: letters, digits
// and '-', with single '_' between them. polc mcp offers a server's tool
// as SERVER__TOOL, so a name never holds "__" nor ends with '_': the
// first "__" of a tool name is the server's end.
var mcpServerName = regexp.MustCompile(`^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$`)

// maxMCPServerName bounds a server's name, leaving most of the 64
// characters of a coding agent's tool name to the tool.
const maxMCPServerName = 32

// maxMCPServers bounds how many servers a session declares.
const maxMCPServers = 32

// envName is the form of an environment variable's name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var mcpServerMembers = []string{"command", "env"}

// checkMCPServers checks the mcp_servers member of a scenario node v,
// each problem at its position: a mapping of names of mcpServerName's
// form to mappings of command (a non-empty list of non-empty strings)
// and env (a mapping of variable names to strings), nothing else, no
// null, no NUL in any string.
func checkMCPServers(v cue.Value) scenarioErrors {
	node := v.LookupPath(cue.MakePath(cue.Str("mcp_servers")))
	if !node.Exists() || node.Kind() != cue.StructKind {
		return nil // absent, or not a mapping: checkMembers says so
	}
	var errs scenarioErrors
	add := func(at cue.Value, format string, args ...any) {
		errs = append(errs, posOr(at, fmt.Sprintf(format, args...)))
	}
	it, err := node.Fields()
	if err != nil {
		return scenarioErrors{err}
	}
	n := 0
	for it.Next() {
		name := label(it.Selector())
		sv := it.Value()
		where := "mcp_servers." + name
		if n++; n > maxMCPServers {
			add(sv, "mcp_servers: more than %d servers", maxMCPServers)
			break
		}
		if !mcpServerName.MatchString(name) || len(name) > maxMCPServerName {
			add(sv, "mcp_servers: server name %q: want 1 to %d letters, digits and '-', with single '_' between them (polc mcp offers its tools as NAME__TOOL)", name, maxMCPServerName)
			continue
		}
		if sv.IsNull() || sv.Kind() != cue.StructKind {
			add(sv, "%s: want a mapping {command, env}, got %s", where, kindName(sv.Kind()))
			continue
		}
		fields, err := sv.Fields()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hasCommand := false
		for fields.Next() {
			member, x := label(fields.Selector()), fields.Value()
			switch {
			case !slices.Contains(mcpServerMembers, member):
				add(x, "unknown field %q", member)
			case x.IsNull():
				add(x, "%s.%s: null where a value is required", where, member)
			case member == "command":
				hasCommand = true
				errs = append(errs, checkCommand(x, where+".command")...)
			default:
				errs = append(errs, checkServerEnv(x, where+".env")...)
			}
		}
		if !hasCommand {
			add(sv, "%s: needs a command: [program, arguments…]", where)
		}
	}
	return errs
}

// checkCommand checks a server's command node.
func checkCommand(x cue.Value, where string) scenarioErrors {
	if x.Kind() != cue.ListKind {
		return scenarioErrors{posOr(x, fmt.Sprintf("%s: want a list [program, arguments…], got %s", where, kindName(x.Kind())))}
	}
	var errs scenarioErrors
	items, _ := x.List()
	i := 0
	for ; items.Next(); i++ {
		s, err := items.Value().String()
		switch {
		case err != nil:
			errs = append(errs, posOr(items.Value(), fmt.Sprintf("%s[%d]: want a string, got %s", where, i, kindName(items.Value().Kind()))))
		case i == 0 && s == "":
			errs = append(errs, posOr(items.Value(), fmt.Sprintf("%s[0]: the program is empty", where)))
		case strings.ContainsRune(s, 0):
			errs = append(errs, posOr(items.Value(), fmt.Sprintf("%s[%d]: holds a NUL, which no program can take", where, i)))
		}
	}
	if i == 0 {
		errs = append(errs, posOr(x, where+": needs a program"))
	}
	return errs
}

// checkServerEnv checks a server's env node.
func checkServerEnv(x cue.Value, where string) scenarioErrors {
	if x.Kind() != cue.StructKind {
		return scenarioErrors{posOr(x, fmt.Sprintf("%s: want a mapping NAME: value, got %s", where, kindName(x.Kind())))}
	}
	var errs scenarioErrors
	fields, err := x.Fields()
	if err != nil {
		return scenarioErrors{err}
	}
	for fields.Next() {
		name, val := label(fields.Selector()), fields.Value()
		s, serr := val.String()
		switch {
		case !envName.MatchString(name):
			errs = append(errs, posOr(val, fmt.Sprintf("%s: %q is not a variable name (letters, digits and '_', not starting with a digit)", where, name)))
		case serr != nil:
			errs = append(errs, posOr(val, fmt.Sprintf("%s.%s: want a string, got %s", where, name, kindName(val.Kind()))))
		case strings.ContainsRune(s, 0):
			errs = append(errs, posOr(val, fmt.Sprintf("%s.%s: holds a NUL, which no environment can", where, name)))
		}
	}
	return errs
}

// label is a selector's name as written.
func label(s cue.Selector) string {
	if s.LabelType() == cue.StringLabel {
		return s.Unquoted()
	}
	return s.String()
}

// mcpServers are the session's declared servers, sorted by name, ready
// to start: each program resolved (against base, the session file's
// directory, or the server's PATH) and its environment made. A program
// that cannot be found is a positioned error.
func (s *session) mcpServers(base, workspace string) ([]mcpclient.Server, error) {
	out, name, err := resolveServers(s.sc.MCPServers, base, workspace)
	if err != nil {
		return nil, s.mcpServerErr(name, err)
	}
	return out, nil
}

// resolveServers is mcpServers' work on the declarations decls: on error,
// the name of the server it is about.
func resolveServers(decls map[string]MCPServerDecl, base, workspace string) ([]mcpclient.Server, string, error) {
	var out []mcpclient.Server
	for _, name := range sortedKeys(decls) {
		d := decls[name]
		env := launchEnv(d.Env)
		prog := d.Command[0]
		switch {
		case filepath.IsAbs(prog):
		case strings.ContainsRune(prog, '/'):
			prog = filepath.Join(base, prog)
		default:
			found, err := lookPath(prog, env)
			if err != nil {
				return nil, name, fmt.Errorf("command %q: %v", prog, err)
			}
			prog = found
		}
		argv := append([]string{prog}, d.Command[1:]...)
		out = append(out, mcpclient.Server{Name: name, Argv: argv, Env: env, Dir: workspace})
	}
	return out, "", nil
}

// serverFiles are the files the servers run, which an agent that changed
// them would run its own code through every call of theirs: each
// server's program and each argument that names an existing regular file
// (relative to the server's working directory), absolute.
func serverFiles(servers []mcpclient.Server) []string {
	var out []string
	for _, srv := range servers {
		for i, a := range srv.Argv {
			if a == "" {
				continue
			}
			if !filepath.IsAbs(a) {
				if i == 0 {
					continue // not found: mcpServers refused it
				}
				a = filepath.Join(srv.Dir, a)
			}
			if fi, err := os.Stat(a); i == 0 || err == nil && fi.Mode().IsRegular() {
				out = append(out, filepath.Clean(a))
			}
		}
	}
	return out
}

// mcpServerErr reports err of a declared server at its declaration.
func (s *session) mcpServerErr(name string, err error) error {
	pos := diag.Pos{File: diag.Rel(s.e.dir, s.scenPath)}
	if pe := s.sc.mcpAt[name]; pe != nil {
		pos.Line, pos.Col = pe.line, pe.col
	}
	return reportOne(s.e, pos, diag.CodeInvalidInput, "mcp_servers.%s: %v", name, err)
}

// launchEnv is a server's whole environment: polc's PATH (a default
// when it has none) and HOME, then the declared variables, which
// override them. Nothing else of polc's environment reaches a server.
func launchEnv(declared map[string]string) []string {
	vars := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}
	if p, ok := os.LookupEnv("PATH"); ok && p != "" {
		vars["PATH"] = p
	}
	if h, ok := os.LookupEnv("HOME"); ok {
		vars["HOME"] = h
	}
	for k, v := range declared {
		vars[k] = v
	}
	var env []string
	for _, k := range sortedKeys(vars) {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// lookPath finds a program without '/' in the PATH of env: the first
// regular, executable file of that name in an absolute PATH entry (a
// relative entry would depend on the working directory, so is skipped).
func lookPath(prog string, env []string) (string, error) {
	var path string
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = p
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("not found in the server's PATH")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
