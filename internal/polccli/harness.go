package polccli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"polc.dev/polc/compiler"
	"polc.dev/polc/harness"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/snapshot"
)

// A governed harness plan reads its polc session file as polc mcp will
// (harness cannot import this package, which owns the format).
func init() { harness.InspectSession = inspectSession }

// inspectSession reads the session file at the absolute path and its
// snapshot (relative to the session file, as openSession resolves it):
// the facts a governed plan checks and pins. What polc mcp would refuse
// of the file is refused here, each problem at its line and column. The
// files its MCP servers run are found as polc mcp finds them, their
// arguments taken from workspace, where the run starts them.
func inspectSession(path, workspace string) (*harness.SessionFacts, error) {
	sc, err := loadScenario(path, false)
	if err != nil {
		var errs scenarioErrors
		if !errors.As(err, &errs) {
			errs = scenarioErrors{err}
		}
		msgs := make([]string, len(errs))
		for i, err := range errs {
			if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
				return nil, err
			}
			msgs[i] = fmt.Sprintf("%s: %v", posIn(path, err), err)
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	if len(sc.ReportedUsage) > 0 {
		return nil, fmt.Errorf("%s: reported_usage [%s]: an MCP client has no way to report usage; remove it", path, strings.Join(sc.ReportedUsage, ", "))
	}
	snapPath := sc.Snapshot
	if !filepath.IsAbs(snapPath) {
		snapPath = filepath.Join(filepath.Dir(path), snapPath)
	}
	snapPath = filepath.Clean(snapPath)
	data, err := os.ReadFile(snapPath)
	if err != nil {
		return nil, fmt.Errorf("its snapshot: %w", err)
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("its snapshot %s: %v", snapPath, err)
	}
	servers, name, err := resolveServers(sc.MCPServers, filepath.Dir(path), workspace)
	if err != nil {
		return nil, fmt.Errorf("%s: mcp_servers.%s: %v", path, name, err)
	}
	return &harness.SessionFacts{Snapshot: snapPath, SnapshotDigest: snap.Digest, Profile: sc.Profile, Backend: sc.Backend,
		ServerFiles: serverFiles(servers)}, nil
}

func newHarnessCmd(e *env) *cobra.Command {
	c := &cobra.Command{Use: "harness", Short: "Probe provider CLIs, compile harness plans and run them"}
	c.AddCommand(newHarnessProbeCmd(e), newHarnessPlanCmd(e), newHarnessRunCmd(e))
	return c
}

type harnessProbeParams struct {
	provider, executable, format string
}

func newHarnessProbeCmd(e *env) *cobra.Command {
	p := &harnessProbeParams{}
	c := &cobra.Command{
		Use:   "probe [--provider P] [--executable PATH]",
		Short: "Identify installed provider CLIs (runs EXE --version)",
		Long: `probe finds each provider's CLI (on PATH, then in the providers cache that
.ci/install-providers fills), hashes it, runs --version (parsing stdout only)
and says whether polc has a capability table for that version. Exit 0 when
every probed CLI is supported, 1 when one is not, 2 when one cannot be run.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return runHarnessProbe(c.Context(), e, p) },
	}
	c.Flags().StringVar(&p.provider, "provider", "", "probe only this provider: "+strings.Join(harness.Providers, ", "))
	c.Flags().StringVar(&p.executable, "executable", "", "probe this executable (needs --provider)")
	c.Flags().StringVar(&p.format, "format", "text", "text or json")
	return c
}

func runHarnessProbe(ctx context.Context, e *env, p *harnessProbeParams) error {
	if p.executable != "" && p.provider == "" {
		return usagef("--executable needs --provider")
	}
	if p.format != "text" && p.format != "json" {
		return usagef("--format %q: want text or json", p.format)
	}
	provs := harness.Providers
	if p.provider != "" {
		if _, err := harness.For(p.provider); err != nil {
			return usagef("%v", err)
		}
		provs = []string{p.provider}
	}
	var results []*harness.ProbeResult
	code := 0
	for _, prov := range provs {
		r, err := harness.Probe(ctx, prov, p.executable, harness.ProbeOptions{})
		if err != nil {
			fmt.Fprintf(e.stderr, "polc: %v\n", err)
			code = ExitUsage
			continue
		}
		if !r.Supported && code == 0 {
			code = ExitFindings
		}
		results = append(results, r)
	}
	if p.format == "json" {
		if results == nil {
			results = []*harness.ProbeResult{}
		}
		b, _ := json.MarshalIndent(results, "", "  ")
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		for _, r := range results {
			state := "supported"
			if !r.Supported {
				state = "unsupported: " + r.Reason
			}
			fmt.Fprintf(e.stdout, "%s %s %s sha256:%s %s\n", r.Provider, r.Version, r.Executable, r.SHA256[:16], state)
		}
	}
	if code != 0 {
		return &exitError{code}
	}
	return nil
}

type harnessPlanParams struct {
	name       string
	paths      []string
	executable string
	format     string
	prompt     string
}

func newHarnessPlanCmd(e *env) *cobra.Command {
	p := &harnessPlanParams{}
	c := &cobra.Command{
		Use:   "plan NAME PATH... [--format json]",
		Short: "Compile a harness into a plan and capability report",
		Long: `plan loads the declarations, probes the harness's provider CLI, compiles the
plan and prints its capability report: every requested control is enforced,
degraded or unsupported, with who enforces it (provider, os-sandbox:<name>,
harness) and why. --format json prints {"plan": …, "report": …}. Exit 0
when the plan may be spawned, 1 when a required control is not enforced or
an optional one is neither enforced nor in allow_degraded, 2 on usage or
compile errors.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			p.name, p.paths = args[0], args[1:]
			return runHarnessPlan(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&p.executable, "executable", "", "the provider CLI to plan for (default: found like probe)")
	c.Flags().StringVar(&p.format, "format", "text", "text or json")
	return c
}

// loadHarness loads one harness and compiles its plan.
func loadHarness(ctx context.Context, e *env, name string, paths []string, executable string) (*harness.Plan, *harness.CapabilityReport, error) {
	d, diags := compiler.Load(compiler.Config{Dir: e.dir}, paths)
	if diags.HasErrors() {
		return nil, nil, report(e, diags, diag.FormatText)
	}
	h := d.LookupHarness(name)
	if h == nil {
		var names []string
		for _, x := range d.Harnesses {
			names = append(names, x.Name)
		}
		diags.Add(diag.Pos{}, diag.CodeHarnessMissing, "no harness %q in %s (declared: %s)", name, strings.Join(paths, " "), strings.Join(names, ", "))
		return nil, nil, report(e, diags, diag.FormatText)
	}
	spec, sd := harness.FromDeclaration(h, e.dir)
	diags = append(diags, sd...)
	if diags.HasErrors() {
		return nil, nil, report(e, diags, diag.FormatText)
	}
	if len(diags) > 0 {
		diag.Print(e.stderr, diags, diag.FormatText)
	}
	probe, err := harness.Probe(ctx, spec.Provider, executable, harness.ProbeOptions{})
	if err != nil {
		fmt.Fprintf(e.stderr, "polc: %v\n", err)
		return nil, nil, &exitError{ExitUsage}
	}
	plan, rep, err := harness.Compile(spec, probe)
	var uv *harness.UnsupportedVersionError
	if errors.As(err, &uv) {
		printReport(e.stdout, rep)
		fmt.Fprintf(e.stderr, "polc: %v\n", err)
		return nil, rep, &exitError{ExitFindings}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %s: %v\n", h.Pos, diag.CodeHarnessCompile, err)
		return nil, nil, &exitError{ExitUsage}
	}
	return plan, rep, nil
}

func runHarnessPlan(ctx context.Context, e *env, p *harnessPlanParams) error {
	if p.format != "text" && p.format != "json" {
		return usagef("--format %q: want text or json", p.format)
	}
	plan, rep, err := loadHarness(ctx, e, p.name, p.paths, p.executable)
	if err != nil {
		return err
	}
	if p.format == "json" {
		b, err := json.MarshalIndent(struct {
			Plan   *harness.Plan             `json:"plan"`
			Report *harness.CapabilityReport `json:"report"`
		}{plan, rep}, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		fmt.Fprintf(e.stdout, "plan %s %s (%s %s) digest %s\n", plan.Harness, plan.Profile, plan.Provider, plan.ProviderVersion, plan.Digest)
		printSandbox(e.stdout, plan)
		printReport(e.stdout, rep)
	}
	return blocking(e, rep)
}

func blocking(e *env, rep *harness.CapabilityReport) error {
	b := rep.Blocking()
	if len(b) == 0 {
		return nil
	}
	fmt.Fprintf(e.stderr, "polc: %v\n", &harness.NotEnforcedError{Harness: rep.Harness, Results: b})
	return &exitError{ExitFindings}
}

// printSandbox prints which sandbox holds the provider: polc's (what it
// grants, as the plan's os_sandbox says) or the provider's own (the
// helpers its claims rest on), so that the text shows what the JSON does.
func printSandbox(w io.Writer, plan *harness.Plan) {
	o := plan.OSSandbox
	if o == nil {
		var helpers []string
		for _, h := range plan.SandboxHelpers {
			helpers = append(helpers, h.Name+" "+h.Path)
		}
		if helpers == nil {
			helpers = []string{"none"}
		}
		fmt.Fprintf(w, "%-11s provider's own (helpers: %s)\n", "sandbox", strings.Join(helpers, ", "))
		return
	}
	net := "network " + o.Network
	switch o.Network {
	case "proxy":
		net += " (egress proxy admits " + strings.Join(o.Hosts, ", ") + ")"
	case "allow":
		net += " (the host's network)"
	}
	if o.ModelForward != "" {
		net += ", model endpoint " + o.ModelForward + " forwarded"
	}
	fmt.Fprintf(w, "%-11s polc (%s): %s\n", "sandbox", o.Name, net)
	for _, g := range []struct {
		name  string
		paths []string
	}{{"write", o.Write}, {"read", o.Read}, {"execute", o.Execute}, {"deny", o.Deny}} {
		if len(g.paths) > 0 {
			fmt.Fprintf(w, "            %s: %s\n", g.name, strings.Join(g.paths, ", "))
		}
	}
}

// printReport prints one line per control: status, capability, flags,
// sources and reason.
func printReport(w io.Writer, r *harness.CapabilityReport) {
	for _, c := range r.All() {
		var flags []string
		if c.Required {
			flags = append(flags, "required")
		}
		if c.AllowedDegraded {
			flags = append(flags, "allowed-degraded")
		}
		var srcs []string
		for _, s := range c.Sources {
			srcs = append(srcs, s.By+" ("+s.Scope+")")
		}
		if srcs == nil {
			srcs = []string{"none"}
		}
		f := ""
		if flags != nil {
			f = " [" + strings.Join(flags, ",") + "]"
		}
		fmt.Fprintf(w, "%-11s %s%s\n            by: %s\n            %s\n", c.Status, c.Capability, f, strings.Join(srcs, "; "), c.Reason)
	}
}

type harnessRunParams struct {
	harnessPlanParams
}

func newHarnessRunCmd(e *env) *cobra.Command {
	p := &harnessRunParams{}
	c := &cobra.Command{
		Use:   "run NAME PATH... --prompt TEXT",
		Short: "Compile, preflight and run a harness, printing its observations",
		Long: `run compiles the plan (as plan does), refuses it when a control blocks the
spawn, runs the provider's offline validators, then starts the provider with
exactly the plan's argv, environment and directory and prints one JSON
observation per line on stdout. Observations are what the provider reported,
never evidence. Exit 0 when the provider exited 0, 1 when the plan was
refused, the provider failed or the attestation did not match, 2 on usage
or compile errors.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			p.name, p.paths = args[0], args[1:]
			return runHarnessRun(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&p.executable, "executable", "", "the provider CLI to run (default: found like probe)")
	c.Flags().StringVar(&p.prompt, "prompt", "", "the prompt (required)")
	return c
}

func runHarnessRun(ctx context.Context, e *env, p *harnessRunParams) error {
	if p.prompt == "" {
		return usagef("run: --prompt is required")
	}
	plan, rep, err := loadHarness(ctx, e, p.name, p.paths, p.executable)
	if err != nil {
		return err
	}
	if err := blocking(e, rep); err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	res, err := harness.Spawn(ctx, plan, harness.SpawnOptions{Prompt: p.prompt, Getenv: os.LookupEnv,
		OnObservation: func(o harness.Observation) { enc.Encode(o) }})
	if err != nil {
		fmt.Fprintf(e.stderr, "polc: %v\n", err)
		return &exitError{ExitFindings}
	}
	if res.Stopped != "" || res.ExitCode != 0 {
		fmt.Fprintf(e.stderr, "polc: %s exited %d (stopped: %q)\n%s", plan.Provider, res.ExitCode, res.Stopped, res.Stderr)
		return &exitError{ExitFindings}
	}
	if res.Certificate != "" {
		// stdout is one observation per line; where the session's
		// evidence went is said on stderr, last.
		fmt.Fprintf(e.stderr, "polc harness run: governed session closed: evidence %s, certificate %s\n", plan.Governed.Evidence, res.Certificate)
	}
	return nil
}
