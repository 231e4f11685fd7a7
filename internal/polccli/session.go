package polccli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/executor/builtin"
	"polc.dev/polc/executor/landlock"
	"polc.dev/polc/executor/mcpclient"
	"polc.dev/polc/harness"
	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/keys"
	"polc.dev/polc/pgstore"
	"polc.dev/polc/snapshot"
)

// session is an executor set up from a scenario's header — snapshot,
// profile, workspace, principal, tenant — with the built-in actions, the
// evidence store or state database its profile needs and, governed, an
// open task boundary. polc run drives one with the scenario's actions,
// polc serve with requests.
type session struct {
	e        *env
	p        *runParams
	sc       *Scenario
	scenPath string
	ex       *executor.Executor
	// reg holds the session's actions (polc mcp lists them as tools).
	reg      *executor.Registry
	ec       executor.ExecutionContext
	ids      func() string
	boundary *executor.TaskBoundary
	closers  []func()
	// stop, when set, bounds the closing of the stores at release (a
	// server's abandoned close); nil: each store's own bound.
	stop context.Context
	// signer signs the certificate (--sign-key); read when the session
	// opens, so that a bad key is refused before any action runs.
	signer note.Signer
	// secrets are the values of the scenario's secrets, by name: what
	// polc run --show-output redacts.
	secrets map[string]string
	// approvals are the signed approvals presented with every action
	// (the scenario's and --approval's; polc serve adds those POSTed).
	approvals approvalSet
	// approvalsOn: the executor has approver trust and a nonce ledger.
	approvalsOn bool
	// approvalTrust is the executor's approver trust (--trust), with
	// which polc serve verifies a POSTed approval before holding it.
	approvalTrust *chain.Trust
	// now is the session's clock (--now), the executor's.
	now func() time.Time
	// mcp is the client of the session's declared MCP servers (nil when
	// it declares none): the mcp action's callable.
	mcp *mcpclient.Client
}

// openSession loads p.scenario (with actions for polc run, without for
// polc serve) and sets the session up. Errors are reported as polc run
// reports them (positioned input errors, usage errors).
func openSession(e *env, p *runParams, needActions bool) (_ *session, err error) {
	s := &session{e: e, p: p, scenPath: e.abs(p.scenario)}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	if p.expectSnapshot != "" && !snapshotDigestRe.MatchString(p.expectSnapshot) {
		return nil, usagef("--expect-snapshot %q: want a snapshot digest, 64 lowercase hex characters", p.expectSnapshot)
	}
	if s.sc, err = loadScenario(s.scenPath, needActions); err != nil {
		return nil, s.inputErr(s.scenPath, err)
	}
	// Read before anything runs: a secret that cannot be read stops the
	// run, rather than leave output unredacted.
	if s.secrets, err = resolveSecrets(s.sc.Secrets); err != nil {
		var se *harness.SecretError
		if errors.As(err, &se) && s.sc.secretAt[se.Name] != nil {
			at := s.sc.secretAt[se.Name]
			err = &posError{at.line, at.col, err.Error()}
		}
		return nil, s.inputErr(s.scenPath, err)
	}
	base := filepath.Dir(s.scenPath)
	rel := func(path string) string {
		if filepath.IsAbs(path) {
			return path
		}
		return filepath.Join(base, path)
	}
	snapPath := rel(s.sc.Snapshot)
	if p.snapshot != "" {
		snapPath = e.abs(p.snapshot)
	}
	data, err := os.ReadFile(snapPath)
	if err != nil {
		return nil, s.inputErr(snapPath, err)
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		return nil, s.inputErr(snapPath, err)
	}
	if p.expectSnapshot != "" && snap.Digest != p.expectSnapshot {
		return nil, usagef("--expect-snapshot: the snapshot %s has digest %s, not %s: it is not the snapshot expected (a governed harness plan pins the one it was made from: plan again)",
			diag.Rel(e.dir, snapPath), snap.Digest, p.expectSnapshot)
	}
	kind, id, ok := strings.Cut(s.sc.Principal, ":")
	if !ok || kind == "" || id == "" {
		return nil, s.inputErr(s.scenPath, fmt.Errorf("principal %q: want kind:id", s.sc.Principal))
	}
	ws := filepath.Clean(rel(s.sc.Workspace))
	if p.workspace != "" {
		ws = filepath.Clean(e.abs(p.workspace))
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, s.ioErr(ws, "create directory", err)
	}
	if p.approvalRequests != "" {
		if err := approvalRequestsOutside(e.abs(p.approvalRequests), ws); err != nil {
			return nil, err
		}
	}
	profile := executor.Profile(s.sc.Profile)
	now, err := clockFlag(p.now)
	if err != nil {
		return nil, err
	}
	s.now = now
	s.ids = idsFlag(p.idSeed)
	reg := executor.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{Workspace: ws}); err != nil {
		return nil, err
	}
	s.reg = reg
	backend := s.sc.Backend
	if p.backend != "" {
		backend = p.backend
	}
	if backend == "" {
		backend = executor.InProcessBackendName
	}
	if !slices.Contains(backendNames, backend) {
		return nil, usagef("--backend %q: want %s", backend, strings.Join(backendNames, " or "))
	}
	ll := &landlock.Backend{}
	cfg := executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}, Now: now, IDs: s.ids,
		Backends: []executor.EffectBackend{executor.InProcessBackend{}, ll}}
	governed := profile == executor.ProfileGoverned || profile == executor.ProfileCertifiable
	// A flag the profile would not use is refused, not ignored: an
	// operator who passed --cert expects a certificate.
	switch {
	case p.evidence != "" && !governed:
		return nil, usagef("--evidence is for the governed and certifiable profiles; the profile is %s", profile)
	case (p.cert != "" || p.signKey != "") && profile != executor.ProfileCertifiable:
		return nil, usagef("--cert and --sign-key are for the certifiable profile; the profile is %s", profile)
	case p.state != "" && profile == executor.ProfileMinimal:
		return nil, usagef("--state is for the durable, governed and certifiable profiles; the profile is %s", profile)
	}
	if p.signKey != "" {
		if s.signer, err = keys.ReadSigner(e.abs(p.signKey)); err != nil {
			return nil, usagef("--sign-key: %v", err)
		}
	}
	if governed {
		if p.evidence == "" {
			return nil, usagef("profile %s needs --evidence DIR", profile)
		}
		if pgstore.IsDSN(p.evidence) {
			// PostgreSQL (docs/scale.md): many executors append to one
			// database.
			store, err := pgstore.OpenEvidence(context.Background(), p.evidence, pgstore.EvidenceOptions{})
			if err != nil {
				return nil, usagef("--evidence %s: %v", pgstore.Redact(p.evidence), err)
			}
			s.closers = append(s.closers, func() {
				if s.stop == nil {
					store.Close() // bounded by the store's RetryFor
					return
				}
				// An abandoned close must not then wait on the
				// store's retries (docs/serve.md), nor any close
				// longer than its stores' time.
				ctx, cancel := context.WithTimeout(s.stop, closeStoreTime)
				defer cancel()
				if err := store.CloseContext(ctx); err != nil {
					fmt.Fprintf(s.e.stderr, "polc: %v\n", err)
				}
			})
			cfg.Evidence = store
		} else {
			dir := e.abs(p.evidence)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, s.ioErr(dir, "create directory", err)
			}
			store, err := chain.OpenFileStore(dir)
			if err != nil {
				return nil, s.inputErr(dir, err)
			}
			s.closers = append(s.closers, func() { store.Close() })
			cfg.Evidence = store
		}
	}
	if profile == executor.ProfileCertifiable && p.cert == "" {
		return nil, usagef("profile certifiable needs --cert FILE")
	}
	limited := budgetKinds(snap)
	for _, f := range s.sc.Approvals {
		p.approvals = append(p.approvals, rel(f))
	}
	approvals := len(p.approvals) > 0 || p.trust != ""
	if approvals {
		if err := s.loadApprovals(&cfg, profile); err != nil {
			return nil, err
		}
		s.approvalsOn = true
	}
	switch {
	case profile == executor.ProfileDurable:
		st, closeFn, err := openState(e, p.state, "the durable profile needs --state FILE (a SQLite database) or a postgres:// DSN")
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, closeFn)
		cfg.State, cfg.Budgets = st, st
		cfg.ApprovalLedger = st
	case governed && approvals:
		st, closeFn, err := openState(e, p.state, fmt.Sprintf("profile %s: approvals need --state FILE (a SQLite database), where spent approvals are recorded across restarts", profile))
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, closeFn)
		cfg.Budgets, cfg.ApprovalLedger = st, st
	case governed && (p.state != "" || len(limited) > 0):
		// The executor writes no state for these profiles; the file
		// holds the usage budgets are judged on, which a restart must
		// not reset.
		st, closeFn, err := openState(e, p.state, fmt.Sprintf("profile %s: the policy limits %s; give --state FILE (a SQLite database), where their usage is accounted across restarts", profile, strings.Join(limited, ", ")))
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, closeFn)
		cfg.Budgets = st
	}
	cfg.ReportedUsage = s.sc.ReportedUsage
	for _, k := range limited {
		// The executor refuses every action of such a policy
		// (budget_unaccounted); say why once, up front.
		if slices.Contains(reportableUsage, k) && !slices.Contains(s.sc.ReportedUsage, k) {
			fmt.Fprintf(e.stderr, "polc: warning: the policy limits %s, which no built-in action reports and the session does not list in reported_usage: every action is denied (budget_unaccounted)\n", k)
		}
	}
	// Listed once the stores are open, so that the files they made
	// resolve as they are: no action reaches them, whatever the policy
	// grants; the landlock backend also keeps the processes it contains
	// off them.
	exe, err := executable()
	if err != nil {
		return nil, err
	}
	var servers []mcpclient.Server
	if len(s.sc.MCPServers) > 0 {
		if servers, err = s.mcpServers(base, ws); err != nil {
			return nil, err
		}
	}
	files, programs, err := protectedPaths(e, p, s.scenPath, snapPath, exe, serverFiles(servers))
	if err != nil {
		return nil, usagef("the session's files: %v", err)
	}
	cfg.Guards = append(cfg.Guards, protectGuard(append(slices.Clone(files), programs...)))
	ll.Protect, ll.ProtectWrites = files, programs
	if len(s.sc.MCPServers) > 0 {
		// Last: nothing else can refuse the session once its servers run.
		if err := s.startMCP(reg, servers, ws, backend, snap, ll); err != nil {
			return nil, err
		}
	}
	if s.ex, err = executor.New(cfg); err != nil {
		return nil, s.inputErr(snapPath, err)
	}
	ref := executor.SnapshotRefOf(snap)
	var scope executor.ExecutionScope = executor.EphemeralScope{ID: s.ids()}
	if profile == executor.ProfileDurable {
		scope = executor.DurableRunScope{RunID: s.ids()}
	}
	s.ec = executor.ExecutionContext{ContextID: s.ids(), Scope: scope, Principal: executor.Principal{Kind: kind, ID: id},
		Tenant: s.sc.Tenant, Workspace: ws, Policy: ref, Backend: backend, Profile: profile}
	if governed {
		if s.boundary, err = s.ex.OpenBoundary(ref, profile == executor.ProfileCertifiable); err != nil {
			return nil, err
		}
		s.ec.Boundary = s.boundary
	}
	return s, nil
}

// startMCP starts the session's declared MCP servers and registers
// their client as the mcp action's callable. Under the landlock backend
// each server runs for its whole life in the sandbox a call of the
// session's policy gets (ll's: the session's own files carved out). A server that cannot be started, initialized or
// listed refuses the session, at its declaration; the servers are closed
// with the session.
func (s *session) startMCP(reg *executor.Registry, servers []mcpclient.Server, ws, backend string, snap *snapshot.Snapshot, ll *landlock.Backend) error {
	o := mcpclient.Options{Stderr: s.e.stderr,
		Warn: func(m string) { fmt.Fprintf(s.e.stderr, "polc: warning: %s\n", m) }}
	if backend == landlock.Name {
		sb, err := ll.ServerSandbox(snap, ws)
		if err != nil {
			return reportOne(s.e, diag.Pos{File: diag.Rel(s.e.dir, s.scenPath)}, diag.CodeInvalidInput,
				"mcp_servers: the landlock backend cannot hold the servers to the policy: %v", err)
		}
		s.closers = append(s.closers, sb.Close) // after the servers (closers run last first)
		o.Command = func(srv mcpclient.Server) (*exec.Cmd, error) { return sb.Command(srv.Argv, srv.Env, srv.Dir) }
	}
	c, err := mcpclient.Start(servers, o)
	if se := (*mcpclient.StartError)(nil); errors.As(err, &se) {
		return s.mcpServerErr(se.Server, fmt.Errorf("cannot start: %v", se.Err))
	} else if err != nil {
		return err
	}
	s.closers = append(s.closers, func() { c.Close() })
	s.mcp = c
	return c.Register(reg)
}

// snapshotDigestRe is the form of a snapshot digest (sha256-v1).
var snapshotDigestRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// backendNames are the effect backends a session may name.
var backendNames = []string{executor.InProcessBackendName, landlock.Name}

// budgetKinds are the budget kinds the snapshot limits, in canonical order.
func budgetKinds(snap *snapshot.Snapshot) []string {
	var kinds []string
	for _, r := range snap.CompiledRules {
		if b, ok := r.(*snapshot.BudgetRule); ok && !slices.Contains(kinds, b.BudgetKind) {
			kinds = append(kinds, b.BudgetKind)
		}
	}
	slices.SortFunc(kinds, func(a, b string) int {
		return slices.Index(snapshot.BudgetKinds, a) - slices.Index(snapshot.BudgetKinds, b)
	})
	return kinds
}

// inputErr reports err as a positioned invalid_input diagnostic on file,
// or as io_error "cannot read" when file could not be read.
func (s *session) inputErr(file string, err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		// Unreadable, as every other command reports it.
		return s.ioErr(file, "read", err)
	}
	if errs, ok := err.(scenarioErrors); ok {
		// Every problem of the scenario, each at its position.
		var l diag.List
		for _, err := range errs {
			l.Add(posIn(diag.Rel(s.e.dir, file), err), diag.CodeInvalidInput, "%v", err)
		}
		return report(s.e, l, diag.FormatText)
	}
	return reportOne(s.e, posIn(diag.Rel(s.e.dir, file), err), diag.CodeInvalidInput, "%v", err)
}

// ioErr reports err as io_error "cannot <what>" on file. The operation is
// the caller's: a certificate that cannot be written or a workspace that
// cannot be created is not "cannot read".
func (s *session) ioErr(file, what string, err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		err = pe.Err // file names the path
	}
	return reportOne(s.e, diag.Pos{File: diag.Rel(s.e.dir, file)}, diag.CodeIO, "cannot %s: %v", what, err)
}

// posIn is err's position in file: its line and column when it is a
// posError (cueError), the file alone otherwise.
func posIn(file string, err error) diag.Pos {
	pos := diag.Pos{File: file}
	if pe, ok := err.(*posError); ok {
		pos.Line, pos.Col = pe.line, pe.col
	}
	return pos
}

// clockFlag is the clock of a --now flag (or, when the flag is empty, of
// the POLC_NOW environment variable): time.Now when both are empty, else
// one that starts there and advances a millisecond per reading, which
// keeps records ordered in time while staying reproducible.
func clockFlag(now string) (func() time.Time, error) {
	t, ok, err := nowFlag(now)
	if err != nil || !ok {
		return time.Now, err
	}
	// Atomic: polc serve reads the clock from concurrent requests.
	var n atomic.Int64
	return func() time.Time { return t.Add(time.Duration(n.Add(1)) * time.Millisecond) }, nil
}

// fixedClock is the clock of a --now flag (or POLC_NOW) for commands that
// judge declarations at one instant (vet, compile, test, diff, eval): a
// clock that always reads that instant, or time.Now when both are empty.
// Expiry warnings and decisions depend on it, so CI can pin the day.
func fixedClock(now string) (func() time.Time, error) {
	t, ok, err := nowFlag(now)
	if err != nil || !ok {
		return time.Now, err
	}
	return func() time.Time { return t }, nil
}

// nowFlag parses --now, or POLC_NOW when the flag is empty; ok is false
// when neither is set.
func nowFlag(now string) (t time.Time, ok bool, err error) {
	src := "--now"
	if now == "" {
		now, src = os.Getenv("POLC_NOW"), "POLC_NOW"
	}
	if now == "" {
		return time.Time{}, false, nil
	}
	t, err = time.Parse(time.RFC3339Nano, now)
	if err != nil {
		return time.Time{}, false, usagef("%s %q: want RFC 3339", src, now)
	}
	return t, true, nil
}

// nowUsage is the help text of the --now flag of the commands that judge
// declarations at one instant.
const nowUsage = "judge expiry at this RFC 3339 instant instead of the clock (default: $POLC_NOW, else now)"

// idsFlag is the id source of an --id-seed flag: random UUIDs for 0, else
// ids derived from the seed and a counter (reproducible runs).
func idsFlag(seed int) func() string {
	if seed == 0 {
		return executor.NewUUID
	}
	// Atomic: polc serve draws ids from concurrent requests, and two
	// requests must never share one.
	var n atomic.Int64
	return func() string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", seed, n.Add(1)) }
}

// execute runs one action through the executor under the session's
// context; timeout is a Go duration ("" for none). The error is about the
// input (a bad timeout); everything else is in the outcome.
func (s *session) execute(ctx context.Context, action string, args map[string]any, timeout string) (executor.Outcome, error) {
	return s.executeWith(ctx, action, args, timeout, nil)
}

// executeWith is execute presenting extra, signed approvals of this call
// alone (polc mcp's retried call), beside the session's.
func (s *session) executeWith(ctx context.Context, action string, args map[string]any, timeout string, extra [][]byte) (executor.Outcome, error) {
	req := executor.ExecutionRequest{RequestID: s.ids(), Action: action, Arguments: args, Scope: s.ec.Scope,
		Approvals: append(s.approvals.all(), extra...)}
	d, err := parseTimeout(timeout)
	if err != nil {
		return nil, err
	}
	req.Timeout = d
	return s.ex.Execute(ctx, req, s.ec), nil
}

// parseTimeout parses an action's timeout: "" for none, else a positive Go
// duration.
func parseTimeout(timeout string) (time.Duration, error) {
	if timeout == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(timeout)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("timeout %q is not a positive duration", timeout)
	}
	return d, nil
}

// finish closes the task boundary (governed) and writes the certificate
// (certifiable). It returns the evidence and certificate summaries polc
// run prints, failed (also said on stderr) when the boundary could not be
// closed or the certificate not minted, and err for an error to return
// (the certificate could not be signed or written).
func (s *session) finish(ctx context.Context) (evidence, cert map[string]any, failed, err error) {
	if s.boundary == nil {
		return nil, nil, nil, nil
	}
	res, cerr := s.ex.CloseBoundary(ctx, s.boundary)
	if res != nil {
		evidence = map[string]any{"chain_id": s.boundary.ChainID(), "head": res.Head.String(), "records": res.Records}
		if pgstore.IsDSN(s.p.evidence) {
			// polc evidence export writes the chain's JSONL.
			evidence["store"] = pgstore.Redact(s.p.evidence)
		} else {
			evidence["path"] = diag.Rel(s.e.dir, filepath.Join(s.p.evidence, s.boundary.ChainID()+".jsonl"))
		}
	}
	if cerr != nil {
		fmt.Fprintf(s.e.stderr, "polc: %v\n", cerr)
		return evidence, nil, cerr, nil
	}
	if res.Certificate == nil {
		return evidence, nil, nil, nil
	}
	out, err := certificateBytes(res.Certificate, s.signer)
	if err != nil {
		return evidence, nil, err, err
	}
	certPath := s.e.abs(s.p.cert)
	if err := atomicfile.WriteFile(certPath, out, 0o644); err != nil {
		err = s.ioErr(certPath, "write", err)
		return evidence, nil, err, err
	}
	cert = map[string]any{"path": diag.Rel(s.e.dir, certPath), "certificate_id": res.Certificate.CertificateID,
		"process_grade": res.Certificate.ProcessGrade, "signed": s.signer != nil}
	return evidence, cert, nil, nil
}

// release closes the stores.
func (s *session) release() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}
