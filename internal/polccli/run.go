package polccli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"
	cueyaml "cuelang.org/go/encoding/yaml"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/certificate"
	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/strictjson"
	"polc.dev/polc/normalize"
)

type runParams struct {
	scenario string
	snapshot string
	// workspace overrides the scenario's workspace (--workspace).
	workspace string
	evidence  string
	cert      string
	signKey   string
	state     string
	format    string
	// showOutput prints each action's result (polc run --show-output).
	showOutput bool
	now        string
	idSeed     int
	// backend overrides the scenario's backend (--backend).
	backend string
	// expectSnapshot, when set, is the digest the session's snapshot must
	// have (--expect-snapshot of polc serve and polc mcp): a governed
	// harness plan pins the snapshot it was made from.
	expectSnapshot string
	// approvals are signed approvals presented with every action
	// (--approval), beside the scenario's; trust holds the approver
	// keys they are checked against (--trust); approvalRequests is where
	// an escalated action's approval request is written
	// (--approval-requests). docs/approvals.md.
	approvals        []string
	trust            string
	approvalRequests string
	// approvalDir is polc mcp's --approvals: where a retried call's
	// approval is read, <approval request id>.approval
	// (docs/approvals.md). socket is the Unix socket polc serve or polc
	// mcp listens on (--listen unix:PATH). Both are the session's files,
	// which its actions must not reach (protectedPaths).
	approvalDir string
	socket      string
}

// Scenario is a polc run input file (YAML or JSON).
type Scenario struct {
	Snapshot  string `json:"snapshot"`
	Profile   string `json:"profile"`
	Workspace string `json:"workspace"`
	Principal string `json:"principal"`
	Tenant    string `json:"tenant"`
	// Backend is the effect backend the session's actions run under:
	// "inprocess" (the default) or "landlock" (docs/containment.md).
	Backend string `json:"backend"`
	// ReportedUsage lists the budget kinds the runtime driving this
	// session reports (tokens, cost_microunits): a scenario's usage
	// steps, polc serve's POST /v1/usage. A policy limiting a kind not
	// listed denies every action (budget_unaccounted): its limit could
	// never bind.
	ReportedUsage []string `json:"reported_usage"`
	// Secrets names values polc run --show-output must never print, each
	// by reference (env:NAME or file:/path, as a harness's secret
	// variables): each is replaced by [redacted:NAME] in what is shown.
	Secrets map[string]any `json:"secrets"`
	// Approvals are files of signed approvals (polc approve) presented
	// with every action: one lifts the escalation it is bound to
	// (docs/approvals.md).
	Approvals []string `json:"approvals"`
	// MCPServers are the upstream MCP servers the session's mcp action
	// calls (mcp:<server>/<tool>), by name; polc mcp offers their tools
	// (docs/mcp.md "Upstream servers").
	MCPServers map[string]MCPServerDecl `json:"mcp_servers"`
	Actions    []ScenarioAction         `json:"actions"`

	// secretAt is where each secret is named (for an error reading it);
	// mcpAt where each MCP server is declared (for an error starting it).
	secretAt map[string]*posError
	mcpAt    map[string]*posError
}

// ScenarioAction is one step of a scenario: an action, or usage the
// runtime reports (the tokens and cost of a model turn), charged to the
// session's budgets.
type ScenarioAction struct {
	ID        string         `json:"id"`
	Action    string         `json:"action"`
	Arguments map[string]any `json:"arguments"`
	Timeout   string         `json:"timeout"`
	Usage     map[string]any `json:"usage"`
	// Expect is the outcome the step must have: a kind ("denied"), or
	// {kind, reason} (reason: the reason code). A run whose outcomes
	// differ from their expectations exits 1, so a scenario is a test.
	Expect any `json:"expect"`

	expect *expectation // Expect, checked
}

// reportableUsage are the budget kinds a runtime reports; the executor
// counts calls and measures wall_microseconds itself.
var reportableUsage = []string{"tokens", "cost_microunits"}

// usageOf reads a usage mapping ({tokens, cost_microunits}: integers >=
// 0, as JSON numbers) into a normalize.Usage.
func usageOf(m map[string]any) (normalize.Usage, error) {
	var u normalize.Usage
	for _, k := range slices.Sorted(maps.Keys(m)) {
		n, ok := m[k].(json.Number)
		if !ok {
			return u, fmt.Errorf("usage %s: want an integer >= 0", k)
		}
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v < 0 {
			return u, fmt.Errorf("usage %s: %s is not an integer >= 0", k, n)
		}
		switch k {
		case "tokens":
			u.Tokens = v
		case "cost_microunits":
			u.CostMicrounits = v
		default:
			return u, fmt.Errorf("usage: unknown member %q (want %s)", k, strings.Join(reportableUsage, ", "))
		}
	}
	return u, nil
}

func newRunCmd(e *env) *cobra.Command {
	p := &runParams{}
	c := &cobra.Command{
		Use:   "run SCENARIO [--evidence DIR] [--cert FILE] [--sign-key KEY] [--format json]",
		Short: "Execute a scenario under a snapshot through the executor",
		Long: `run executes each action of a scenario (YAML: snapshot, profile, workspace,
principal, tenant, actions: [{id, action, arguments, timeout}]) through the
executor's 14 stages with the built-in actions bash (a real subprocess: argv,
or sh -c only when the policy allows shell control), read_file, write_file,
edit_file and http_get, and mcp:SERVER/TOOL on the MCP servers the
scenario declares in mcp_servers (docs/mcp.md). Actions are checked against their descriptors
(names and argument JSON Schemas) before any runs, and every problem of
the scenario is reported. --show-output prints each action's result
(output, file content, response body), the values of the scenario's
secrets redacted and each text cut at 4096 bytes. An action with expect:
KIND or expect: {kind: KIND, reason: CODE} must have that outcome.
Profiles governed and certifiable write the evidence
chain to --evidence DIR (DIR/<chain_id>.jsonl); certifiable also writes the
task certificate to --cert FILE, signed as a DSSE envelope with --sign-key (a
polc keygen signer key). certverify cert verifies what it writes. Budgets
are accounted per principal, tenant and policy: in memory (minimal), or in
the --state FILE SQLite database, so that a restart does not reset them
(durable; governed and certifiable when the policy has budgets). An
escalated action's approval request is written to --approval-requests DIR;
signed approvals (polc approve), from the scenario's approvals: [FILE…] or
--approval FILE, are presented with every action and checked against the
approver keys of --trust FILE, spent approvals recorded in --state FILE
(docs/approvals.md). Exit 0 when
the scenario ran and every outcome met its expect, 1 when one did not, or a
certificate could not be minted or evidence failed, 2 on bad input.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.scenario = args[0]
			return runRun(c.Context(), e, p)
		},
	}
	sessionFlags(c, p, "scenario")
	c.Flags().StringVar(&p.format, "format", "text", "text or json")
	c.Flags().StringVar(&p.approvalRequests, "approval-requests", "", "directory where each escalated action's approval request is written (<id>.json); not inside the workspace")
	c.Flags().BoolVar(&p.showOutput, "show-output", false, fmt.Sprintf("print each action's result (secrets redacted, each text cut at %d bytes)", maxShownText))
	return c
}

// sessionFlags registers the flags of a session (polc run, polc serve).
func sessionFlags(c *cobra.Command, p *runParams, file string) {
	c.Flags().StringVar(&p.snapshot, "snapshot", "", "snapshot file, overriding the "+file+"'s")
	c.Flags().StringVar(&p.workspace, "workspace", "", "workspace directory, overriding the "+file+"'s")
	c.Flags().StringVar(&p.evidence, "evidence", "", "directory of the evidence chains, or a postgres:// DSN (governed, certifiable)")
	c.Flags().StringVar(&p.cert, "cert", "", "certificate output file (certifiable)")
	c.Flags().StringVar(&p.signKey, "sign-key", "", "signer key (polc keygen) to sign the certificate as DSSE")
	c.Flags().StringVar(&p.backend, "backend", "", "effect backend, overriding the "+file+"'s: inprocess or landlock (docs/containment.md)")
	c.Flags().StringVar(&p.state, "state", "", "SQLite state database, or a postgres:// DSN (durable; governed and certifiable: where budget usage is accounted)")
	c.Flags().StringVar(&p.now, "now", "", "fixed clock, RFC 3339 (reproducible runs)")
	c.Flags().StringArrayVar(&p.approvals, "approval", nil, "signed approval file (polc approve) presented with every action; repeatable")
	c.Flags().StringVar(&p.trust, "trust", "", "trust file naming the approver keys (approver:<class> <vkey>) approvals are checked against")
	c.Flags().IntVar(&p.idSeed, "id-seed", 0, "derive ids from this seed instead of randomness (reproducible runs)")
	c.Flags().MarkHidden("now")
	c.Flags().MarkHidden("id-seed")
}

// expectSnapshotFlag registers --expect-snapshot (polc serve, polc mcp).
func expectSnapshotFlag(c *cobra.Command, p *runParams) {
	c.Flags().StringVar(&p.expectSnapshot, "expect-snapshot", "", "refuse to start unless the session's snapshot has this digest (64 lowercase hex)")
}

// loadScenario decodes a YAML or JSON scenario strictly. A file that
// parses is checked whole: every problem found is returned (a
// scenarioErrors when there are several), so that one run names them all.
// Actions are checked against the built-in registry (scenarioRegistry):
// an unknown action or arguments its descriptor's JSON Schema refuses are
// errors before anything runs, not outcomes of a run half done.
func loadScenario(path string, needActions bool) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if line, col, problem := compiler.NotText(data); problem != "" {
		return nil, &posError{line, col, problem + ": a scenario must be UTF-8 text without NUL bytes"}
	}
	if err := scenarioJSON(path, data); err != nil {
		return nil, err
	}
	f, err := cueyaml.Extract(path, data)
	if err != nil {
		return nil, atYAMLProblem(path, data, cueError(path, err))
	}
	if err := scenarioSizes(f); err != nil {
		return nil, err
	}
	v := cuecontext.New().BuildFile(f)
	if err := v.Err(); err != nil {
		return nil, atYAMLProblem(path, data, cueError(path, err))
	}
	raw, err := v.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if errs := checkMembers(v); len(errs) > 0 {
		return nil, errs.err()
	}
	var s Scenario
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	var errs scenarioErrors
	add := func(path cue.Path, format string, args ...any) {
		errs = append(errs, errAt(v, path, format, args...))
	}
	var missing []string
	for _, m := range []struct{ name, value string }{{"snapshot", s.Snapshot}, {"profile", s.Profile}, {"workspace", s.Workspace}, {"principal", s.Principal}} {
		if m.value == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		// An absent member has no node; an empty one is positioned.
		add(cue.MakePath(cue.Str(missing[0])), "a scenario needs snapshot, profile, workspace and principal: %s missing or empty", strings.Join(missing, ", "))
	}
	switch {
	case needActions && len(s.Actions) == 0:
		add(cue.MakePath(cue.Str("actions")), "a scenario needs actions")
	case !needActions && len(s.Actions) > 0:
		add(cue.MakePath(cue.Str("actions")), "a session has no actions: they come as requests")
	case !needActions && s.Secrets != nil:
		add(cue.MakePath(cue.Str("secrets")), "a session shows no output: secrets are for polc run --show-output")
	}
	switch executor.Profile(s.Profile) {
	case executor.ProfileMinimal, executor.ProfileDurable, executor.ProfileGoverned, executor.ProfileCertifiable, "":
	default:
		// Not left to the executor, which would deny every action
		// (unknown_profile) of a run that exits 0.
		add(cue.MakePath(cue.Str("profile")), "profile %q: want minimal, durable, governed or certifiable", s.Profile)
	}
	if s.Backend != "" && !slices.Contains(backendNames, s.Backend) {
		add(cue.MakePath(cue.Str("backend")), "backend %q: want %s", s.Backend, strings.Join(backendNames, " or "))
	}
	if kind, id, ok := strings.Cut(s.Principal, ":"); s.Principal != "" && (!ok || kind == "" || id == "") {
		add(cue.MakePath(cue.Str("principal")), "principal %q: want kind:id", s.Principal)
	}
	for i, k := range s.ReportedUsage {
		if !slices.Contains(reportableUsage, k) {
			add(cue.MakePath(cue.Str("reported_usage"), cue.Index(i)), "reported_usage[%d]: %q: want %s (the executor counts calls and measures wall_microseconds itself)", i, k, strings.Join(reportableUsage, " or "))
		}
	}
	errs = append(errs, checkSecrets(v, s.Secrets)...)
	s.secretAt = map[string]*posError{}
	for name := range s.Secrets {
		if pe, ok := errAt(v, cue.MakePath(cue.Str("secrets"), cue.Str(name)), "").(*posError); ok {
			s.secretAt[name] = pe
		}
	}
	s.mcpAt = map[string]*posError{}
	for name := range s.MCPServers {
		if pe, ok := errAt(v, cue.MakePath(cue.Str("mcp_servers"), cue.Str(name)), "").(*posError); ok {
			s.mcpAt[name] = pe
		}
	}
	first := map[string]int{}
	if !needActions {
		s.Actions = nil // refused above; a session's actions are not checked
	}
	for i, a := range s.Actions {
		at := func(member string) cue.Path {
			if member == "" {
				return cue.MakePath(cue.Str("actions"), cue.Index(i))
			}
			return cue.MakePath(cue.Str("actions"), cue.Index(i), cue.Str(member))
		}
		switch j, dup := first[a.ID]; {
		case a.ID == "":
			add(at("id"), "actions[%d]: needs an id", i)
		case dup:
			add(at("id"), "actions[%d]: id %q is also the id of actions[%d]; ids must be unique", i, a.ID, j)
		default:
			first[a.ID] = i
		}
		step := fmt.Sprintf("actions[%d] (id %s)", i, a.ID)
		switch {
		case a.Action == "" && a.Usage == nil:
			add(at("action"), "%s: needs an action (or usage, which the runtime reports)", step)
		case a.Usage != nil && (a.Action != "" || a.Arguments != nil || a.Timeout != ""):
			add(at("usage"), "%s: a usage step has no action, arguments or timeout", step)
		case a.Action != "":
			errs = append(errs, checkArguments(v, at(""), step, a, s.MCPServers)...)
		}
		// Checked before any action runs: a bad timeout found at its
		// action would stop a run that had already had effects.
		if _, err := parseTimeout(a.Timeout); err != nil {
			add(at("timeout"), "%s: %v", step, err)
		}
		if _, err := usageOf(a.Usage); err != nil {
			add(at("usage"), "%s: %v", step, err)
		}
		if a.Expect != nil {
			x, xerrs := expectationOf(v.LookupPath(at("expect")), a.Usage != nil)
			for _, err := range xerrs {
				errs = append(errs, prefixed(step, err))
			}
			s.Actions[i].expect = &x
		}
	}
	if len(errs) > 0 {
		return nil, errs.err()
	}
	return &s, nil
}

// scenarioErrors are the problems of one scenario, each a posError (or,
// with no node to point at, a plain error).
type scenarioErrors []error

func (e scenarioErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.As find the first posError.
func (e scenarioErrors) Unwrap() []error { return e }

// err is nil for no problem, the problem itself for one, else e.
func (e scenarioErrors) err() error {
	switch len(e) {
	case 0:
		return nil
	case 1:
		return e[0]
	}
	return e
}

// prefixed puts prefix in front of err's message, keeping its position.
func prefixed(prefix string, err error) error {
	if pe, ok := err.(*posError); ok {
		return &posError{pe.line, pe.col, prefix + ": " + pe.msg}
	}
	return fmt.Errorf("%s: %v", prefix, err)
}

// errAt is a scenario error at the node of path, or, where the node is
// absent, at its nearest enclosing node; with no node at all (a member
// missing from the top level), the file alone.
func errAt(v cue.Value, path cue.Path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	for sel := path.Selectors(); len(sel) > 0; sel = sel[:len(sel)-1] {
		if pos := v.LookupPath(cue.MakePath(sel...)).Pos(); pos.IsValid() {
			return &posError{pos.Line(), pos.Column(), msg}
		}
	}
	return errors.New(msg)
}

var (
	scenarioMembers = strictjson.Fields(reflect.TypeFor[Scenario]())
	actionMembers   = strictjson.Fields(reflect.TypeFor[ScenarioAction]())
	scenarioKinds   = memberKinds(reflect.TypeFor[Scenario]())
	actionKinds     = memberKinds(reflect.TypeFor[ScenarioAction]())
)

// memberKinds maps each JSON member of a scenario struct to the kind of
// value it decodes from.
func memberKinds(t reflect.Type) map[string]cue.Kind {
	kinds := map[string]cue.Kind{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // not decoded
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch f.Type.Kind() {
		case reflect.String:
			kinds[name] = cue.StringKind
		case reflect.Slice:
			kinds[name] = cue.ListKind
		case reflect.Map:
			kinds[name] = cue.StructKind
		case reflect.Interface:
			kinds[name] = cue.StringKind | cue.StructKind // expect: a kind, or {kind, reason}
		default:
			panic(fmt.Sprintf("scenario member %s: no kind for %v", name, f.Type)) // a programming error, caught at init
		}
	}
	return kinds
}

func kindName(k cue.Kind) string {
	switch k {
	case cue.StringKind:
		return "a string"
	case cue.ListKind:
		return "a list"
	case cue.StructKind:
		return "a mapping"
	case cue.StringKind | cue.StructKind:
		return "a string or a mapping"
	}
	return k.String()
}

// posOr is msg at x's position, or without one when x has none.
func posOr(x cue.Value, msg string) error {
	if pos := x.Pos(); pos.IsValid() {
		return &posError{pos.Line(), pos.Column(), msg}
	}
	return errors.New(msg)
}

// checkMembers rejects, at its position, a member of the scenario or of one
// of its actions that the format does not declare, names compared exactly
// (encoding/json would match them case-insensitively, so "Profile" would
// silently override profile), or that is null (encoding/json would leave
// the member unset).
func checkMembers(v cue.Value) scenarioErrors {
	var errs scenarioErrors
	check := func(x cue.Value, where string, declared []string, kinds map[string]cue.Kind) {
		if x.Kind() != cue.StructKind {
			if where != "" { // at the top, the decoder reports the type
				errs = append(errs, posOr(x, fmt.Sprintf("%s: want a mapping, got %s", strings.TrimSuffix(where, "."), kindName(x.Kind()))))
			}
			return
		}
		it, err := x.Fields()
		if err != nil {
			errs = append(errs, err)
			return
		}
		for it.Next() {
			sel := it.Selector()
			name := sel.String()
			if sel.LabelType() == cue.StringLabel {
				name = sel.Unquoted()
			}
			var msg string
			switch {
			case !slices.Contains(declared, name):
				msg = fmt.Sprintf("unknown field %q", name)
			case it.Value().IsNull():
				msg = fmt.Sprintf("%s%s: null where a value is required", where, name)
			case it.Value().Kind()&kinds[name] == 0:
				// The decoder would say this too, without a position.
				msg = fmt.Sprintf("%s%s: want %s, got %s", where, name, kindName(kinds[name]), kindName(it.Value().Kind()))
			default:
				continue
			}
			errs = append(errs, posOr(it.Value(), msg))
		}
	}
	check(v, "", scenarioMembers, scenarioKinds)
	errs = append(errs, checkMCPServers(v)...)
	actions, err := v.LookupPath(cue.MakePath(cue.Str("actions"))).List()
	if err != nil {
		return errs // absent or not a list: the decoder and the checks below report it
	}
	for i := 0; actions.Next(); i++ {
		check(actions.Value(), fmt.Sprintf("actions[%d].", i), actionMembers, actionKinds)
	}
	return errs
}

// cueError turns a scenario's YAML or CUE error into a posError: the
// message without the file name and position in front of it, which the
// diagnostic prints once. The YAML decoder's errors are plain text,
// "FILE:LINE: message" with no column, or "FILE: message" with no line.
func cueError(path string, err error) error {
	if line, msg, ok := compiler.SplitLineError(err, path); ok {
		return &posError{line, 0, msg}
	}
	for _, e := range cueerrors.Errors(err) {
		for _, p := range append([]token.Pos{e.Position()}, e.InputPositions()...) {
			if p.IsValid() {
				format, args := e.Msg()
				msg := fmt.Sprintf(format, args...)
				if field := strings.Join(e.Path(), "."); field != "" {
					msg = field + ": " + msg
				}
				return &posError{p.Line(), p.Column(), msg}
			}
		}
	}
	return err
}

// atYAMLProblem moves a YAML syntax error of cueError (a line, no column)
// to the line of its problem.
func atYAMLProblem(path string, data []byte, err error) error {
	if pe, ok := err.(*posError); ok && pe.line > 0 && pe.col == 0 {
		return &posError{compiler.YAMLProblemLine(path, data, pe.line, pe.msg), 0, pe.msg}
	}
	return err
}

// posError is a scenario error at a line and column.
type posError struct {
	line, col int
	msg       string
}

func (e *posError) Error() string { return e.msg }

type runOutcome struct {
	ID          string  `json:"id"`
	Kind        string  `json:"kind"`
	Profile     string  `json:"profile"`
	ReasonCode  string  `json:"reason_code"`
	OperationID *string `json:"operation_id"`
	// Output is the action's result as shown (--show-output only):
	// secrets redacted, text bounded.
	Output any `json:"output,omitempty"`
	// ApprovalRequest is the file an escalated action's approval request
	// was written to (--approval-requests).
	ApprovalRequest *string `json:"approval_request,omitempty"`
	// Expect and ExpectMet are the step's expectation and whether the
	// outcome met it (steps with an expect only).
	Expect    *expectation `json:"expect,omitempty"`
	ExpectMet *bool        `json:"expect_met,omitempty"`
	// detail is the text output's why: the detail of the trail's last
	// entry that has one, for an outcome other than succeeded (JSON
	// keeps the members; the trail is the executor's).
	detail string
}

// outcomeDetail is the detail of the last trail entry that has one,
// passing over stage 14's commit: a durable denial's why is the stage
// that decided it, not "attempt committed" (a failed commit is shown).
func outcomeDetail(b *executor.OutcomeBase) string {
	for i := len(b.Trail) - 1; i >= 0; i-- {
		t := b.Trail[i]
		if t.Detail != "" && !(t.Stage == 14 && t.Result == executor.TrailOK) {
			return t.Detail
		}
	}
	return ""
}

// judge records whether o meets x (nil: no expectation) and returns 1
// when it does not.
func (o *runOutcome) judge(x *expectation) int {
	if x == nil {
		return 0
	}
	met := o.Kind == x.Kind && (x.Reason == "" || o.ReasonCode == x.Reason)
	o.Expect, o.ExpectMet = x, &met
	if met {
		return 0
	}
	return 1
}

// countExpected is the number of outcomes with an expectation.
func countExpected(os []runOutcome) int {
	n := 0
	for _, o := range os {
		if o.Expect != nil {
			n++
		}
	}
	return n
}

// String is the expectation as a scenario writes it.
func (x *expectation) String() string {
	if x.Reason == "" {
		return x.Kind
	}
	return x.Kind + " (" + x.Reason + ")"
}

type runReport struct {
	Outcomes    []runOutcome   `json:"outcomes"`
	Evidence    map[string]any `json:"evidence"`
	Certificate map[string]any `json:"certificate"`
}

func runRun(ctx context.Context, e *env, p *runParams) error {
	if p.format != "text" && p.format != "json" {
		return usagef("--format %q: want text or json", p.format)
	}
	s, err := openSession(e, p, true)
	if err != nil {
		return err
	}
	defer s.release()
	rep := runReport{Outcomes: []runOutcome{}}
	failed := false
	unmet := 0 // steps whose outcome is not their expect
	for _, a := range s.sc.Actions {
		if a.Usage != nil {
			u, _ := usageOf(a.Usage) // checked when the scenario was loaded
			o := runOutcome{ID: a.ID, Kind: "usage_charged", Profile: string(s.ec.Profile)}
			if err := s.ex.Charge(ctx, s.ec, u); err != nil {
				o.Kind, o.ReasonCode, o.detail = "usage_refused", executor.ReasonBudgetUnavailable, err.Error()
				failed = true
			}
			unmet += o.judge(a.expect)
			rep.Outcomes = append(rep.Outcomes, o)
			continue
		}
		out, err := s.execute(ctx, a.Action, a.Arguments, a.Timeout)
		if err != nil {
			return s.inputErr(s.scenPath, fmt.Errorf("action %s: %v", a.ID, err))
		}
		b := out.Base()
		o := runOutcome{ID: a.ID, Kind: string(out.Kind()), Profile: string(b.Profile), ReasonCode: b.ReasonCode, OperationID: b.OperationID}
		if out.Kind() != executor.KindSucceeded {
			o.detail = outcomeDetail(b)
		}
		if res, ok := resultOf(out); ok && p.showOutput {
			o.Output = shown(res, s.secrets)
			if o.Output == nil {
				o.Output = map[string]any{"result": nil}
			}
		}
		if esc, ok := out.(*executor.Escalated); ok && p.approvalRequests != "" {
			path, err := s.writeApprovalRequest(&esc.Approval)
			if err != nil {
				return err
			}
			o.ApprovalRequest = &path
		}
		unmet += o.judge(a.expect)
		rep.Outcomes = append(rep.Outcomes, o)
		if b.EvidenceError != nil || b.StateError != nil {
			failed = true
		}
	}
	var closeFailed error
	rep.Evidence, rep.Certificate, closeFailed, err = s.finish(ctx)
	if err != nil {
		return err
	}
	failed = failed || closeFailed != nil
	if p.format == "json" {
		if err := printJSON(e, rep); err != nil {
			return err
		}
	} else {
		for _, o := range rep.Outcomes {
			if o.detail != "" {
				fmt.Fprintf(e.stdout, "%-16s %-10s %s (%s)\n", o.ID, o.Kind, o.ReasonCode, o.detail)
			} else {
				fmt.Fprintf(e.stdout, "%-16s %-10s %s\n", o.ID, o.Kind, o.ReasonCode)
			}
			if o.ApprovalRequest != nil {
				fmt.Fprintf(e.stdout, "    approval request: %s\n", *o.ApprovalRequest)
			}
			if o.ExpectMet != nil && !*o.ExpectMet {
				fmt.Fprintf(e.stdout, "    expected %s\n", o.Expect)
			}
			if o.Output != nil {
				printOutput(e.stdout, o.Output)
			}
		}
		if rep.Evidence != nil {
			fmt.Fprintf(e.stdout, "evidence: %s (%v records, head %s)\n", rep.Evidence["path"], rep.Evidence["records"], rep.Evidence["head"])
		}
		if rep.Certificate != nil {
			fmt.Fprintf(e.stdout, "certificate: %s (%s)\n", rep.Certificate["path"], rep.Certificate["process_grade"])
		}
	}
	if expected := countExpected(rep.Outcomes); expected > 0 {
		fmt.Fprintf(e.stderr, "polc: %d of %d expectations met\n", expected-unmet, expected)
	}
	if failed || unmet > 0 {
		return &exitError{ExitFindings}
	}
	return nil
}

// certificateBytes is the certificate file: canonical JSON, or a DSSE
// envelope signed with signer (a polc keygen signer key) when it is set.
func certificateBytes(c *certificate.Certificate, signer note.Signer) ([]byte, error) {
	if signer == nil {
		b, err := c.Marshal()
		return append(b, '\n'), err
	}
	return certificate.Sign(c, signer)
}
