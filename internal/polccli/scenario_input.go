package polccli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/normalize"
)

// scenarioJSON checks a .json scenario as JSON before the YAML decoder
// reads it: its first problem is reported at its line and column (the
// decoder, which reads JSON too, names only a line, often not the
// problem's, and accepts what JSON does not, such as duplicate members).
func scenarioJSON(path string, data []byte) error {
	if !strings.HasSuffix(path, ".json") {
		return nil
	}
	var se *jcs.SyntaxError
	if _, err := jcs.Check(data); errors.As(err, &se) {
		return &posError{se.Line, se.Col, se.Msg}
	} else if err != nil {
		return err
	}
	return nil
}

// scenarioSizes bounds a scenario's literals before CUE evaluates it, as
// declarations' are (compiler.LiteralSizes): CUE's evaluation is
// quadratic in a list's length.
func scenarioSizes(f ast.Node) error {
	if pos, msg := compiler.LiteralSizes(f); msg != "" {
		return &posError{pos.Line(), pos.Column(), msg}
	}
	return nil
}

// scenarioRegistry is a descriptor-only registry of the actions polc run
// has: built exactly as a session's (builtin.Register), so that a scenario
// is checked against the descriptors it will run with.
var scenarioRegistry = sync.OnceValue(func() *executor.Registry {
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{}); err != nil {
		panic("polc run: built-in actions: " + err.Error()) // a programming error
	}
	return reg
})

// argumentSchemas caches each built-in action's compiled argument schema.
var argumentSchemas sync.Map // action id → *jsonschema.Schema

// argumentSchema compiles the argument JSON Schema of d.
func argumentSchema(d normalize.ActionDescriptor) (*jsonschema.Schema, error) {
	if s, ok := argumentSchemas.Load(d.ID); ok {
		return s.(*jsonschema.Schema), nil
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("$ref to %s: argument schemas are self-contained", u)
	}
	const url = "polc:///descriptor/arguments.json"
	if err := c.AddResource(url, bytes.NewReader(d.Arguments)); err != nil {
		return nil, err
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, err
	}
	argumentSchemas.Store(d.ID, s)
	return s, nil
}

// checkArguments checks a step's action and arguments (the node at) against
// the registry: the action must be one polc run has, and its arguments
// must satisfy the descriptor's JSON Schema. Each problem is positioned at
// the node it is about (the argument itself where the schema names one).
func checkArguments(v cue.Value, at cue.Path, step string, a ScenarioAction, servers map[string]MCPServerDecl) []error {
	reg := scenarioRegistry()
	d, ok := reg.Resolve(a.Action)
	arguments := a.Arguments
	if a.Action == "mcp" || strings.HasPrefix(a.Action, "mcp:") {
		// The mcp action is the session's when it declares servers.
		if len(servers) == 0 {
			return []error{errAt(v, appendPath(at, cue.Str("action")), "%s: action %q: the scenario declares no mcp_servers, which the mcp action calls", step, a.Action)}
		}
		var nerr *normalize.NormalizeError
		if arguments, nerr = normalize.MCPShorthand(a.Action, a.Arguments); nerr != nil {
			return []error{errAt(v, appendPath(at, cue.Str("action")), "%s: %s", step, nerr.Detail)}
		} else if arguments == nil {
			arguments = a.Arguments
		}
		for _, bd := range normalize.BuiltinDescriptors() {
			if bd.ID == "mcp" {
				d, ok = bd, true
			}
		}
		if server, isStr := arguments["server"].(string); isStr && server != "" {
			if _, declared := servers[server]; !declared {
				where := appendPath(at, cue.Str("action"))
				if a.Action == "mcp" {
					where = appendPath(at, cue.Str("arguments"), cue.Str("server"))
				}
				return []error{errAt(v, where, "%s: mcp server %q is not declared in mcp_servers (declared: %s)", step, server, strings.Join(sortedKeys(servers), ", "))}
			}
		}
	}
	if !ok {
		var names []string
		for _, bd := range normalize.BuiltinDescriptors() {
			if _, ok := reg.Resolve(bd.ID); ok {
				names = append(names, bd.ID)
			}
		}
		slices.Sort(names)
		has := strings.Join(names, ", ")
		if len(servers) > 0 {
			has += " and mcp:<server>/<tool>"
		}
		return []error{errAt(v, appendPath(at, cue.Str("action")), "%s: action %q: polc run has %s", step, a.Action, has)}
	}
	sch, err := argumentSchema(d)
	if err != nil {
		return []error{fmt.Errorf("%s: action %s: argument schema: %v", step, d.ID, err)}
	}
	var args any = map[string]any{} // absent arguments are none, as the executor reads them
	if arguments != nil {
		args = arguments
	}
	verr := sch.Validate(args)
	if verr == nil {
		return nil
	}
	ve, ok := verr.(*jsonschema.ValidationError)
	if !ok {
		return []error{errAt(v, appendPath(at, cue.Str("arguments")), "%s: arguments of %s: %v", step, d.ID, verr)}
	}
	var errs []error
	var leaves func(e *jsonschema.ValidationError)
	leaves = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				leaves(c)
			}
			return
		}
		where := appendPath(at, cue.Str("arguments"))
		name := "arguments"
		for _, tok := range strings.Split(strings.TrimPrefix(e.InstanceLocation, "/"), "/") {
			if tok == "" {
				continue
			}
			tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
			if n, err := strconv.Atoi(tok); err == nil && n >= 0 && v.LookupPath(where).Kind() == cue.ListKind {
				where, name = appendPath(where, cue.Index(n)), fmt.Sprintf("%s[%d]", name, n)
			} else {
				where, name = appendPath(where, cue.Str(tok)), name+"."+tok
			}
		}
		if extra, ok := strings.CutPrefix(e.Message, "additionalProperties '"); ok {
			// Each undeclared argument at its own name.
			names, _, _ := strings.Cut(extra, "' not allowed")
			for _, n := range strings.Split(names, "', '") {
				errs = append(errs, errAt(v, appendPath(where, cue.Str(n)), "%s: %s of %s: unknown argument %q", step, name, d.ID, n))
			}
			return
		}
		errs = append(errs, errAt(v, where, "%s: %s of %s: %s", step, name, d.ID, e.Message))
	}
	leaves(ve)
	return errs
}

// appendPath is p with sel appended.
func appendPath(p cue.Path, sel ...cue.Selector) cue.Path {
	return cue.MakePath(append(slices.Clone(p.Selectors()), sel...)...)
}

// secretName is the name of a scenario secret: as an environment
// variable's, so that [redacted:NAME] reads plainly.
var secretName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkSecrets checks the scenario's secrets: each NAME: "env:VAR" or
// "file:/path" (the value is read when the run starts).
func checkSecrets(v cue.Value, secrets map[string]any) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		at := cue.MakePath(cue.Str("secrets"), cue.Str(name))
		ref, ok := secrets[name].(string)
		kind, rest, _ := strings.Cut(ref, ":")
		switch {
		case !secretName.MatchString(name):
			errs = append(errs, errAt(v, at, "secrets: %q: a name is letters, digits and '_', not starting with a digit", name))
		case !ok:
			errs = append(errs, errAt(v, at, "secrets.%s: want a reference, env:NAME or file:/path", name))
		case kind == "env" && rest != "", kind == "file" && filepath.IsAbs(rest):
		default:
			errs = append(errs, errAt(v, at, "secrets.%s: %q: want env:NAME or file:/path (an absolute path)", name, ref))
		}
	}
	return errs
}

// expectation is what a step's outcome must be (ScenarioAction.Expect).
type expectation struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason,omitempty"`
}

// expectKinds are the kinds an action's outcome may have; usageKinds a
// usage step's.
var (
	expectKinds = []string{string(executor.KindSucceeded), string(executor.KindDenied), string(executor.KindDeferred),
		string(executor.KindEscalated), string(executor.KindFailed), string(executor.KindCancelled),
		string(executor.KindTimedOut), string(executor.KindAmbiguous)}
	usageKinds = []string{"usage_charged", "usage_refused"}
)

// expectationOf reads an expect node: a kind, or a mapping {kind, reason}
// with no other member. usage says the step reports usage.
func expectationOf(x cue.Value, usage bool) (expectation, scenarioErrors) {
	kinds := expectKinds
	if usage {
		kinds = usageKinds
	}
	var errs scenarioErrors
	kindOK := func(at cue.Value, k string) {
		if !slices.Contains(kinds, k) {
			errs = append(errs, posOr(at, fmt.Sprintf("expect: kind %q: want one of %s", k, strings.Join(kinds, ", "))))
		}
	}
	if s, err := x.String(); err == nil {
		kindOK(x, s)
		return expectation{Kind: s}, errs
	}
	var e expectation
	it, err := x.Fields()
	if err != nil {
		return e, scenarioErrors{posOr(x, "expect: want a kind or {kind, reason}")}
	}
	for it.Next() {
		name := it.Selector().String()
		if it.Selector().LabelType() == cue.StringLabel {
			name = it.Selector().Unquoted()
		}
		s, serr := it.Value().String()
		switch {
		case name != "kind" && name != "reason":
			errs = append(errs, posOr(it.Value(), fmt.Sprintf("expect: unknown field %q (want kind, reason)", name)))
		case serr != nil || s == "":
			errs = append(errs, posOr(it.Value(), fmt.Sprintf("expect.%s: want a non-empty string", name)))
		case name == "kind":
			e.Kind = s
			kindOK(it.Value(), s)
		default:
			e.Reason = s
		}
	}
	if e.Kind == "" && len(errs) == 0 {
		errs = append(errs, posOr(x, "expect: needs a kind"))
	}
	return e, errs
}
